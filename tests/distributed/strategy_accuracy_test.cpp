// Every strategy at the rank count of this run, forward and backward, checked against the fp64
// reference with the 2x criterion for out, lse, dq, dk and dv.

#include <gtest/gtest.h>

#include <algorithm>
#include <sstream>
#include <string>
#include <tuple>

#include "accuracy_report.hpp"
#include "distributed_checks.hpp"
#include "distributed_world.hpp"
#include "spattn/error.hpp"
#include "spattn/reference_attention.hpp"
#include "strategy_runner.hpp"

namespace spattn {
namespace {

using AccuracyCase = std::tuple<Algorithm, int /*mask index*/, DType>;

class StrategyAccuracy : public ::testing::TestWithParam<AccuracyCase> {};

TEST_P(StrategyAccuracy, MatchesReferenceForwardAndBackward) {
  const auto [algorithm, mask_index, dtype] = GetParam();
  const AlgorithmSetup setup = algorithm_setup(algorithm, world().size());
  if (!setup.not_applicable.empty()) GTEST_SKIP() << setup.not_applicable;
  const std::string refusal = mask_unsupported(algorithm, kMasks[mask_index].options);  // stripe: no windows
  if (!refusal.empty()) GTEST_SKIP() << refusal;
  // An odd multiple of the unit, so that chunks and slots are not multiples of any kernel tile.
  const int64_t multiple = setup.length_unit >= 26 ? 3 : 13;
  const AttentionShape shape{2, setup.length_unit * multiple, 4, 2, 32, dtype};
  const uint64_t seed = 1000 + static_cast<uint64_t>(mask_index) * 10 + static_cast<uint64_t>(dtype);
  expect_accurate(algorithm, random_problem(shape, kMasks[mask_index].options, seed, /*backward=*/true), setup.options);
}

std::string case_name(const ::testing::TestParamInfo<AccuracyCase>& info) {
  const auto [algorithm, mask_index, dtype] = info.param;
  return algorithm_name(algorithm) + "_" + kMasks[mask_index].name + "_" + dtype_name(dtype);
}

INSTANTIATE_TEST_SUITE_P(AllStrategies, StrategyAccuracy,
                         ::testing::Combine(::testing::Values(Algorithm::ring, Algorithm::zigzag, Algorithm::stripe,
                                                              Algorithm::allgather, Algorithm::hamilton,
                                                              Algorithm::hamilton2),
                                            ::testing::Range(0, 4),
                                            ::testing::Values(DType::f32, DType::bf16, DType::f16)),
                         case_name);

// Chunks longer than a kernel query tile (128 rows), head dim 128, one kv head for two query
// heads' worth of GQA groups (MQA).
class LongChunkAccuracy : public ::testing::TestWithParam<Algorithm> {};

TEST_P(LongChunkAccuracy, CausalMqaHeadDim128) {
  const AttentionShape shape{1, 2 * world().size() * 130, 2, 1, 128, DType::bf16};
  expect_accurate(GetParam(), random_problem(shape, AttentionOptions{true, -1, -1}, 42, /*backward=*/true), {});
}

INSTANTIATE_TEST_SUITE_P(AllStrategies, LongChunkAccuracy,
                         ::testing::Values(Algorithm::ring, Algorithm::zigzag, Algorithm::stripe, Algorithm::allgather),
                         [](const ::testing::TestParamInfo<Algorithm>& info) { return algorithm_name(info.param); });

// All-gather works in steps of several kv heads when there are more than four: 8 kv heads go in
// 4 steps of 2 (16 query heads, GQA 2:1), 12 in 4 steps of 3 (MQA-like groups of 1 query head).
class AllGatherHeadGroups : public ::testing::TestWithParam<std::tuple<int64_t /*heads*/, int64_t /*kv heads*/>> {};

TEST_P(AllGatherHeadGroups, MatchesReferenceForwardAndBackward) {
  const auto [heads, kv_heads] = GetParam();
  const AttentionShape shape{1, 2 * world().size() * 7, heads, kv_heads, 16, DType::f32};
  expect_accurate(Algorithm::allgather, random_problem(shape, AttentionOptions{true, 9, -1}, 61, /*backward=*/true), {});
}

INSTANTIATE_TEST_SUITE_P(KvHeadCounts, AllGatherHeadGroups,
                         ::testing::Values(std::make_tuple(int64_t{16}, int64_t{8}), std::make_tuple(int64_t{12}, int64_t{12})),
                         [](const ::testing::TestParamInfo<std::tuple<int64_t, int64_t>>& info) {
                           return "heads" + std::to_string(std::get<0>(info.param)) + "_kv" +
                                  std::to_string(std::get<1>(info.param));
                         });

// A plan reused across calls gives the same result as the first call (workspace reuse).
TEST(RingAttentionPlan, RepeatedCallsAreIdentical) {
  const int ranks = world().size();
  const AttentionShape shape{1, 2 * ranks * 8, 2, 1, 16, DType::f32};
  const AttentionProblem problem = random_problem(shape, AttentionOptions{true, -1, -1}, 77, true);
  const StrategyRun once = run_strategy(world(), Algorithm::zigzag, problem, 0, 1, false);
  const StrategyRun thrice = run_strategy(world(), Algorithm::zigzag, problem, 1, 2, false);
  expect_identical_outputs(once.outputs, thrice.outputs);
}

// Profiles add up: compute and waiting never exceed the total, per-step entries exist.
TEST(RingAttentionPlan, ProfileIsConsistent) {
  const int ranks = world().size();
  const AttentionShape shape{1, 2 * ranks * 16, 2, 2, 32, DType::f32};
  const AttentionProblem problem = random_problem(shape, {}, 5, true);
  const StrategyRun run = run_strategy(world(), Algorithm::ring, problem, 0, 1, true);
  for (const Profile* profile : {&run.forward, &run.backward})
    expect_consistent_profile(*profile, static_cast<std::size_t>(ranks));
  // Forward: N-1 hops of this rank's K and V (fp32), two messages each. Backward: the same, plus
  // N hops of fp32 dK and dV (the last one home).
  const double shard_bytes = 2.0 * shape.batch * (shape.seq / ranks) * shape.kv_heads * shape.head_dim * sizeof(float);
  EXPECT_EQ(run.forward.bytes_sent, (ranks - 1) * shard_bytes);
  EXPECT_EQ(run.forward.messages_sent, 2 * (ranks - 1));
  EXPECT_EQ(run.backward.bytes_sent, ranks > 1 ? (2 * ranks - 1) * shard_bytes : 0.0);
  EXPECT_EQ(run.backward.messages_sent, ranks > 1 ? 2 * (2 * ranks - 1) : 0);
}

// Causal zigzag keeps its own blocks' gradient (two query chunks: a late part runs beside the
// last hop), so the backward sends N-1 hops of fp32 dK and dV, from the step after the owner's.
TEST(RingAttentionPlan, ZigzagSendsOneGradientHopLessThanTheRing) {
  const int ranks = world().size();
  const AttentionShape shape{1, 2 * ranks * 16, 2, 2, 32, DType::f32};
  const AttentionProblem problem = random_problem(shape, AttentionOptions{true, -1, -1}, 6, true);
  const StrategyRun run = run_strategy(world(), Algorithm::zigzag, problem, 0, 1, true);
  expect_consistent_profile(run.backward, static_cast<std::size_t>(ranks));
  const double shard_bytes = 2.0 * shape.batch * (shape.seq / ranks) * shape.kv_heads * shape.head_dim * sizeof(float);
  EXPECT_EQ(run.backward.bytes_sent, 2 * (ranks - 1) * shard_bytes);
  EXPECT_EQ(run.backward.messages_sent, 4 * (ranks - 1));
}

}  // namespace
}  // namespace spattn
