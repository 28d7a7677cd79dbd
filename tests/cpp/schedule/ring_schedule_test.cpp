// Properties of the ring schedule for every rank count from 1 to 16: every visible (query, key)
// pair is computed exactly once over the steps, masked-out blocks are never scheduled, and the
// zigzag layout gives every rank the same work at every step under a causal mask.

#include <gtest/gtest.h>

#include <vector>

#include "schedule/ring_schedule.hpp"

namespace spattn {
namespace {

AttentionMask causal_mask() { return AttentionMask{-1, 0}; }

int64_t block_area(const RingStepBlock& block) {
  int64_t area = 0;
  for (const SequenceChunk& keys : block.keys) area += block.queries.length * keys.length;
  return area;
}

TEST(RingSchedule, SourceRankWalksBackwardsAroundTheRing) {
  EXPECT_EQ(ring_source_rank(0, 0, 5), 0);
  EXPECT_EQ(ring_source_rank(0, 1, 5), 4);
  EXPECT_EQ(ring_source_rank(3, 4, 5), 4);
  for (int ranks = 1; ranks <= 9; ++ranks)
    for (int rank = 0; rank < ranks; ++rank) {
      std::vector<int> seen(static_cast<std::size_t>(ranks), 0);
      for (int step = 0; step < ranks; ++step) ++seen[static_cast<std::size_t>(ring_source_rank(rank, step, ranks))];
      for (int count : seen) EXPECT_EQ(count, 1);
    }
}

// Every visible pair of the full sequence is covered exactly once; no scheduled block is
// entirely masked.
TEST(RingSchedule, CoversEveryVisiblePairOnce) {
  const AttentionMask masks[] = {AttentionMask{-1, -1}, causal_mask(), AttentionMask{5, 2}, AttentionMask{7, 0}};
  for (LayoutKind kind : {LayoutKind::contiguous, LayoutKind::zigzag})
    for (const AttentionMask& mask : masks)
      for (int ranks = 1; ranks <= 8; ++ranks) {
        const int64_t length = 2 * ranks * 3;
        const SequenceLayout layout(kind, length, ranks);
        std::vector<int> covered(static_cast<std::size_t>(length * length), 0);
        for (int rank = 0; rank < ranks; ++rank)
          for (int step = 0; step < ranks; ++step)
            for (const RingStepBlock& block : ring_step_blocks(layout, mask, rank, step))
              for (const SequenceChunk& keys : block.keys) {
                EXPECT_TRUE(mask.any_visible(block.queries.position, block.queries.position + block.queries.length,
                                             keys.position, keys.position + keys.length));
                for (int64_t i = 0; i < block.queries.length; ++i)
                  for (int64_t j = 0; j < keys.length; ++j)
                    ++covered[static_cast<std::size_t>((block.queries.position + i) * length + keys.position + j)];
              }
        for (int64_t query = 0; query < length; ++query)
          for (int64_t key = 0; key < length; ++key) {
            const int count = covered[static_cast<std::size_t>(query * length + key)];
            if (mask.visible(query, key)) {
              ASSERT_EQ(count, 1) << layout_name(kind) << " ranks " << ranks << " pair " << query << "," << key;
            } else {
              ASSERT_LE(count, 1);
            }
          }
      }
}

// Zigzag under a causal mask: at every step every rank computes the same area, and after step
// 0 every block is fully visible (no masked work at all).
TEST(RingSchedule, ZigzagCausalGivesEqualWorkPerRankPerStep) {
  for (int ranks = 1; ranks <= 16; ++ranks) {
    const SequenceLayout layout(LayoutKind::zigzag, 2 * ranks * 10, ranks);
    for (int step = 0; step < ranks; ++step) {
      int64_t first_rank_area = -1;
      for (int rank = 0; rank < ranks; ++rank) {
        int64_t area = 0;
        for (const RingStepBlock& block : ring_step_blocks(layout, causal_mask(), rank, step)) {
          area += block_area(block);
          if (step == 0) continue;
          for (const SequenceChunk& keys : block.keys)
            EXPECT_TRUE(causal_mask().all_visible(block.queries.position, block.queries.position + block.queries.length,
                                                  keys.position, keys.position + keys.length));
        }
        if (first_rank_area < 0) first_rank_area = area;
        EXPECT_EQ(area, first_rank_area) << "ranks " << ranks << " step " << step << " rank " << rank;
      }
      // 2 c^2 per rank after step 0; 3 c^2 at step 0, whose two diagonal blocks are half masked.
      EXPECT_EQ(first_rank_area, (step == 0 ? 3 : 2) * 10 * 10);
    }
  }
}

// Plain ring under a causal mask skips the sources after the rank entirely (the imbalance that
// zigzag removes).
TEST(RingSchedule, ContiguousCausalSkipsLaterSources) {
  const SequenceLayout layout(LayoutKind::contiguous, 40, 4);
  for (int rank = 0; rank < 4; ++rank)
    for (int step = 0; step < 4; ++step) {
      const bool later_source = ring_source_rank(rank, step, 4) > rank;
      EXPECT_EQ(ring_step_blocks(layout, causal_mask(), rank, step).empty(), later_source);
    }
}

}  // namespace
}  // namespace spattn
