// Properties of rotation schedules (ring, Hamiltonian cycles, two-level) over both layouts: every
// visible (query, key) pair is computed exactly once over the steps, masked-out pieces are never
// scheduled, and under a causal zigzag layout every rank does the same work at every step, all
// of it unmasked after step 0 (the zigzag ring, and the M/P rule of Hamiltonian attention).

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <vector>

#include "schedule/rotation_schedule.hpp"

namespace spattn {
namespace {

using ::testing::HasSubstr;

AttentionMask causal_mask() { return AttentionMask{-1, 0}; }

struct NamedCycles {
  std::string name;
  RankCycles cycles;
  int ranks;
};

// Every cycle set spattn rotates over, for rank counts up to 8.
std::vector<NamedCycles> every_cycle_set() {
  std::vector<NamedCycles> sets;
  for (int ranks = 1; ranks <= 8; ++ranks) {
    sets.push_back({"ring", ring_cycles(ranks), ranks});
    if (ranks >= 2 && hamiltonian_decomposition_error(ranks).empty())
      sets.push_back({"hamilton", hamiltonian_decomposition(ranks), ranks});
  }
  sets.push_back({"two-level 2x2", two_level_cycles(2, 2), 4});
  sets.push_back({"two-level 4x2", two_level_cycles(4, 2), 8});
  sets.push_back({"two-level 2x3", two_level_cycles(2, 3), 6});
  return sets;
}

int64_t block_area(const RotationStepBlock& block) {
  int64_t area = 0;
  for (const SlotPiece& piece : block.keys) area += block.queries.length * piece.length;
  return area;
}

TEST(RotationSchedule, SlotPiecesTileTheShard) {
  const SequenceLayout layout(LayoutKind::zigzag, 2 * 3 * 4 * 5, 3);  // 3 ranks, 4 slots, pieces of 5
  for (int rank = 0; rank < 3; ++rank) {
    std::vector<int> covered(static_cast<std::size_t>(layout.local_length()), 0);
    for (int slot = 0; slot < 4; ++slot) {
      const std::vector<SlotPiece> pieces = slot_pieces(layout, 4, rank, slot);
      ASSERT_EQ(pieces.size(), 2u);
      EXPECT_EQ(pieces[1].slot_offset, 5);
      for (int piece = 0; piece < 2; ++piece) {
        const int64_t offset = shard_offset_of_piece(layout, 4, rank, slot, piece);
        const SequenceChunk chunk = layout.chunks(rank)[static_cast<std::size_t>(piece)];
        EXPECT_EQ(pieces[static_cast<std::size_t>(piece)].position, chunk.position + offset - chunk.local_offset);
        for (int64_t i = 0; i < 5; ++i) ++covered[static_cast<std::size_t>(offset + i)];
      }
    }
    for (int count : covered) EXPECT_EQ(count, 1);
  }
}

TEST(RotationSchedule, IndivisibleSlotsNameNearestLengths) {
  EXPECT_THAT(slot_split_error(LayoutKind::zigzag, 100, 5, 4),
              HasSubstr("must be a positive multiple of 2 x ranks x slots = 40; nearest valid lengths: 80 or 120"));
  EXPECT_THAT(slot_split_error(LayoutKind::contiguous, 50, 5, 4), HasSubstr("ranks x slots = 20"));
  EXPECT_EQ(slot_split_error(LayoutKind::contiguous, 40, 5, 4), "");
  EXPECT_THAT(slot_split_error(LayoutKind::zigzag, 7, 2, 1), HasSubstr("2 x ranks = 4"));
}

// Every visible pair of the full sequence is covered exactly once; no scheduled piece is
// entirely masked.
TEST(RotationSchedule, CoversEveryVisiblePairOnce) {
  const AttentionMask masks[] = {AttentionMask{-1, -1}, causal_mask(), AttentionMask{5, 2}, AttentionMask{7, 0}};
  for (const NamedCycles& set : every_cycle_set()) {
    const CycleSchedule schedule(set.cycles, set.ranks);
    for (LayoutKind kind : {LayoutKind::contiguous, LayoutKind::zigzag})
      for (const AttentionMask& mask : masks) {
        const int64_t length = 2 * set.ranks * schedule.slots() * 2;
        const SequenceLayout layout(kind, length, set.ranks);
        std::vector<int> covered(static_cast<std::size_t>(length * length), 0);
        for (int rank = 0; rank < set.ranks; ++rank)
          for (int step = 0; step < set.ranks; ++step)
            for (const RotationStepBlock& block : rotation_step_blocks(layout, schedule, mask, rank, step))
              for (const SlotPiece& piece : block.keys) {
                EXPECT_TRUE(mask.any_visible(block.queries.position, block.queries.position + block.queries.length,
                                             piece.position, piece.position + piece.length));
                for (int64_t i = 0; i < block.queries.length; ++i)
                  for (int64_t j = 0; j < piece.length; ++j)
                    ++covered[static_cast<std::size_t>((block.queries.position + i) * length + piece.position + j)];
              }
        for (int64_t query = 0; query < length; ++query)
          for (int64_t key = 0; key < length; ++key) {
            const int count = covered[static_cast<std::size_t>(query * length + key)];
            if (mask.visible(query, key)) {
              ASSERT_EQ(count, 1) << set.name << " " << layout_name(kind) << " pair " << query << "," << key;
            } else {
              ASSERT_LE(count, 1);
            }
          }
      }
  }
}

// rotation_visible_pairs counts what rotation_step_blocks lists, pair by pair under the mask, at
// every step and rank; and arrival_step inverts source.
TEST(RotationSchedule, VisiblePairsCountTheListedBlocks) {
  const AttentionMask masks[] = {AttentionMask{-1, -1}, causal_mask(), AttentionMask{5, 2}, AttentionMask{7, 0},
                                 AttentionMask{0, 3}};
  for (const NamedCycles& set : every_cycle_set()) {
    const CycleSchedule schedule(set.cycles, set.ranks);
    for (int slot = 0; slot < schedule.slots(); ++slot)
      for (int rank = 0; rank < set.ranks; ++rank)
        for (int step = 0; step < set.ranks; ++step)
          ASSERT_EQ(schedule.arrival_step(slot, schedule.source(slot, rank, step), rank), step) << set.name;
    for (LayoutKind kind : {LayoutKind::contiguous, LayoutKind::zigzag})
      for (const AttentionMask& mask : masks) {
        const SequenceLayout layout(kind, 2 * set.ranks * schedule.slots() * 3, set.ranks);
        const std::vector<std::vector<int64_t>> pairs = rotation_visible_pairs(layout, schedule, mask);
        for (int rank = 0; rank < set.ranks; ++rank)
          for (int step = 0; step < set.ranks; ++step) {
            int64_t listed = 0;
            for (const RotationStepBlock& block : rotation_step_blocks(layout, schedule, mask, rank, step))
              for (const SlotPiece& piece : block.keys)
                for (int64_t i = 0; i < block.queries.length; ++i)
                  for (int64_t j = 0; j < piece.length; ++j)
                    listed += mask.visible(block.queries.position + i, piece.position + j);
            ASSERT_EQ(pairs[static_cast<std::size_t>(step)][static_cast<std::size_t>(rank)], listed)
                << set.name << " " << layout_name(kind) << " mask " << mask.left << "," << mask.right << " rank "
                << rank << " step " << step;
          }
      }
  }
}

// Causal zigzag: at every step every rank computes the same area, and after step 0 all of it is
// visible: 2 pieces' worth per slot (the front half of a slot for all queries when its source is
// earlier, the back queries against the whole slot when later).
TEST(RotationSchedule, ZigzagCausalGivesEqualWorkPerRankPerStep) {
  for (const NamedCycles& set : every_cycle_set()) {
    const CycleSchedule schedule(set.cycles, set.ranks);
    const int64_t piece = 3;
    const int64_t chunk = piece * schedule.slots();
    const SequenceLayout layout(LayoutKind::zigzag, 2 * set.ranks * chunk, set.ranks);
    for (int step = 0; step < set.ranks; ++step) {
      int64_t first_rank_area = -1;
      for (int rank = 0; rank < set.ranks; ++rank) {
        int64_t area = 0;
        for (const RotationStepBlock& block : rotation_step_blocks(layout, schedule, causal_mask(), rank, step)) {
          area += block_area(block);
          if (step == 0) continue;
          for (const SlotPiece& key : block.keys)
            EXPECT_TRUE(causal_mask().all_visible(block.queries.position, block.queries.position + block.queries.length,
                                                  key.position, key.position + key.length))
                << set.name << " step " << step << " rank " << rank;
        }
        if (first_rank_area < 0) first_rank_area = area;
        EXPECT_EQ(area, first_rank_area) << set.name << " step " << step << " rank " << rank;
      }
      if (step > 0) {
        EXPECT_EQ(first_rank_area, 2 * chunk * chunk) << set.name;
      }
    }
  }
}

// Plain ring under a causal mask skips the sources after the rank entirely (the imbalance that
// zigzag removes).
TEST(RotationSchedule, ContiguousCausalRingSkipsLaterSources) {
  const SequenceLayout layout(LayoutKind::contiguous, 40, 4);
  const CycleSchedule ring(ring_cycles(4), 4);
  for (int rank = 0; rank < 4; ++rank)
    for (int step = 0; step < 4; ++step) {
      const bool later_source = ring.source(0, rank, step) > rank;
      EXPECT_EQ(rotation_step_blocks(layout, ring, causal_mask(), rank, step).empty(), later_source);
    }
}

}  // namespace
}  // namespace spattn
