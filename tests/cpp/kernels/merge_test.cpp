// merge(): commutativity, the -inf identity, empty rows and large lse gaps (its agreement with the
// closed form in fp64, every dtype: the conformance suite, tests/conformance).

#include <gtest/gtest.h>

#include <limits>

#include "host_tensor.hpp"
#include "kernels/block_kernels.hpp"

namespace spattn::test {
namespace {

constexpr float kMinusInfinity = -std::numeric_limits<float>::infinity();
constexpr int64_t kBatch = 2, kSequence = 9, kHeads = 3, kHeadDim = 20;

struct Partial {
  Partial() : out(DType::f32, {kBatch, kSequence, kHeads, kHeadDim}), lse(DType::f32, {kBatch, kHeads, kSequence}) {}
  HostTensor out;
  HostTensor lse;
  int64_t out_index(int64_t b, int64_t s, int64_t h, int64_t d) const {
    return ((b * kSequence + s) * kHeads + h) * kHeadDim + d;
  }
  int64_t lse_index(int64_t b, int64_t h, int64_t s) const { return (b * kHeads + h) * kSequence + s; }
};

Partial random_partial(std::mt19937& generator) {
  Partial partial;
  partial.out.randomize(generator);
  partial.lse.randomize(generator, 3.0f);
  return partial;
}

/// running <- merge(partial into running)
void merge_into(BlockKernels& kernels, const Partial& partial, Partial& running) {
  kernels.merge(partial.out.view(), partial.lse.view(), running.out.view(), running.lse.view());
}

TEST(Merge, IsCommutativeUpToRounding) {
  std::mt19937 generator(4);
  const Partial a = random_partial(generator), b = random_partial(generator);
  Partial a_then_b = random_partial(generator), b_then_a = random_partial(generator);
  auto kernels = make_cpu_block_kernels();
  // running = a, merge b  vs  running = b, merge a
  kernels->copy(a.out.view(), a_then_b.out.view());
  kernels->copy(a.lse.view(), a_then_b.lse.view());
  kernels->copy(b.out.view(), b_then_a.out.view());
  kernels->copy(b.lse.view(), b_then_a.lse.view());
  merge_into(*kernels, b, a_then_b);
  merge_into(*kernels, a, b_then_a);
  for (int64_t i = 0; i < a_then_b.out.numel(); ++i) EXPECT_NEAR(a_then_b.out.at(i), b_then_a.out.at(i), 1e-6);
  for (int64_t i = 0; i < a_then_b.lse.numel(); ++i) EXPECT_NEAR(a_then_b.lse.at(i), b_then_a.lse.at(i), 1e-6);
}

TEST(Merge, MinusInfinityIsTheIdentityAndEmptyRowsStayEmpty) {
  std::mt19937 generator(5);
  auto kernels = make_cpu_block_kernels();
  const Partial a = random_partial(generator);
  Partial empty;
  empty.out.poison();  // an empty partial's out must never reach the result
  empty.lse.fill(kMinusInfinity);

  Partial running = random_partial(generator);
  kernels->copy(a.out.view(), running.out.view());
  kernels->copy(a.lse.view(), running.lse.view());
  merge_into(*kernels, empty, running);
  for (int64_t i = 0; i < running.out.numel(); ++i) ASSERT_EQ(running.out.at(i), a.out.at(i));
  for (int64_t i = 0; i < running.lse.numel(); ++i) ASSERT_EQ(running.lse.at(i), a.lse.at(i));

  Partial from_empty;
  from_empty.out.fill(0.0f);
  from_empty.lse.fill(kMinusInfinity);
  merge_into(*kernels, a, from_empty);
  for (int64_t i = 0; i < from_empty.out.numel(); ++i) ASSERT_EQ(from_empty.out.at(i), a.out.at(i));
  for (int64_t i = 0; i < from_empty.lse.numel(); ++i) ASSERT_EQ(from_empty.lse.at(i), a.lse.at(i));

  Partial both_empty;
  both_empty.out.fill(0.0f);
  both_empty.lse.fill(kMinusInfinity);
  merge_into(*kernels, empty, both_empty);
  for (int64_t i = 0; i < both_empty.out.numel(); ++i) ASSERT_EQ(both_empty.out.at(i), 0.0f);
  for (int64_t i = 0; i < both_empty.lse.numel(); ++i) ASSERT_EQ(both_empty.lse.at(i), kMinusInfinity);
}

TEST(Merge, LargeLseGapsDoNotOverflow) {
  std::mt19937 generator(6);
  auto kernels = make_cpu_block_kernels();
  const Partial partial = random_partial(generator);
  Partial running = random_partial(generator);
  // Running rows at +1e4 or -1e4 relative to the partial: one side dominates entirely.
  for (int64_t i = 0; i < running.lse.numel(); ++i)
    running.lse.set(i, partial.lse.at(i) + (i % 2 == 0 ? 1e4f : -1e4f));
  const std::vector<double> running_out = running.out.values(), running_lse = running.lse.values();
  merge_into(*kernels, partial, running);
  for (int64_t b = 0; b < kBatch; ++b)
    for (int64_t h = 0; h < kHeads; ++h)
      for (int64_t s = 0; s < kSequence; ++s) {
        const int64_t row = running.lse_index(b, h, s);
        const bool running_dominates = row % 2 == 0;
        const double expected_lse = running_dominates ? running_lse[static_cast<std::size_t>(row)] : partial.lse.at(row);
        ASSERT_EQ(running.lse.at(row), static_cast<float>(expected_lse));
        for (int64_t d = 0; d < kHeadDim; ++d) {
          const int64_t e = running.out_index(b, s, h, d);
          const double expected = running_dominates ? running_out[static_cast<std::size_t>(e)] : partial.out.at(e);
          ASSERT_EQ(running.out.at(e), static_cast<float>(expected));
        }
      }
}

}  // namespace
}  // namespace spattn::test
