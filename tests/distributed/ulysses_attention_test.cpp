// Ulysses attention at the rank count of this run: forward and backward against the fp64
// reference with the 2x criterion for out, lse, dq, dk and dv, over head counts chosen per rank
// count so that every GQA pattern of the head split occurs; and its refusals of head counts and
// lengths that do not split.

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <sstream>
#include <string>
#include <tuple>
#include <utility>

#include "accuracy_report.hpp"
#include "distributed_checks.hpp"
#include "distributed_world.hpp"
#include "host_tensor.hpp"
#include "spattn/error.hpp"
#include "spattn/reference_attention.hpp"
#include "spattn/ulysses_attention.hpp"
#include "strategy_runner.hpp"

namespace spattn {
namespace {

using ::testing::HasSubstr;

// Query and kv head counts as functions of the rank count N; H is a multiple of N.
struct HeadCase {
  const char* name;
  int64_t heads_per_rank;     // H / N
  int64_t kv_heads_per_rank;  // HK = this x N, when fixed_kv_heads is 0
  int64_t fixed_kv_heads;     // HK whatever N is, when not 0
  int64_t kv_heads(int ranks) const { return fixed_kv_heads ? fixed_kv_heads : kv_heads_per_rank * ranks; }
};

const HeadCase kHeadCases[] = {
    // HK = H: one kv head per query head.
    {"mha", 2, 2, 0},
    // HK % N == 0: every rank reads its own kv heads.
    {"kv_heads_split_evenly", 2, 1, 0},
    // H = N, HK = 1: every rank reads the one kv head; its gradient is summed over all ranks.
    {"one_kv_head", 1, 0, 1},
    // HK = 2: at 4 and 8 ranks HK < N (each kv head goes to N/2 ranks); at 3 ranks (H = 6, group
    // of 3, 2 heads per rank) rank 1's query heads straddle both kv heads.
    {"two_kv_heads", 2, 0, 2},
    // HK = 3: at 2 ranks (H = 6) neither H/N nor HK divides the other; at 4 and 8 ranks groups of
    // 4 and 8 query heads straddle ranks of 3 heads.
    {"three_kv_heads", 3, 0, 3},
    // 8 heads per rank in groups of 2: each rank's heads go in stages of whole groups
    // (schedule/ulysses_stages.hpp), whose all-to-alls overlap the other stages' attention.
    {"kv_groups_in_stages", 8, 4, 0},
};

using AccuracyCase = std::tuple<int /*head case*/, int /*mask index*/, DType>;

class UlyssesAccuracy : public ::testing::TestWithParam<AccuracyCase> {};

TEST_P(UlyssesAccuracy, MatchesReferenceForwardAndBackward) {
  const auto [head_case_index, mask_index, dtype] = GetParam();
  const HeadCase& heads = kHeadCases[head_case_index];
  const int ranks = world().size();
  // 13 tokens per rank: odd, and not a multiple of any kernel tile.
  const AttentionShape shape{1, ranks * 13, heads.heads_per_rank * ranks, heads.kv_heads(ranks), 32, dtype};
  const uint64_t seed = 2000 + static_cast<uint64_t>(head_case_index) * 100 + static_cast<uint64_t>(mask_index) * 10 +
                        static_cast<uint64_t>(dtype);
  expect_accurate(Algorithm::ulysses, random_problem(shape, kMasks[mask_index].options, seed, /*backward=*/true));
}

std::string case_name(const ::testing::TestParamInfo<AccuracyCase>& info) {
  const auto [head_case_index, mask_index, dtype] = info.param;
  return std::string(kHeadCases[head_case_index].name) + "_" + kMasks[mask_index].name + "_" + dtype_name(dtype);
}

INSTANTIATE_TEST_SUITE_P(HeadSplits, UlyssesAccuracy,
                         ::testing::Combine(::testing::Range(0, 6), ::testing::Range(0, 3),
                                            ::testing::Values(DType::f32, DType::bf16)),
                         case_name);

// A sequence of 130 tokens per rank (more than a kernel query tile of 128 rows) attended at once,
// head dim 128, batch 2, one kv head.
TEST(UlyssesLongSequence, CausalMqaHeadDim128) {
  const int ranks = world().size();
  const AttentionShape shape{2, 130 * ranks, ranks, 1, 128, DType::bf16};
  expect_accurate(Algorithm::ulysses, random_problem(shape, AttentionOptions{true, -1, -1}, 43, /*backward=*/true));
}

// A plan reused across calls gives the same result as the first call (workspace reuse).
TEST(UlyssesPlan, RepeatedCallsAreIdentical) {
  const int ranks = world().size();
  const AttentionShape shape{1, ranks * 8, 3 * ranks, 3, 16, DType::bf16};
  const AttentionProblem problem = random_problem(shape, AttentionOptions{true, -1, -1}, 78, true);
  const StrategyRun once = run_strategy(world(), Algorithm::ulysses, problem, 0, 1, false);
  const StrategyRun thrice = run_strategy(world(), Algorithm::ulysses, problem, 1, 2, false);
  expect_identical_outputs(once.outputs, thrice.outputs);
}

// Profiles add up: compute and waiting never exceed the total; one entry per phase.
TEST(UlyssesPlan, ProfileIsConsistent) {
  const int ranks = world().size();
  const AttentionShape shape{1, ranks * 16, 2 * ranks, 2, 32, DType::f32};
  const AttentionProblem problem = random_problem(shape, {}, 6, true);
  const StrategyRun run = run_strategy(world(), Algorithm::ulysses, problem, 0, 1, true);
  for (const Profile* profile : {&run.forward, &run.backward}) expect_consistent_profile(*profile, 3);
}

// The one-shot calls read the global shape from q and k.
struct OneShotShard {
  HostTensor q, k, v, out, lse;
  OneShotShard(int64_t local_seq, int64_t heads, int64_t kv_heads, int64_t head_dim)
      : q(DType::f32, {1, local_seq, heads, head_dim}),
        k(DType::f32, {1, local_seq, kv_heads, head_dim}),
        v(DType::f32, {1, local_seq, kv_heads, head_dim}),
        out(DType::f32, {1, local_seq, heads, head_dim}),
        lse(DType::f32, {1, heads, local_seq}) {
    q.fill_normal(11);
    k.fill_normal(12);
    v.fill_normal(13);
  }
  void forward() { ulysses_attention_forward(world(), q.view(), k.view(), v.view(), out.view(), lse.view()); }
};

TEST(UlyssesBadInput, HeadsNotDivisibleByRanksNamesAlternatives) {
  const int ranks = world().size();
  if (ranks < 2) GTEST_SKIP() << "every head count splits over one rank";
  const int64_t heads = ranks + 1;
  const std::string expected =
      "heads (" + std::to_string(heads) + ") must be divisible by ranks (" + std::to_string(ranks) + ")";
  OneShotShard shard(4, heads, 1, 16);
  const std::string one_shot_error = error_of([&] { shard.forward(); });
  EXPECT_THAT(one_shot_error, HasSubstr(expected));
  EXPECT_THAT(one_shot_error, HasSubstr("use zigzag, ring or usp"));
  const AttentionShape shape{1, 4 * ranks, heads, 1, 16, DType::f32};
  EXPECT_THAT(error_of([&] { DistributedAttention plan(world(), Algorithm::ulysses, shape, {}); }),
              HasSubstr(expected));
}

TEST(UlyssesBadInput, LengthNotDivisibleNamesNearestLengths) {
  const int ranks = world().size();
  if (ranks < 2) GTEST_SKIP() << "every length splits over one rank";
  const AttentionShape shape{1, 4 * ranks + 1, 2 * ranks, 2, 16, DType::f32};
  const std::string error =
      error_of([&] { DistributedAttention plan(world(), Algorithm::ulysses, shape, {}); });
  EXPECT_THAT(error, HasSubstr("sequence length " + std::to_string(4 * ranks + 1)));
  EXPECT_THAT(error, HasSubstr("nearest valid lengths: " + std::to_string(4 * ranks) + " or " +
                                   std::to_string(5 * ranks)));
}

TEST(UlyssesBadInput, TheWorldStillWorksAfterwards) {
  OneShotShard shard(4, world().size(), 1, 16);
  EXPECT_EQ(error_of([&] { shard.forward(); }), "");
  for (int64_t i = 0; i < shard.out.numel(); ++i) ASSERT_TRUE(std::isfinite(shard.out.at(i))) << "element " << i;
}

}  // namespace
}  // namespace spattn
