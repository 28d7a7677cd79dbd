#pragma once
// Which blocks a rank computes at each step of a rotation (ring, Hamiltonian-cycle, two-level),
// as pure functions of the layout, the cycles, the mask and the documents. Every chunk a rank
// holds is cut into one piece per cycle (SlotCut); slot c is piece c of each of the rank's chunks,
// stored one after another, and it travels along cycle c. At step s rank r holds slot c of rank
// schedule.source(c, r, s), and pairs each of its query chunks with every piece of the held
// slots it can see, so only unmasked work is scheduled (for a causal zigzag layout this is the
// M/P rule of hamilton.md and the zigzag ring's balanced steps). With packed documents a query
// chunk sees only pieces of its own document, and neither takes its document's padding.

#include <string>
#include <vector>

#include "schedule/cycle_schedule.hpp"
#include "spattn/attention_options.hpp"
#include "spattn/document_layout.hpp"
#include "spattn/sequence_layout.hpp"

namespace spattn {

/// A piece of a slot: where it sits in the slot's buffer and in the global sequence.
struct SlotPiece {
  int slot = 0;
  int64_t slot_offset = 0;  // first token inside the slot
  int64_t position = 0;     // global position of that token
  int64_t length = 0;
  int64_t shard_offset = 0;  // where it sits in its owner's shard
};

/// A query chunk and the pieces of held slots it sees at one step.
struct RotationStepBlock {
  SequenceChunk queries;
  std::vector<SlotPiece> keys;
};

/// "" when every chunk of the layout cuts into `slots` equal pieces, else why, with the
/// nearest valid sequence lengths.
std::string slot_split_error(LayoutKind kind, int64_t global_length, int ranks, int slots);

/// How every chunk of a layout is cut into one piece per slot. A chunk of L tokens gives every
/// slot L / slots of them and L % slots of the slots one more, taken in turn across the chunks,
/// so that the slots stay within a token of each other; a chunk's pieces lie in slot order. Every
/// rank holds chunks of the same lengths in the same order (contiguous, zigzag, per document), so
/// a slot has the same length on every rank, and a slot sent along its cycle fits its receiver.
class SlotCut {
 public:
  SlotCut(const SequenceLayout& layout, int slots);

  int slots() const { return static_cast<int>(slot_lengths_.size()); }
  /// Tokens of slot `slot` (on every rank).
  int64_t slot_length(int slot) const { return slot_lengths_.at(static_cast<std::size_t>(slot)); }
  /// Piece `slot` of the chunk at `chunk_index` of a rank's chunks (positions, offset in the shard).
  SequenceChunk piece(const SequenceChunk& chunk, std::size_t chunk_index, int slot) const;
  /// The pieces of slot `slot` of `rank` (piece `slot` of each of its chunks, in chunk order).
  std::vector<SlotPiece> slot_pieces(const SequenceLayout& layout, int rank, int slot) const;

 private:
  std::vector<std::vector<int64_t>> piece_starts_;  // per chunk index: slots + 1 offsets into the chunk
  std::vector<int64_t> slot_lengths_;
};

/// The blocks of `rank` at `step`; query chunks that see nothing held are left out. `documents`:
/// the packed documents of a per-document layout (nullptr: the sequence is one document, no
/// padding); a block's queries and keys are then cut to their document's real tokens.
std::vector<RotationStepBlock> rotation_step_blocks(const SequenceLayout& layout, const SlotCut& cut,
                                                    const CycleSchedule& schedule, const AttentionMask& mask,
                                                    const DocumentLayout* documents, int rank, int step);

/// Whether `next` joins `block` (a block of the same step listed before it) in one kernel call:
/// its query rows follow `block`'s in the rank's shard, it sees the same pieces, and every query
/// of both sees every key of them. The call then needs no mask, so the rows of its later chunk
/// need no positions of their own. Under a causal zigzag layout a rank whose held keys come from
/// a lower rank has both of its chunks after them: one call of twice the rows instead of two,
/// each with the tail of a short launch.
bool fuses_with(const RotationStepBlock& block, const RotationStepBlock& next, const AttentionMask& mask);

/// The backward's two parts of a rank's own blocks (those of step 0, on its own keys and values):
/// `early` runs at step 0 while the keys and values make their first hop, `late` after the last
/// step, while the last gradient hop brings the rank's slots their gradients from the other ranks
/// (with no block left, that hop would stand exposed).
struct OwnBlockSplit {
  std::vector<RotationStepBlock> early;
  std::vector<RotationStepBlock> late;
};

/// Deals `own` (a rank's step-0 blocks of a rotation over `ranks`) into two parts: `late` takes
/// the blocks of most visible pairs until it holds at least half of them (the hop it hides
/// carries fp32 gradients, twice the bytes of the keys and values that `early` hides), `early`
/// the rest, each in the order of `own`. Blocks are not cut: a lone block (one query chunk that
/// sees its own keys, as in the contiguous and stripe layouts) stays early, as does every block of
/// a rank alone (ranks 1).
OwnBlockSplit split_own_blocks(const std::vector<RotationStepBlock>& own, const AttentionMask& mask, int ranks);

/// Whether the rotation's backward keeps each rank's gradient of its own keys at home from step 0,
/// its last hop carrying the others' part in fp32 beside the late own blocks: where every rank
/// holds several query chunks (zigzag, packed documents) and has company. The same answer on every
/// rank, as the ranks' hops must match; a rank whose own blocks have no late part then leaves the
/// last hop exposed. Otherwise the own gradient travels with the others from step 0.
bool keeps_own_gradient(const SequenceLayout& layout);

/// The visible (query, key) pairs of `blocks`.
int64_t visible_pairs(const std::vector<RotationStepBlock>& blocks, const AttentionMask& mask);

/// The share of rank 0's own visible pairs that split_own_blocks leaves late (one document; 0
/// when none is late or it sees none of its own keys).
double own_late_share(const SequenceLayout& layout, const CycleSchedule& schedule, const AttentionMask& mask);

/// The visible (query, key) pairs of every rank at every step, pairs[step][rank]: the work of
/// rotation_step_blocks (one document), counted without listing the blocks. Chunk pairs that a
/// rank sees whole add a piece's length per query; only those the mask cuts are counted piece by
/// piece (AttentionMask::visible_pairs). At most ranks^2 x slots additions: about a second for
/// hamilton's 1023 slots at 1024 ranks.
std::vector<std::vector<int64_t>> rotation_visible_pairs(const SequenceLayout& layout, const CycleSchedule& schedule,
                                                         const AttentionMask& mask);

}  // namespace spattn
