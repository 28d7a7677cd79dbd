// How many stages plain Ulysses cuts a head shard into: slices of whole kv-head groups, at most
// kMaxUlyssesStages, one where nothing travels or no such cut exists.

#include "schedule/ulysses_stages.hpp"

#include <gtest/gtest.h>

namespace spattn {
namespace {

TEST(UlyssesStages, CutTheHeadsIntoSlicesOfWholeKvHeadGroups) {
  // MHA: any divisor of the heads per rank.
  EXPECT_EQ(ulysses_stages(16, 1, 2), kMaxUlyssesStages);
  EXPECT_EQ(ulysses_stages(1, 1, 8), 1);
  // GQA 32/8 at 2 ranks: 16 query heads, 4 groups of 4, per rank.
  EXPECT_EQ(ulysses_stages(16, 4, 2), kMaxUlyssesStages);
  // One group per rank: a stage would hold part of a group and its kv head would travel twice.
  EXPECT_EQ(ulysses_stages(4, 4, 8), 1);
  // Groups larger than a rank's heads (several ranks read one kv head).
  EXPECT_EQ(ulysses_stages(2, 8, 8), 1);
  // Heads that straddle groups (3 heads per rank, groups of 2).
  EXPECT_EQ(ulysses_stages(3, 2, 4), 1);
}

TEST(UlyssesStages, StagesDivideTheHeadsEvenly) {
  for (int64_t heads_per_rank = 1; heads_per_rank <= 24; ++heads_per_rank)
    for (int64_t group_size = 1; group_size <= 8; ++group_size) {
      const int stages = ulysses_stages(heads_per_rank, group_size, 4);
      EXPECT_GE(stages, 1);
      EXPECT_LE(stages, kMaxUlyssesStages);
      if (stages > 1) EXPECT_EQ(heads_per_rank % (stages * group_size), 0) << heads_per_rank << " / " << group_size;
    }
}

TEST(UlyssesStages, OneRankMovesNothingAndNeedsOneStage) { EXPECT_EQ(ulysses_stages(32, 1, 1), 1); }

}  // namespace
}  // namespace spattn
