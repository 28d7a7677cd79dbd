#include "schedule/rotation_schedule.hpp"

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

std::vector<SlotPiece> slot_pieces(const SequenceLayout& layout, int slots, int rank, int slot) {
  const std::vector<SequenceChunk> chunks = layout.chunks(rank);
  std::vector<SlotPiece> pieces;
  int64_t slot_offset = 0;
  for (const SequenceChunk& chunk : chunks) {
    const int64_t piece_length = chunk.length / slots;
    pieces.push_back(SlotPiece{slot, slot_offset, chunk.position + slot * piece_length, piece_length});
    slot_offset += piece_length;
  }
  return pieces;
}

int64_t shard_offset_of_piece(const SequenceLayout& layout, int slots, int rank, int slot, int piece) {
  const SequenceChunk chunk = layout.chunks(rank).at(static_cast<std::size_t>(piece));
  return chunk.local_offset + slot * (chunk.length / slots);
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

}  // namespace spattn
