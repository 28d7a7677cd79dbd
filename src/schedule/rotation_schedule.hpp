#pragma once
// Which blocks a rank computes at each step of a rotation (ring, Hamiltonian-cycle, two-level),
// as pure functions of the layout, the cycles and the mask. Every chunk a rank holds is cut
// into one equal piece per cycle; slot c is piece c of each of the rank's chunks, stored one
// after another, and it travels along cycle c. At step s rank r holds slot c of rank
// schedule.source(c, r, s), and pairs each of its query chunks with every piece of the held
// slots it can see, so only unmasked work is scheduled (for a causal zigzag layout this is the
// M/P rule of hamilton.md and the zigzag ring's balanced steps).

#include <string>
#include <vector>

#include "schedule/cycle_schedule.hpp"
#include "spattn/attention_options.hpp"
#include "spattn/sequence_layout.hpp"

namespace spattn {

/// A piece of a slot: where it sits in the slot's buffer and in the global sequence.
struct SlotPiece {
  int slot = 0;
  int64_t slot_offset = 0;  // first token inside the slot
  int64_t position = 0;     // global position of that token
  int64_t length = 0;
};

/// A query chunk and the pieces of held slots it sees at one step.
struct RotationStepBlock {
  SequenceChunk queries;
  std::vector<SlotPiece> keys;
};

/// Tokens of one slot: the local length over the number of slots.
int64_t slot_length(const SequenceLayout& layout, int slots);

/// "" when every chunk of the layout cuts into `slots` equal pieces, else why, with the
/// nearest valid sequence lengths.
std::string slot_split_error(LayoutKind kind, int64_t global_length, int ranks, int slots);

/// The pieces of slot `slot` of `rank` (piece `slot` of each of its chunks, in chunk order).
std::vector<SlotPiece> slot_pieces(const SequenceLayout& layout, int slots, int rank, int slot);

/// Where piece `piece` of this rank's slot `slot` sits in its own shard: the inverse of the
/// cut, used to fill slots from the caller's keys and return gradients.
int64_t shard_offset_of_piece(const SequenceLayout& layout, int slots, int rank, int slot, int piece);

/// The blocks of `rank` at `step`; query chunks that see nothing held are left out.
std::vector<RotationStepBlock> rotation_step_blocks(const SequenceLayout& layout, const CycleSchedule& schedule,
                                                    const AttentionMask& mask, int rank, int step);

/// The visible (query, key) pairs of every rank at every step, pairs[step][rank]: the work of
/// rotation_step_blocks, counted without listing the blocks. Chunk pairs that a rank sees whole
/// add the same to every slot; only those the mask cuts are counted piece by piece
/// (AttentionMask::visible_pairs). At most ranks^2 x slots additions: about a second for
/// hamilton's 1023 slots at 1024 ranks.
std::vector<std::vector<int64_t>> rotation_visible_pairs(const SequenceLayout& layout, const CycleSchedule& schedule,
                                                         const AttentionMask& mask);

}  // namespace spattn
