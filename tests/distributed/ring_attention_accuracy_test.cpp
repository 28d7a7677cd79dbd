// Ring and zigzag ring attention at the rank count of this run, forward and backward, checked
// against the fp64 reference with the 2x criterion for out, lse, dq, dk and dv.

#include <gtest/gtest.h>

#include <sstream>
#include <string>
#include <tuple>

#include "accuracy_report.hpp"
#include "distributed_world.hpp"
#include "spattn/reference_attention.hpp"
#include "strategy_runner.hpp"

namespace spattn {
namespace {

struct MaskCase {
  const char* name;
  AttentionOptions options;
};

AttentionOptions with_mask(bool causal, int64_t left, int64_t right) {
  AttentionOptions options;
  options.causal = causal;
  options.window_left = left;
  options.window_right = right;
  return options;
}

const MaskCase kMasks[] = {
    {"none", with_mask(false, -1, -1)},
    {"causal", with_mask(true, -1, -1)},
    {"window_9_4", with_mask(false, 9, 4)},
    {"causal_window_11", with_mask(true, 11, -1)},
};

using AccuracyCase = std::tuple<Algorithm, int /*mask index*/, DType>;

class RingAttentionAccuracy : public ::testing::TestWithParam<AccuracyCase> {};

TEST_P(RingAttentionAccuracy, MatchesReferenceForwardAndBackward) {
  const auto [algorithm, mask_index, dtype] = GetParam();
  const int ranks = world().size();
  // 13 tokens per zigzag chunk: odd, and not a multiple of any kernel tile.
  const AttentionShape shape{2, 2 * ranks * 13, 4, 2, 32, dtype};
  const AttentionOptions options = kMasks[mask_index].options;
  const uint64_t seed = 1000 + static_cast<uint64_t>(mask_index) * 10 + static_cast<uint64_t>(dtype);
  const AttentionProblem problem = random_problem(shape, options, seed, /*backward=*/true);

  const StrategyRun distributed = run_strategy(world(), algorithm, problem, 0, 1, false);
  auto alone = MpiCommunicator::this_process_only();
  const StrategyRun single = run_strategy(*alone, algorithm, problem, 0, 1, false);
  const ReferenceResult reference =
      reference_attention(problem.q.view(), problem.k.view(), problem.v.view(), problem.dout.view(), options);

  const std::vector<OutputError> errors = compare_with_reference(distributed.outputs, single.outputs, reference);
  ASSERT_EQ(errors.size(), 5u);
  for (const OutputError& error : errors)
    EXPECT_TRUE(error.pass) << error.name << " at " << ranks << " ranks: distributed error " << error.distributed
                            << " > bound " << error.bound << " (single-rank error " << error.single_rank << ")";
}

std::string case_name(const ::testing::TestParamInfo<AccuracyCase>& info) {
  const auto [algorithm, mask_index, dtype] = info.param;
  return algorithm_name(algorithm) + "_" + kMasks[mask_index].name + "_" + dtype_name(dtype);
}

INSTANTIATE_TEST_SUITE_P(AllStrategies, RingAttentionAccuracy,
                         ::testing::Combine(::testing::Values(Algorithm::ring, Algorithm::zigzag),
                                            ::testing::Range(0, 4), ::testing::Values(DType::f32, DType::bf16)),
                         case_name);

// A plan reused across calls gives the same result as the first call (workspace reuse).
TEST(RingAttentionPlan, RepeatedCallsAreIdentical) {
  const int ranks = world().size();
  const AttentionShape shape{1, 2 * ranks * 8, 2, 1, 16, DType::f32};
  const AttentionProblem problem = random_problem(shape, with_mask(true, -1, -1), 77, true);
  const StrategyRun once = run_strategy(world(), Algorithm::zigzag, problem, 0, 1, false);
  const StrategyRun thrice = run_strategy(world(), Algorithm::zigzag, problem, 1, 2, false);
  for (const auto& [first, later] : {std::pair{&once.outputs.out, &thrice.outputs.out},
                                     std::pair{&once.outputs.dq, &thrice.outputs.dq},
                                     std::pair{&once.outputs.dk, &thrice.outputs.dk},
                                     std::pair{&once.outputs.dv, &thrice.outputs.dv}})
    for (int64_t i = 0; i < first->view().numel(); ++i) ASSERT_EQ(first->at(i), later->at(i)) << "element " << i;
}

// Profiles add up: compute and waiting never exceed the total, per-step entries exist.
TEST(RingAttentionPlan, ProfileIsConsistent) {
  const int ranks = world().size();
  const AttentionShape shape{1, 2 * ranks * 16, 2, 2, 32, DType::f32};
  const AttentionProblem problem = random_problem(shape, {}, 5, true);
  const StrategyRun run = run_strategy(world(), Algorithm::ring, problem, 0, 1, true);
  for (const Profile* profile : {&run.forward, &run.backward}) {
    EXPECT_GT(profile->total_ms, 0);
    EXPECT_LE(profile->compute_ms + profile->comm_wait_ms, profile->total_ms * 1.01 + 0.01);
    ASSERT_EQ(profile->steps.size(), static_cast<std::size_t>(ranks));
    double steps_compute = 0;
    for (const StepTiming& step : profile->steps) steps_compute += step.compute_ms;
    EXPECT_NEAR(steps_compute, profile->compute_ms, 1e-6 + 1e-9 * profile->compute_ms);
  }
}

}  // namespace
}  // namespace spattn
