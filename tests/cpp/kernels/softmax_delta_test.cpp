// softmax_delta() into a strided slice of delta: the row sums of out * dout there and nothing
// written outside (the conformance suite, tests/conformance, holds every dtype to the fp64 sums).

#include <gtest/gtest.h>

#include "host_tensor.hpp"
#include "kernels/block_kernels.hpp"

namespace spattn::test {
namespace {

TEST(SoftmaxDelta, WritesTheRowSumsIntoAStridedSliceOnly) {
  std::mt19937 generator(8);
  auto kernels = make_cpu_block_kernels();
  const DType dtype = DType::bf16;
  const int64_t batch = 2, sequence = 13, heads = 3, head_dim = 72;
  HostTensor out(dtype, {batch, sequence, heads, head_dim}), dout(dtype, {batch, sequence, heads, head_dim});
  out.randomize(generator);
  dout.randomize(generator);
  // delta written into the middle of a longer (B, H, S + 4) tensor.
  HostTensor delta(DType::f32, {batch, heads, sequence + 4});
  delta.poison();
  kernels->softmax_delta(out.view(), dout.view(), delta.view().slice(2, 2, sequence));
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t s = 0; s < sequence + 4; ++s) {
        const float value = delta.at((b * heads + h) * (sequence + 4) + s);
        if (s < 2 || s >= sequence + 2) {
          ASSERT_TRUE(std::isnan(value)) << "written outside the slice";
          continue;
        }
        double expected = 0.0;
        for (int64_t d = 0; d < head_dim; ++d) {
          const int64_t e = ((b * sequence + s - 2) * heads + h) * head_dim + d;
          expected += static_cast<double>(out.at(e)) * dout.at(e);
        }
        ASSERT_NEAR(value, expected, 1e-5 * std::max(1.0, std::abs(expected)));
      }
}

}  // namespace
}  // namespace spattn::test

