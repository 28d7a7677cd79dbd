// merge on the GPU against the CPU kernels, for strided views of every partial dtype: rows that
// saw no key on either side or both (-inf lse), large lse gaps, and NaN in rows of weight zero
// that must never reach the result (contiguous tensors: the conformance suite, tests/conformance,
// against fp64). Tolerance ~1e-6 relative: expf and log1pf of the GPU and of the C library differ
// in the last bit, and the GPU fuses out*w + out_b*w_b.

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>

#include "cuda_test_support.hpp"

namespace spattn::test {
namespace {

constexpr double kMinusInfinity = -std::numeric_limits<double>::infinity();
constexpr double kOutAbsolute = 2e-6, kOutRelative = 2e-6;
constexpr double kLseAbsolute = 1e-6, kLseRelative = 1e-6;

/// The (running lse, partial lse) pair of row kind `kind`: the cases merge must get right.
std::pair<double, double> lse_pair(int kind, std::mt19937& generator) {
  std::uniform_real_distribution<double> ordinary(-4.0, 4.0);
  switch (kind % 8) {
    case 0: return {kMinusInfinity, kMinusInfinity};          // neither side saw a key
    case 1: return {kMinusInfinity, ordinary(generator)};     // only the partial saw keys
    case 2: return {ordinary(generator), kMinusInfinity};     // only the running side did
    case 3: return {60.0, -40.0};                             // gap 100: partial weight underflows
    case 4: return {-35.0, 50.0};                             // gap 85: running weight underflows
    case 5: return {20.0, 20.0 - 30.0 * (kind % 3 + 1) / 3};  // gaps of 10 to 30
    default: return {ordinary(generator), ordinary(generator)};
  }
}

/// Fills the (B, H, S) lse views by row kind, and puts NaN in the out rows whose lse is -inf:
/// a side without keys has weight 0 and its out must never be read.
void prepare_rows(const TensorView& running_out, const TensorView& running_lse, const TensorView& partial_out,
                  const TensorView& partial_lse, std::mt19937& generator) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  int kind = 0;
  for (int64_t b = 0; b < running_out.size(0); ++b)
    for (int64_t s = 0; s < running_out.size(1); ++s)
      for (int64_t h = 0; h < running_out.size(2); ++h, ++kind) {
        const auto [running, partial] = lse_pair(kind, generator);
        set_element(running_lse, {b, h, s, 0}, running);
        set_element(partial_lse, {b, h, s, 0}, partial);
        for (int64_t d = 0; d < running_out.size(3); ++d) {
          if (running == kMinusInfinity) set_element(running_out, {b, s, h, d}, nan);
          if (partial == kMinusInfinity) set_element(partial_out, {b, s, h, d}, nan);
        }
      }
}

using Merge = CudaKernelTest;

TEST_F(Merge, MatchesTheCpuForStridedViews) {
  for (DType dtype : {DType::f32, DType::f16, DType::bf16}) {
    SCOPED_TRACE("partial " + dtype_name(dtype));
    // running out: a slice along heads; partial out: a slice along seq of a (B, H, S, D) buffer
    // seen as (B, S, H, D); running lse: a slice along seq; partial lse: (B, H, S) seen through a
    // (B, S, H) buffer.
    HostTensor running_out(DType::f32, {2, 37, 6, 40});
    HostTensor partial_out(dtype, {2, 3, 45, 40});
    HostTensor running_lse(DType::f32, {2, 3, 50});
    HostTensor partial_lse(DType::f32, {2, 37, 3});
    running_out.randomize(generator_);  // outside the view: must stay as it is
    partial_out.randomize(generator_);
    running_lse.poison();  // outside the view: must stay NaN
    const TensorView running_out_view = running_out.view().slice(2, 2, 3);                    // (2, 37, 3, 40)
    const TensorView partial_out_view = seq_heads_transposed(partial_out.view()).slice(1, 5, 37);  // (2, 37, 3, 40)
    const TensorView running_lse_view = running_lse.view().slice(2, 7, 37);                   // (2, 3, 37)
    TensorView partial_lse_view = partial_lse.view();                                         // (2, 3, 37)
    std::swap(partial_lse_view.shape[1], partial_lse_view.shape[2]);
    std::swap(partial_lse_view.strides[1], partial_lse_view.strides[2]);
    prepare_rows(running_out_view, running_lse_view, partial_out_view, partial_lse_view, generator_);

    DeviceTwin running_out_gpu(*gpu_, running_out), running_lse_gpu(*gpu_, running_lse);
    DeviceTwin partial_out_gpu(*gpu_, partial_out), partial_lse_gpu(*gpu_, partial_lse);
    gpu_->merge(partial_out_gpu.twin(partial_out_view), partial_lse_gpu.twin(partial_lse_view),
                running_out_gpu.twin(running_out_view), running_lse_gpu.twin(running_lse_view));
    cpu_->merge(partial_out_view, partial_lse_view, running_out_view, running_lse_view);
    expect_close(running_out, running_out_gpu.download(), kOutAbsolute, kOutRelative, "merged out (strided)");
    expect_close(running_lse, running_lse_gpu.download(), kLseAbsolute, kLseRelative, "merged lse (strided)");
  }
}

TEST_F(Merge, RowsWithoutKeysOnBothSidesStayZeroAndMinusInfinity) {
  HostTensor running_out(DType::f32, {1, 5, 2, 48});
  HostTensor running_lse(DType::f32, {1, 2, 5});
  HostTensor partial_out(DType::bf16, {1, 5, 2, 48});
  HostTensor partial_lse(DType::f32, {1, 2, 5});
  running_out.poison();
  partial_out.poison();
  running_lse.fill(kMinusInfinity);
  partial_lse.fill(kMinusInfinity);
  DeviceTwin running_out_gpu(*gpu_, running_out), running_lse_gpu(*gpu_, running_lse);
  DeviceTwin partial_out_gpu(*gpu_, partial_out), partial_lse_gpu(*gpu_, partial_lse);
  gpu_->merge(partial_out_gpu.view(), partial_lse_gpu.view(), running_out_gpu.view(), running_lse_gpu.view());
  const HostTensor out = running_out_gpu.download(), lse = running_lse_gpu.download();
  for (int64_t i = 0; i < out.numel(); ++i) ASSERT_EQ(out.at(i), 0.0) << "out element " << i;
  for (int64_t i = 0; i < lse.numel(); ++i) ASSERT_EQ(lse.at(i), kMinusInfinity) << "lse element " << i;
}

}  // namespace
}  // namespace spattn::test
