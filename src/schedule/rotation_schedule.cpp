#include "schedule/rotation_schedule.hpp"

#include <algorithm>
#include <sstream>

#include "schedule/length_divisibility.hpp"
#include "spattn/error.hpp"

namespace spattn {

int64_t slot_length(const SequenceLayout& layout, int slots) { return layout.local_length() / slots; }

std::string slot_split_error(LayoutKind kind, int64_t global_length, int ranks, int slots) {
  const std::string layout_error = SequenceLayout::split_error(kind, global_length, ranks);
  if (slots <= 1 || !layout_error.empty()) return layout_error;
  const int64_t chunks_per_rank = kind == LayoutKind::zigzag ? 2 : 1;
  const int64_t multiple = chunks_per_rank * ranks * slots;
  if (global_length % multiple == 0) return "";
  std::ostringstream what;
  what << "sequence length " << global_length << " cannot be cut into " << slots << " slots per chunk over " << ranks
       << " ranks in the " << layout_name(kind) << " layout";
  return not_a_multiple(what.str(), chunks_per_rank == 2 ? "2 x ranks x slots = " : "ranks x slots = ",
                        global_length, multiple);
}

namespace {

// Piece `slot` of `chunk`: the cut that makes the slots.
SequenceChunk chunk_piece(const SequenceChunk& chunk, int slots, int slot) {
  const int64_t piece_length = chunk.length / slots;
  return {chunk.position + slot * piece_length, piece_length, chunk.local_offset + slot * piece_length};
}

}  // namespace

std::vector<SlotPiece> slot_pieces(const SequenceLayout& layout, int slots, int rank, int slot) {
  std::vector<SlotPiece> pieces;
  int64_t slot_offset = 0;
  for (const SequenceChunk& chunk : layout.chunks(rank)) {
    const SequenceChunk piece = chunk_piece(chunk, slots, slot);
    pieces.push_back(SlotPiece{slot, slot_offset, piece.position, piece.length});
    slot_offset += piece.length;
  }
  return pieces;
}

int64_t shard_offset_of_piece(const SequenceLayout& layout, int slots, int rank, int slot, int piece) {
  return chunk_piece(layout.chunks(rank).at(static_cast<std::size_t>(piece)), slots, slot).local_offset;
}

std::vector<RotationStepBlock> rotation_step_blocks(const SequenceLayout& layout, const CycleSchedule& schedule,
                                                    const AttentionMask& mask, int rank, int step) {
  std::vector<SlotPiece> held;
  for (int slot = 0; slot < schedule.slots(); ++slot)
    for (const SlotPiece& piece : slot_pieces(layout, schedule.slots(), schedule.source(slot, rank, step), slot))
      held.push_back(piece);
  std::vector<RotationStepBlock> blocks;
  for (const SequenceChunk& queries : layout.chunks(rank)) {
    RotationStepBlock block{queries, {}};
    for (const SlotPiece& piece : held)
      if (mask.any_visible(queries.position, queries.position + queries.length, piece.position,
                           piece.position + piece.length))
        block.keys.push_back(piece);
    if (!block.keys.empty()) blocks.push_back(block);
  }
  return blocks;
}

std::vector<std::vector<int64_t>> rotation_visible_pairs(const SequenceLayout& layout, const CycleSchedule& schedule,
                                                         const AttentionMask& mask) {
  const int ranks = schedule.ranks(), slots = schedule.slots();
  std::vector<std::vector<int64_t>> pairs(static_cast<std::size_t>(ranks),
                                          std::vector<int64_t>(static_cast<std::size_t>(ranks), 0));
  struct Cut {  // a (query chunk, key chunk) pair that the mask cuts: counted piece by piece
    int owner;
    SequenceChunk queries, keys;
  };
  std::vector<int64_t> whole(static_cast<std::size_t>(ranks));  // per owner: the pairs of each slot seen whole
  std::vector<int> seen;                                        // owners with whole pairs
  std::vector<Cut> cuts;
  std::vector<int64_t> by_step(static_cast<std::size_t>(ranks));
  for (int holder = 0; holder < ranks; ++holder) {
    std::fill(whole.begin(), whole.end(), 0);
    seen.clear();
    cuts.clear();
    for (int owner = 0; owner < ranks; ++owner) {
      for (const SequenceChunk& queries : layout.chunks(holder))
        for (const SequenceChunk& keys : layout.chunks(owner)) {
          const int64_t q_end = queries.position + queries.length, k_end = keys.position + keys.length;
          if (!mask.any_visible(queries.position, q_end, keys.position, k_end)) continue;
          if (mask.all_visible(queries.position, q_end, keys.position, k_end)) {
            whole[static_cast<std::size_t>(owner)] += queries.length * chunk_piece(keys, slots, 0).length;
          } else {
            cuts.push_back({owner, queries, keys});
          }
        }
      if (whole[static_cast<std::size_t>(owner)] > 0) seen.push_back(owner);
    }
    std::fill(by_step.begin(), by_step.end(), 0);
    for (int slot = 0; slot < slots; ++slot) {
      // Slot `slot` of `owner` reaches the holder after (its position - the owner's) hops:
      // CycleSchedule::arrival_step's rule, inline, since this runs ranks^2 x slots times and the
      // call with its checks took 3-4x as long (hamilton at 1024 ranks: 4 s against 1.3 s).
      const std::vector<int>& position = schedule.positions(slot);
      const int here = position[static_cast<std::size_t>(holder)];
      const auto step_of = [&](int owner) {
        const int hops = here - position[static_cast<std::size_t>(owner)];
        return static_cast<std::size_t>(hops < 0 ? hops + ranks : hops);
      };
      for (int owner : seen) by_step[step_of(owner)] += whole[static_cast<std::size_t>(owner)];
      for (const Cut& cut : cuts) {
        const SequenceChunk piece = chunk_piece(cut.keys, slots, slot);
        by_step[step_of(cut.owner)] += mask.visible_pairs(cut.queries.position, cut.queries.position + cut.queries.length,
                                                          piece.position, piece.position + piece.length);
      }
    }
    for (int step = 0; step < ranks; ++step)
      pairs[static_cast<std::size_t>(step)][static_cast<std::size_t>(holder)] = by_step[static_cast<std::size_t>(step)];
  }
  return pairs;
}

}  // namespace spattn
