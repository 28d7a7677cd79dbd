// USP (Ulysses inside groups of N1 ranks x zigzag ring across the N / N1 groups) at the rank
// count of this run: forward and backward against the fp64 reference with the 2x criterion for
// out, lse, dq, dk and dv at every Ulysses degree N1 that divides N (N1 = 1 is the zigzag ring,
// N1 = N is Ulysses), the degree chosen for inner = 0, and refusals that every rank agrees on.

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <sstream>
#include <string>
#include <tuple>

#include "accuracy_report.hpp"
#include "distributed_checks.hpp"
#include "distributed_world.hpp"
#include "host_tensor.hpp"
#include "spattn/error.hpp"
#include "spattn/reference_attention.hpp"
#include "strategy_runner.hpp"

namespace spattn {
namespace {

using ::testing::HasSubstr;

StrategyOptions with_inner(int inner) {
  StrategyOptions options;
  options.inner = inner;
  return options;
}

// 2N x 5 tokens: zigzag chunks of 5 N1 tokens, members' shares of 10, so at N1 = 3 a share
// straddles the group's two chunks, and no length is a multiple of a kernel tile.
int64_t test_length(int ranks) { return 2 * ranks * 5; }

using AccuracyCase = std::tuple<int /*inner*/, int /*mask index*/, DType>;

class UspAccuracy : public ::testing::TestWithParam<AccuracyCase> {};

TEST_P(UspAccuracy, MatchesReferenceForwardAndBackward) {
  const auto [inner, mask_index, dtype] = GetParam();
  const int ranks = world().size();
  if (inner > ranks || ranks % inner != 0) GTEST_SKIP() << "inner " << inner << " does not divide " << ranks << " ranks";
  // H = 2N and HK = N1: each member attends 2N / N1 query heads sharing its one kv head.
  const AttentionShape shape{1, test_length(ranks), 2 * ranks, inner, 32, dtype};
  const uint64_t seed = 3000 + static_cast<uint64_t>(inner) * 100 + static_cast<uint64_t>(mask_index) * 10 +
                        static_cast<uint64_t>(dtype);
  expect_accurate(Algorithm::usp, random_problem(shape, kMasks[mask_index].options, seed, /*backward=*/true), with_inner(inner));
}

std::string case_name(const ::testing::TestParamInfo<AccuracyCase>& info) {
  const auto [inner, mask_index, dtype] = info.param;
  return "inner_" + std::to_string(inner) + "_" + kMasks[mask_index].name + "_" + dtype_name(dtype);
}

// Every divisor of the tested rank counts 1 to 8.
INSTANTIATE_TEST_SUITE_P(UlyssesDegrees, UspAccuracy,
                         ::testing::Combine(::testing::Range(1, 9), ::testing::Range(0, 3),
                                            ::testing::Values(DType::f32, DType::bf16)),
                         case_name);

// Several kv heads per member, batch 2, a causal window: at every degree of this rank count.
// Ring and Hamiltonian cycles across the groups, at every degree whose group count allows them.
class UspAcross : public ::testing::TestWithParam<std::tuple<Algorithm, int /*mask index*/>> {};

TEST_P(UspAcross, MatchesReferenceForwardAndBackward) {
  const auto [across, mask_index] = GetParam();
  const int ranks = world().size();
  for (int inner = 1; inner <= ranks; ++inner) {
    if (ranks % inner != 0) continue;
    const int groups = ranks / inner;
    if (across == Algorithm::hamilton && (groups == 4 || groups == 6)) continue;
    StrategyOptions options = with_inner(inner);
    options.across = across;
    // Cuts into the N2-1 Hamiltonian slots per zigzag chunk and splits over each group's members.
    const int64_t length = 2 * groups * std::max(1, groups - 1) * inner * 3;
    const AttentionShape shape{1, length, 2 * ranks, inner, 16, DType::f32};
    const uint64_t seed = 4300 + static_cast<uint64_t>(inner) * 10 + static_cast<uint64_t>(mask_index);
    expect_accurate(Algorithm::usp, random_problem(shape, kMasks[mask_index].options, seed, /*backward=*/true),
                    options);
  }
}

INSTANTIATE_TEST_SUITE_P(RotationsAcrossGroups, UspAcross,
                         ::testing::Combine(::testing::Values(Algorithm::ring, Algorithm::hamilton),
                                            ::testing::Range(0, 2)),
                         [](const ::testing::TestParamInfo<std::tuple<Algorithm, int>>& info) {
                           return algorithm_name(std::get<0>(info.param)) + "_" +
                                  kMasks[std::get<1>(info.param)].name;
                         });

TEST(UspBadInput, HamiltonAcrossFourGroupsSaysNoneExists) {
  const int ranks = world().size();
  if (ranks % 4 != 0) GTEST_SKIP() << "needs 4 groups";
  StrategyOptions options = with_inner(ranks / 4);
  options.across = Algorithm::hamilton;
  const AttentionShape shape{1, 2 * ranks * 30, ranks, ranks / 4, 16, DType::f32};
  const std::string error = error_of([&] { DistributedAttention plan(world(), Algorithm::usp, shape, {}, options); });
  EXPECT_THAT(error, HasSubstr("across the 4 groups of usp, hamilton: no decomposition"));
}

TEST(UspBadInput, AcrossMustBeASingleLevelRotation) {
  StrategyOptions options = with_inner(1);
  options.across = Algorithm::ulysses;
  const int ranks = world().size();
  const AttentionShape shape{1, 2 * ranks * 4, 2, 1, 16, DType::f32};
  EXPECT_THAT(error_of([&] { DistributedAttention plan(world(), Algorithm::usp, shape, {}, options); }),
              HasSubstr("usp runs ring, zigzag or hamilton across its groups, not 'ulysses'"));
}

TEST(UspKvHeads, TwoKvHeadsPerMember) {
  const int ranks = world().size();
  for (int inner = 1; inner <= ranks; ++inner) {
    if (ranks % inner != 0) continue;
    const AttentionShape shape{2, 2 * ranks * 3, 2 * ranks, 2 * inner, 16, DType::bf16};
    expect_accurate(Algorithm::usp, random_problem(shape, AttentionOptions{true, 11, -1}, 4000 + inner, /*backward=*/true), with_inner(inner));
  }
}

// inner = 0 takes the largest degree dividing N, H and HK: with H = 2N and HK = 2 that is 2 for
// an even rank count and 1 for an odd one.
TEST(UspAutomaticDegree, ChoosesLargestValidDegree) {
  const int ranks = world().size();
  const int expected = ranks % 2 == 0 ? 2 : 1;
  const AttentionShape shape{1, test_length(ranks), 2 * ranks, 2, 32, DType::f32};
  DistributedAttention plan(world(), Algorithm::usp, shape, {}, with_inner(0));
  EXPECT_EQ(plan.layout().name(), "zigzag over " + std::to_string(ranks / expected) + " groups of " +
                                      std::to_string(expected) + " ranks");
  expect_accurate(Algorithm::usp, random_problem(shape, AttentionOptions{true, -1, -1}, 4100, /*backward=*/true), with_inner(0));
}

// Profiles add up, with the inner ring's waiting counted as the attention step's communication.
TEST(UspPlan, ProfileIsConsistent) {
  const int ranks = world().size();
  const AttentionShape shape{1, test_length(ranks), 2 * ranks, 2, 32, DType::f32};
  const AttentionProblem problem = random_problem(shape, {}, 7, true);
  const StrategyRun run = run_strategy(world(), Algorithm::usp, problem, 0, 1, true, with_inner(0));
  for (const Profile* profile : {&run.forward, &run.backward}) expect_consistent_profile(*profile, 3);
}

std::string usp_plan_error(const AttentionShape& shape, int inner) {
  return error_of([&] { DistributedAttention plan(world(), Algorithm::usp, shape, {}, with_inner(inner)); });
}

TEST(UspBadInput, KvHeadsNotDivisibleByInnerNamesValidDegrees) {
  const int ranks = world().size();
  if (ranks < 2) GTEST_SKIP() << "one rank has only inner 1, which divides every kv head count";
  const int inner = ranks % 2 == 0 ? 2 : ranks;
  const AttentionShape shape{1, test_length(ranks), 2 * ranks, 1, 16, DType::f32};
  const std::string error = usp_plan_error(shape, inner);
  EXPECT_THAT(error, HasSubstr("inner (" + std::to_string(inner) + ")"));
  EXPECT_THAT(error, HasSubstr("kv_heads (1)"));
  EXPECT_THAT(error, HasSubstr("valid inner values here: 1 (0 chooses the largest)"));
}

TEST(UspBadInput, RanksNotDivisibleByInner) {
  const int ranks = world().size();
  const int inner = ranks + 1;  // divides the head counts below, never the ranks
  const AttentionShape shape{1, test_length(ranks) * inner, 2 * inner, inner, 16, DType::f32};
  const std::string error = usp_plan_error(shape, inner);
  EXPECT_THAT(error, HasSubstr("inner (" + std::to_string(inner) + ")"));
  EXPECT_THAT(error, HasSubstr("divide ranks (" + std::to_string(ranks) + ")"));
}

TEST(UspBadInput, LengthNotSplittingNamesNearestLengths) {
  const int ranks = world().size();
  if (ranks < 2) GTEST_SKIP() << "every even length splits over one group of one rank";
  // One group of N ranks: the group's split (even lengths) passes, its members' split does not.
  const AttentionShape shape{1, test_length(ranks) + 2, 2 * ranks, ranks, 16, DType::f32};
  const std::string error = usp_plan_error(shape, ranks);
  EXPECT_THAT(error, HasSubstr("sequence length " + std::to_string(shape.seq)));
  EXPECT_THAT(error, HasSubstr("1 groups of " + std::to_string(ranks) + " ranks"));
  EXPECT_THAT(error, HasSubstr("nearest valid lengths: " + std::to_string(test_length(ranks)) + " or " +
                                   std::to_string(test_length(ranks) + 2 * ranks)));
}

TEST(UspBadInput, RanksDisagreeOnInner) {
  const int ranks = world().size();
  if (ranks < 2) GTEST_SKIP() << "one rank cannot disagree with itself";
  // Both degrees are valid; only their difference is wrong.
  const int inner = world().rank() == 0 ? 1 : ranks;
  const AttentionShape shape{1, test_length(ranks), 2 * ranks, ranks, 16, DType::f32};
  EXPECT_THAT(usp_plan_error(shape, inner),
              HasSubstr("ranks disagree on the call: rank 0 has inner=1 but rank 1 has inner=" + std::to_string(ranks)));
}

// One rank's bad output tensor is refused by every rank, the other groups included, rather than
// leaving them waiting in the ring across the groups.
TEST(UspBadInput, OneRanksBadTensorIsRefusedEverywhere) {
  const int ranks = world().size();
  if (ranks < 2) GTEST_SKIP() << "needs a second group";
  const AttentionShape shape{1, test_length(ranks), 2 * ranks, 2, 16, DType::f32};
  DistributedAttention plan(world(), Algorithm::usp, shape, {}, with_inner(ranks % 2 == 0 ? 2 : 1));
  const int64_t local_seq = shape.seq / ranks;
  const bool bad_rank = world().rank() == ranks - 1;
  HostTensor q(DType::f32, {1, local_seq, shape.heads, 16}), k(DType::f32, {1, local_seq, 2, 16}),
      v(DType::f32, {1, local_seq, 2, 16}), out(DType::f32, {1, local_seq + (bad_rank ? 1 : 0), shape.heads, 16}),
      lse(DType::f32, {1, shape.heads, local_seq});
  q.fill_normal(1);
  k.fill_normal(2);
  v.fill_normal(3);
  const std::string error = error_of([&] { plan.forward(q.view(), k.view(), v.view(), out.view(), lse.view()); });
  EXPECT_THAT(error, HasSubstr(bad_rank ? "out" : "rank " + std::to_string(ranks - 1) + " rejected the call"));
}

TEST(UspBadInput, TheWorldStillWorksAfterwards) {
  const int ranks = world().size();
  const AttentionShape shape{1, test_length(ranks), 2 * ranks, 2, 16, DType::f32};
  expect_accurate(Algorithm::usp, random_problem(shape, {}, 4200, /*backward=*/true), with_inner(0));
}

}  // namespace
}  // namespace spattn
