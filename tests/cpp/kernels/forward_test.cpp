// Block forward vs the fp64 reference over masks, lengths, head dims, GQA, dtypes and block
// decompositions of whole problems; what the conformance suite (tests/conformance) does not hold
// each block to: accumulation onto an empty result, a block without segments, strided outputs.

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "attention_problem.hpp"
#include "spattn/error.hpp"

namespace spattn::test {
namespace {

// fp32 compute (inputs of any dtype are exact in fp32): error relative to the largest value.
constexpr double kOutTolerance = 1e-5;
constexpr double kLseTolerance = 1e-5;

class ForwardTest : public ::testing::TestWithParam<AttentionCase> {};

TEST_P(ForwardTest, MatchesFp64Reference) {
  const AttentionProblem problem(GetParam());
  const ReferenceResult reference = problem.reference(false);
  auto kernels = make_cpu_block_kernels();
  std::vector<double> out, lse;
  problem.run_forward(*kernels, out, lse);
  if (HasFatalFailure()) return;
  EXPECT_LE(relative_error(out, reference.out), kOutTolerance);
  EXPECT_LE(relative_error(lse, reference.lse), kLseTolerance);
}

INSTANTIATE_TEST_SUITE_P(Cases, ForwardTest, ::testing::ValuesIn(attention_cases()),
                         [](const ::testing::TestParamInfo<AttentionCase>& info) { return info.param.name(); });

/// Runs one forward block and returns (out, lse) as fp64 vectors.
struct BlockResult {
  std::vector<double> out, lse;
};

BlockResult forward_block(BlockKernels& kernels, const TensorView& q, int64_t q_position,
                          const std::vector<KvSegment>& segments, const AttentionMask& mask, float scale) {
  HostTensor out(DType::f32, {q.size(0), q.size(1), q.size(2), q.size(3)});
  HostTensor lse(DType::f32, {q.size(0), q.size(2), q.size(1)});
  out.poison();
  lse.poison();
  kernels.forward(ForwardBlock{q, q_position, segments, mask, scale, out.view(), lse.view()});
  return {out.values(), lse.values()};
}

class ForwardBlockTest : public ::testing::Test {
 protected:
  ForwardBlockTest() : q(DType::f32, {2, 70, 4, 64}), k(DType::f32, {2, 300, 2, 64}), v(DType::f32, {2, 300, 2, 64}) {
    std::mt19937 generator(7);
    q.randomize(generator);
    k.randomize(generator);
    v.randomize(generator);
  }
  KvSegment segment(int64_t begin, int64_t length) const {
    return KvSegment{k.view().slice(1, begin, length), v.view().slice(1, begin, length), begin};
  }
  HostTensor q, k, v;
  std::unique_ptr<BlockKernels> kernels = make_cpu_block_kernels();
  AttentionMask mask{40, 10};  // a window, so that some key tiles are hidden and some partial
  float scale = 0.125f;
};

TEST_F(ForwardBlockTest, AccumulatingIntoAnEmptyResultIgnoresItsOutput) {
  // lse = -inf everywhere: nothing yet, whatever out holds (NaN here) is not read.
  const int64_t q_position = 130;
  const BlockResult one = forward_block(*kernels, q.view(), q_position, {segment(0, 300)}, mask, scale);
  HostTensor running_out(DType::f32, {2, 70, 4, 64});
  HostTensor running_lse(DType::f32, {2, 4, 70});
  running_out.poison();
  for (int64_t i = 0; i < running_lse.view().numel(); ++i)
    running_lse.set(i, -std::numeric_limits<float>::infinity());
  ForwardBlock block{q.view(), q_position, {segment(0, 300)}, mask, scale, running_out.view(), running_lse.view()};
  block.accumulate = true;
  kernels->forward(block);
  EXPECT_EQ(running_out.values(), one.out);
  EXPECT_EQ(running_lse.values(), one.lse);
}

TEST_F(ForwardBlockTest, NoSegmentsGiveZeroAndMinusInfinity) {
  // A block with no key segment at all (the conformance suite covers rows whose segments are all
  // masked): every row gets out 0 and lse -inf.
  const BlockResult none = forward_block(*kernels, q.view(), 0, {}, mask, scale);
  for (double value : none.out) ASSERT_EQ(value, 0.0);
  for (double value : none.lse) ASSERT_EQ(value, -std::numeric_limits<double>::infinity());
}

TEST_F(ForwardBlockTest, WritesIntoStridedOutputs) {
  // out and lse as slices of bigger tensors: the seq range [5, 75) of 80 rows.
  const BlockResult contiguous = forward_block(*kernels, q.view(), 130, {segment(0, 300)}, mask, scale);
  HostTensor big_out(DType::f32, {2, 80, 4, 64});
  HostTensor big_lse(DType::f32, {2, 4, 80});
  big_out.poison();
  big_lse.poison();
  kernels->forward(ForwardBlock{q.view(), 130, {segment(0, 300)}, mask, scale, big_out.view().slice(1, 5, 70),
                                big_lse.view().slice(2, 5, 70)});
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t s = 0; s < 80; ++s)
      for (int64_t h = 0; h < 4; ++h) {
        const bool inside = s >= 5 && s < 75;
        const float lse = big_lse.at((b * 4 + h) * 80 + s);
        ASSERT_EQ(std::isnan(lse), !inside) << "lse written outside its slice, or not inside";
        if (inside) ASSERT_EQ(lse, contiguous.lse[static_cast<std::size_t>((b * 4 + h) * 70 + s - 5)]);
        for (int64_t d = 0; d < 64; ++d) {
          const float out = big_out.at(((b * 80 + s) * 4 + h) * 64 + d);
          ASSERT_EQ(std::isnan(out), !inside);
          if (inside) ASSERT_EQ(out, contiguous.out[static_cast<std::size_t>(((b * 70 + s - 5) * 4 + h) * 64 + d)]);
        }
      }
}

TEST(ForwardChecks, RejectsMismatchedShapes) {
  auto kernels = make_cpu_block_kernels();
  HostTensor q(DType::f32, {1, 8, 3, 16}), k(DType::f32, {1, 8, 2, 16}), out(DType::f32, {1, 8, 3, 16}),
      lse(DType::f32, {1, 3, 8});
  // 3 heads over 2 kv heads is not a GQA grouping.
  EXPECT_THROW(kernels->forward(ForwardBlock{q.view(), 0, {KvSegment{k.view(), k.view(), 0}}, AttentionMask{}, 1.0f,
                                             out.view(), lse.view()}),
               Error);
}

}  // namespace
}  // namespace spattn::test
