// Properties of rotation schedules (ring, Hamiltonian cycles, two-level) over both layouts: every
// visible (query, key) pair is computed exactly once over the steps, masked-out pieces are never
// scheduled, and under a causal zigzag layout every rank does the same work at every step, all
// of it unmasked after step 0 (the zigzag ring, and the M/P rule of Hamiltonian attention).

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
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

// The blocks of rotation_step_blocks with the layout's own cut into the schedule's slots.
std::vector<RotationStepBlock> step_blocks(const SequenceLayout& layout, const CycleSchedule& schedule,
                                           const AttentionMask& mask, int rank, int step,
                                           const DocumentLayout* documents = nullptr) {
  return rotation_step_blocks(layout, SlotCut(layout, schedule.slots()), schedule, mask, documents, rank, step);
}

TEST(RotationSchedule, SlotPiecesTileTheShard) {
  const SequenceLayout layout(LayoutKind::zigzag, 2 * 3 * 4 * 5, 3);  // 3 ranks, 4 slots, pieces of 5
  const SlotCut cut(layout, 4);
  for (int rank = 0; rank < 3; ++rank) {
    std::vector<int> covered(static_cast<std::size_t>(layout.local_length()), 0);
    for (int slot = 0; slot < 4; ++slot) {
      EXPECT_EQ(cut.slot_length(slot), 10);
      const std::vector<SlotPiece> pieces = cut.slot_pieces(layout, rank, slot);
      ASSERT_EQ(pieces.size(), 2u);
      EXPECT_EQ(pieces[1].slot_offset, 5);
      for (int piece = 0; piece < 2; ++piece) {
        const SlotPiece& cut_piece = pieces[static_cast<std::size_t>(piece)];
        const SequenceChunk chunk = layout.chunks(rank)[static_cast<std::size_t>(piece)];
        // Equal pieces in slot order, as before documents made chunks of any length.
        EXPECT_EQ(cut_piece.shard_offset, chunk.local_offset + 5 * slot);
        EXPECT_EQ(cut_piece.position, chunk.position + cut_piece.shard_offset - chunk.local_offset);
        for (int64_t i = 0; i < 5; ++i) ++covered[static_cast<std::size_t>(cut_piece.shard_offset + i)];
      }
    }
    for (int count : covered) EXPECT_EQ(count, 1);
  }
}

// Chunks of lengths that do not divide by the slots (documents): every shard is tiled once, the
// slots are within a token of each other and the same on every rank.
TEST(RotationSchedule, UnevenChunksCutIntoSlotsWithinATokenOfEachOther) {
  const int ranks = 3, slots = 4;
  const DocumentLayout documents(LayoutKind::zigzag, {1, 7, 13, 2, 30}, ranks);
  const SequenceLayout& layout = documents.sequence_layout();
  const SlotCut cut(layout, slots);
  int64_t shortest = layout.local_length(), longest = 0, total = 0;
  for (int slot = 0; slot < slots; ++slot) {
    shortest = std::min(shortest, cut.slot_length(slot));
    longest = std::max(longest, cut.slot_length(slot));
    total += cut.slot_length(slot);
  }
  EXPECT_LE(longest - shortest, 1);
  EXPECT_EQ(total, layout.local_length());
  for (int rank = 0; rank < ranks; ++rank) {
    std::vector<int> covered(static_cast<std::size_t>(layout.local_length()), 0);
    for (int slot = 0; slot < slots; ++slot) {
      int64_t slot_tokens = 0;
      for (const SlotPiece& piece : cut.slot_pieces(layout, rank, slot)) {
        EXPECT_EQ(piece.slot_offset, slot_tokens);
        slot_tokens += piece.length;
        for (int64_t i = 0; i < piece.length; ++i) ++covered[static_cast<std::size_t>(piece.shard_offset + i)];
      }
      EXPECT_EQ(slot_tokens, cut.slot_length(slot)) << "rank " << rank << " slot " << slot;
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
            for (const RotationStepBlock& block : step_blocks(layout, schedule, mask, rank, step))
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
    // Both layouts, and documents' chunks that do not cut evenly into the slots.
    const int64_t length = 2 * set.ranks * schedule.slots() * 3;
    const SequenceLayout layouts[] = {SequenceLayout(LayoutKind::contiguous, length, set.ranks),
                                      SequenceLayout(LayoutKind::zigzag, length, set.ranks),
                                      DocumentLayout(LayoutKind::zigzag, {3, 11, 1}, set.ranks).sequence_layout()};
    for (const SequenceLayout& layout : layouts)
      for (const AttentionMask& mask : masks) {
        const std::vector<std::vector<int64_t>> pairs = rotation_visible_pairs(layout, schedule, mask);
        for (int rank = 0; rank < set.ranks; ++rank)
          for (int step = 0; step < set.ranks; ++step) {
            int64_t listed = 0;
            for (const RotationStepBlock& block : step_blocks(layout, schedule, mask, rank, step))
              for (const SlotPiece& piece : block.keys)
                for (int64_t i = 0; i < block.queries.length; ++i)
                  for (int64_t j = 0; j < piece.length; ++j)
                    listed += mask.visible(block.queries.position + i, piece.position + j);
            ASSERT_EQ(pairs[static_cast<std::size_t>(step)][static_cast<std::size_t>(rank)], listed)
                << set.name << " " << layout.name() << " mask " << mask.left << "," << mask.right << " rank "
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
        for (const RotationStepBlock& block : step_blocks(layout, schedule, causal_mask(), rank, step)) {
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

// Under the causal mask a zigzag ring's rank whose keys come from a lower rank has both of its
// chunks after them: the two blocks fuse into one call. Its own step (diagonal blocks), a higher
// rank's keys (one chunk sees both pieces, the other none) and a window that cuts the pairs do not.
TEST(RotationSchedule, ZigzagChunksAfterTheHeldKeysFuse) {
  const int ranks = 4;
  const CycleSchedule schedule(ring_cycles(ranks), ranks);
  const SequenceLayout layout(LayoutKind::zigzag, 2 * ranks * 16, ranks);
  const auto fused = [&](const AttentionMask& mask, int rank, int step) {
    const std::vector<RotationStepBlock> blocks = step_blocks(layout, schedule, mask, rank, step);
    return blocks.size() == 2 && fuses_with(blocks[0], blocks[1], mask);
  };
  for (int rank = 0; rank < ranks; ++rank)
    for (int step = 0; step < ranks; ++step) {
      const int source = schedule.source(0, rank, step);
      EXPECT_EQ(fused(causal_mask(), rank, step), source < rank) << "rank " << rank << " step " << step;
      // Without a mask every chunk sees every held piece: every step fuses.
      EXPECT_TRUE(fused(AttentionMask{}, rank, step)) << "rank " << rank << " step " << step;
      // A window of 8 tokens cuts the pairs of every pair of chunks.
      EXPECT_FALSE(fused(AttentionMask{8, 0}, rank, step)) << "rank " << rank << " step " << step;
    }
}

// Stripe: the blocks hold the positions the mask compares for their rank (mask_position); read
// back as global positions they cover every visible pair exactly once and nothing else, and at
// every step each rank's causal work is within a row of every other's.
TEST(RotationSchedule, StripeCoversEveryVisiblePairOnceWithBalancedSteps) {
  for (int ranks = 1; ranks <= 8; ++ranks) {
    const CycleSchedule schedule(ring_cycles(ranks), ranks);
    const int64_t local = 5, length = local * ranks;
    const SequenceLayout layout(LayoutKind::stripe, length, ranks);
    for (const AttentionMask& mask : {AttentionMask{-1, -1}, causal_mask()}) {
      std::vector<int> covered(static_cast<std::size_t>(length * length), 0);
      for (int step = 0; step < ranks; ++step)
        for (int rank = 0; rank < ranks; ++rank) {
          const int owner = schedule.source(0, rank, step);
          int64_t visible = 0;
          for (const RotationStepBlock& block : step_blocks(layout, schedule, mask, rank, step))
            for (const SlotPiece& piece : block.keys)
              for (int64_t i = 0; i < block.queries.length; ++i)
                for (int64_t j = 0; j < piece.length; ++j) {
                  if (!mask.visible(block.queries.position + i, piece.position + j)) continue;
                  ++visible;
                  const int64_t query = (block.queries.position + i) * ranks + rank;
                  const int64_t key = (piece.position + j - (owner > rank ? 1 : 0)) * ranks + owner;
                  ASSERT_TRUE(mask.visible(query, key)) << "ranks " << ranks << " query " << query << " key " << key;
                  ++covered[static_cast<std::size_t>(query * length + key)];
                }
          const int64_t whole = mask.right < 0 ? local * local : local * (local + (owner > rank ? -1 : 1)) / 2;
          EXPECT_EQ(visible, whole) << "ranks " << ranks << " step " << step << " rank " << rank;
        }
      for (int64_t query = 0; query < length; ++query)
        for (int64_t key = 0; key < length; ++key)
          ASSERT_EQ(covered[static_cast<std::size_t>(query * length + key)], mask.visible(query, key) ? 1 : 0)
              << "ranks " << ranks << " pair " << query << "," << key;
    }
  }
}

// Packed documents (lengths of 1, lengths that do not split, one longer than the rest together):
// every visible pair of a document's real tokens is covered exactly once, and no block pairs
// tokens of two documents or takes padding.
TEST(RotationSchedule, DocumentsCoverEveryVisiblePairOfADocumentOnce) {
  const AttentionMask masks[] = {AttentionMask{-1, -1}, causal_mask(), AttentionMask{3, 1}};
  const std::vector<int64_t> lengths{1, 9, 2, 40, 5};
  for (const NamedCycles& set : every_cycle_set()) {
    const CycleSchedule schedule(set.cycles, set.ranks);
    for (LayoutKind kind : {LayoutKind::contiguous, LayoutKind::zigzag})
      for (const AttentionMask& mask : masks) {
        const DocumentLayout documents(kind, lengths, set.ranks);
        const SequenceLayout& layout = documents.sequence_layout();
        const int64_t length = layout.global_length();
        std::vector<int> covered(static_cast<std::size_t>(length * length), 0);
        for (int rank = 0; rank < set.ranks; ++rank)
          for (int step = 0; step < set.ranks; ++step)
            for (const RotationStepBlock& block : step_blocks(layout, schedule, mask, rank, step, &documents))
              for (const SlotPiece& piece : block.keys)
                for (int64_t i = 0; i < block.queries.length; ++i)
                  for (int64_t j = 0; j < piece.length; ++j)
                    ++covered[static_cast<std::size_t>((block.queries.position + i) * length + piece.position + j)];
        for (int64_t query = 0; query < length; ++query)
          for (int64_t key = 0; key < length; ++key) {
            const int document = documents.document_at(query);
            const bool real = documents.real_tokens(query, 1) == 1 && documents.real_tokens(key, 1) == 1;
            const bool same_document = real && documents.document_at(key) == document;
            // The kernels apply the mask inside a block: a masked pair of one document may be listed.
            const int count = covered[static_cast<std::size_t>(query * length + key)];
            if (same_document && mask.visible(query, key))
              ASSERT_EQ(count, 1) << set.name << " " << layout_name(kind) << " mask " << mask.left << ","
                                  << mask.right << " pair " << query << "," << key;
            else
              ASSERT_LE(count, same_document ? 1 : 0) << set.name << " " << layout_name(kind) << " pair " << query
                                                      << "," << key;
          }
      }
  }
}

// The backward's two parts of a rank's own blocks are its blocks, each once and whole, the late
// part at least half of the visible pairs when there are several blocks; with one (contiguous
// layouts) or alone, every block is early.
TEST(RotationSchedule, OwnBlocksSplitInTwoPartsOfEveryBlockOnce) {
  const AttentionMask masks[] = {AttentionMask{-1, -1}, causal_mask(), AttentionMask{5, 2}, AttentionMask{7, 0}};
  const auto same_block = [](const RotationStepBlock& a, const RotationStepBlock& b) {
    if (a.queries.local_offset != b.queries.local_offset || a.keys.size() != b.keys.size()) return false;
    for (std::size_t index = 0; index < a.keys.size(); ++index)
      if (a.keys[index].slot != b.keys[index].slot || a.keys[index].slot_offset != b.keys[index].slot_offset ||
          a.keys[index].length != b.keys[index].length)
        return false;
    return true;
  };
  for (const NamedCycles& set : every_cycle_set()) {
    const CycleSchedule schedule(set.cycles, set.ranks);
    for (LayoutKind kind : {LayoutKind::contiguous, LayoutKind::zigzag})
      for (const AttentionMask& mask : masks) {
        const SequenceLayout layout(kind, 2 * set.ranks * schedule.slots() * 3, set.ranks);
        for (int rank = 0; rank < set.ranks; ++rank) {
          SCOPED_TRACE(set.name + " " + layout_name(kind) + " mask " + std::to_string(mask.left) + "," +
                       std::to_string(mask.right) + " rank " + std::to_string(rank));
          const std::vector<RotationStepBlock> own = step_blocks(layout, schedule, mask, rank, 0);
          const OwnBlockSplit split = split_own_blocks(own, mask, set.ranks);
          ASSERT_EQ(split.early.size() + split.late.size(), own.size());
          std::size_t early = 0, late = 0;
          for (const RotationStepBlock& block : own) {
            if (early < split.early.size() && same_block(split.early[early], block)) {
              ++early;
            } else {
              ASSERT_LT(late, split.late.size());
              EXPECT_TRUE(same_block(split.late[late], block));
              ++late;
            }
          }
          if (set.ranks > 1 && own.size() > 1) {
            EXPECT_FALSE(split.early.empty());
            EXPECT_GE(2 * visible_pairs(split.late, mask), visible_pairs(own, mask));
          } else {
            EXPECT_TRUE(split.late.empty());
          }
        }
      }
  }
}

// The causal zigzag ring at 2 ranks: the late part is the later chunk's block, both its pieces
// (three quarters of the pairs), the early part the earlier chunk's diagonal. The causal ring's
// lone diagonal stays early, and so does every block of a rank alone.
TEST(RotationSchedule, OwnBlocksSplitOfTheZigzagAndRingDiagonals) {
  const CycleSchedule ring(ring_cycles(2), 2);
  const SequenceLayout zigzag(LayoutKind::zigzag, 400, 2);
  const std::vector<RotationStepBlock> own = step_blocks(zigzag, ring, causal_mask(), 0, 0);
  ASSERT_EQ(own.size(), 2u);
  const OwnBlockSplit split = split_own_blocks(own, causal_mask(), 2);
  ASSERT_EQ(split.early.size(), 1u);
  ASSERT_EQ(split.late.size(), 1u);
  EXPECT_EQ(split.early[0].queries.position, own[0].queries.position);
  EXPECT_EQ(split.late[0].keys.size(), 2u);
  EXPECT_EQ(split.late[0].queries.position, own[1].queries.position);
  EXPECT_NEAR(own_late_share(zigzag, ring, causal_mask()), 0.75, 0.005);

  const SequenceLayout contiguous(LayoutKind::contiguous, 400, 2);
  const OwnBlockSplit diagonal = split_own_blocks(step_blocks(contiguous, ring, causal_mask(), 1, 0), causal_mask(), 2);
  EXPECT_EQ(diagonal.early.size(), 1u);
  EXPECT_TRUE(diagonal.late.empty());
  EXPECT_EQ(own_late_share(contiguous, ring, causal_mask()), 0.0);

  // The owners keep their gradient where every rank holds several query chunks: the ranks agree
  // on the hops, whatever their own blocks.
  EXPECT_TRUE(keeps_own_gradient(zigzag));
  EXPECT_FALSE(keeps_own_gradient(contiguous));
  EXPECT_TRUE(keeps_own_gradient(DocumentLayout(LayoutKind::contiguous, {100, 300}, 2).sequence_layout()));

  const CycleSchedule alone(ring_cycles(1), 1);
  const SequenceLayout one_rank(LayoutKind::zigzag, 400, 1);
  EXPECT_FALSE(keeps_own_gradient(one_rank));
  const OwnBlockSplit whole = split_own_blocks(step_blocks(one_rank, alone, causal_mask(), 0, 0), causal_mask(), 1);
  EXPECT_EQ(whole.early.size(), 2u);
  EXPECT_TRUE(whole.late.empty());
  EXPECT_EQ(own_late_share(one_rank, alone, causal_mask()), 0.0);
}

// Plain ring under a causal mask skips the sources after the rank entirely (the imbalance that
// zigzag removes).
TEST(RotationSchedule, ContiguousCausalRingSkipsLaterSources) {
  const SequenceLayout layout(LayoutKind::contiguous, 40, 4);
  const CycleSchedule ring(ring_cycles(4), 4);
  for (int rank = 0; rank < 4; ++rank)
    for (int step = 0; step < 4; ++step) {
      const bool later_source = ring.source(0, rank, step) > rank;
      EXPECT_EQ(step_blocks(layout, ring, causal_mask(), rank, step).empty(), later_source);
    }
}

}  // namespace
}  // namespace spattn
