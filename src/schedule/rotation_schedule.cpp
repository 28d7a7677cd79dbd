#include "schedule/rotation_schedule.hpp"

#include <algorithm>
#include <sstream>

#include "schedule/document_cut.hpp"
#include "schedule/length_divisibility.hpp"
#include "spattn/error.hpp"

namespace spattn {

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

SlotCut::SlotCut(const SequenceLayout& layout, int slots) : slot_lengths_(static_cast<std::size_t>(slots), 0) {
  SPATTN_CHECK(slots >= 1, "a rotation needs at least 1 slot, got " << slots);
  // A piece's positions follow its chunk's only where they are consecutive.
  SPATTN_CHECK(slots == 1 || layout.position_stride() == 1,
               "the " << layout.name() << " layout's strided chunks travel whole, in one slot; got " << slots);
  int next_longer = 0;  // the slot that takes the next chunk's first extra token
  for (const SequenceChunk& chunk : layout.chunks(0)) {
    const int64_t base = chunk.length / slots, extra = chunk.length % slots;
    std::vector<int64_t> starts{0};
    for (int slot = 0; slot < slots; ++slot) {
      const bool longer = (slot - next_longer + slots) % slots < extra;
      starts.push_back(starts.back() + base + (longer ? 1 : 0));
      slot_lengths_[static_cast<std::size_t>(slot)] += starts.back() - starts[starts.size() - 2];
    }
    next_longer = static_cast<int>((next_longer + extra) % slots);
    piece_starts_.push_back(std::move(starts));
  }
}

SequenceChunk SlotCut::piece(const SequenceChunk& chunk, std::size_t chunk_index, int slot) const {
  const std::vector<int64_t>& starts = piece_starts_.at(chunk_index);
  const int64_t begin = starts.at(static_cast<std::size_t>(slot)), end = starts.at(static_cast<std::size_t>(slot) + 1);
  return {chunk.position + begin, end - begin, chunk.local_offset + begin};
}

std::vector<SlotPiece> SlotCut::slot_pieces(const SequenceLayout& layout, int rank, int slot) const {
  std::vector<SlotPiece> pieces;
  int64_t slot_offset = 0;
  const std::vector<SequenceChunk>& chunks = layout.chunks(rank);
  for (std::size_t index = 0; index < chunks.size(); ++index) {
    const SequenceChunk cut = piece(chunks[index], index, slot);
    pieces.push_back(SlotPiece{slot, slot_offset, cut.position, cut.length, cut.local_offset});
    slot_offset += cut.length;
  }
  return pieces;
}

std::vector<RotationStepBlock> rotation_step_blocks(const SequenceLayout& layout, const SlotCut& cut,
                                                    const CycleSchedule& schedule, const AttentionMask& mask,
                                                    const DocumentLayout* documents, int rank, int step) {
  // Blocks carry the positions the mask compares for this rank (SequenceLayout::mask_position):
  // the global positions in every layout that takes documents.
  std::vector<SlotPiece> held;
  for (int slot = 0; slot < schedule.slots(); ++slot)
    for (const SlotPiece& piece : cut.slot_pieces(layout, schedule.source(slot, rank, step), slot)) {
      SlotPiece real = real_part(documents, piece);
      real.position = layout.mask_position(real.position, rank);
      if (real.length > 0) held.push_back(real);
    }
  std::vector<RotationStepBlock> blocks;
  for (const SequenceChunk& chunk : layout.chunks(rank)) {
    SequenceChunk queries = real_part(documents, chunk);
    queries.position = layout.mask_position(queries.position, rank);
    if (queries.length == 0) continue;
    RotationStepBlock block{queries, {}};
    for (const SlotPiece& piece : held)
      if (same_document(documents, queries.position, piece.position) &&
          mask.any_visible(queries.position, queries.position + queries.length, piece.position,
                           piece.position + piece.length))
        block.keys.push_back(piece);
    if (!block.keys.empty()) blocks.push_back(block);
  }
  return blocks;
}

namespace {

bool sees_every_key(const RotationStepBlock& block, const AttentionMask& mask) {
  const int64_t first_query = block.queries.position, end_query = first_query + block.queries.length;
  return std::all_of(block.keys.begin(), block.keys.end(), [&](const SlotPiece& piece) {
    return mask.all_visible(first_query, end_query, piece.position, piece.position + piece.length);
  });
}

bool same_piece(const SlotPiece& a, const SlotPiece& b) {
  return a.slot == b.slot && a.slot_offset == b.slot_offset && a.length == b.length && a.position == b.position;
}

}  // namespace

bool fuses_with(const RotationStepBlock& block, const RotationStepBlock& next, const AttentionMask& mask) {
  return block.queries.local_offset + block.queries.length == next.queries.local_offset &&
         std::equal(block.keys.begin(), block.keys.end(), next.keys.begin(), next.keys.end(), same_piece) &&
         sees_every_key(block, mask) && sees_every_key(next, mask);
}

bool keeps_own_gradient(const SequenceLayout& layout) { return layout.ranks() > 1 && layout.chunks(0).size() > 1; }

int64_t visible_pairs(const std::vector<RotationStepBlock>& blocks, const AttentionMask& mask) {
  int64_t pairs = 0;
  for (const RotationStepBlock& block : blocks)
    for (const SlotPiece& piece : block.keys)
      pairs += mask.visible_pairs(block.queries.position, block.queries.position + block.queries.length, piece.position,
                                  piece.position + piece.length);
  return pairs;
}

OwnBlockSplit split_own_blocks(const std::vector<RotationStepBlock>& own, const AttentionMask& mask, int ranks) {
  // Alone there is no hop to hide. A lone block is not cut: as two launches of half its keys each,
  // ring and hamilton without a mask ran 6% slower at 2 x 8k tokens on H200s (2026-11-28), more
  // than the hop they hid.
  if (ranks == 1 || own.size() < 2) return {own, {}};
  std::vector<int64_t> pairs;
  int64_t total = 0;
  for (const RotationStepBlock& block : own) total += pairs.emplace_back(visible_pairs({block}, mask));
  std::vector<std::size_t> heaviest_first(own.size());
  for (std::size_t index = 0; index < own.size(); ++index) heaviest_first[index] = index;
  std::stable_sort(heaviest_first.begin(), heaviest_first.end(),
                   [&](std::size_t a, std::size_t b) { return pairs[a] > pairs[b]; });
  std::vector<bool> late(own.size(), false);
  int64_t late_pairs = 0;
  for (std::size_t index : heaviest_first) {
    if (2 * late_pairs >= total) break;
    late[index] = true;
    late_pairs += pairs[index];
  }
  OwnBlockSplit split;
  for (std::size_t index = 0; index < own.size(); ++index)
    (late[index] ? split.late : split.early).push_back(own[index]);
  return split;
}

double own_late_share(const SequenceLayout& layout, const CycleSchedule& schedule, const AttentionMask& mask) {
  const std::vector<RotationStepBlock> own =
      rotation_step_blocks(layout, SlotCut(layout, schedule.slots()), schedule, mask, nullptr, 0, 0);
  const int64_t pairs = visible_pairs(own, mask);
  if (pairs == 0) return 0.0;
  return static_cast<double>(visible_pairs(split_own_blocks(own, mask, schedule.ranks()).late, mask)) /
         static_cast<double>(pairs);
}

std::vector<std::vector<int64_t>> rotation_visible_pairs(const SequenceLayout& layout, const CycleSchedule& schedule,
                                                         const AttentionMask& mask) {
  const int ranks = schedule.ranks(), slots = schedule.slots();
  const SlotCut slot_cut(layout, slots);
  const std::vector<SequenceChunk>& chunk_shape = layout.chunks(0);  // every rank's chunk lengths
  const std::size_t key_chunks = chunk_shape.size();
  // Per slot, the chunk indices whose piece in it is one token longer than the shortest.
  std::vector<std::vector<std::size_t>> longer(static_cast<std::size_t>(slots));
  for (std::size_t index = 0; index < key_chunks; ++index)
    for (int slot = 0; slot < slots; ++slot)
      if (slot_cut.piece(chunk_shape[index], index, slot).length > chunk_shape[index].length / slots)
        longer[static_cast<std::size_t>(slot)].push_back(index);
  std::vector<std::vector<int64_t>> pairs(static_cast<std::size_t>(ranks),
                                          std::vector<int64_t>(static_cast<std::size_t>(ranks), 0));
  struct Cut {  // a (query chunk, key chunk) pair that the mask cuts: counted piece by piece
    int owner;
    SequenceChunk queries, keys;
    std::size_t key_index;
  };
  std::vector<int64_t> whole(static_cast<std::size_t>(ranks));  // per owner: pairs seen whole with the shortest pieces
  std::vector<int64_t> whole_queries(static_cast<std::size_t>(ranks) * key_chunks);  // per owner and key chunk
  std::vector<int> seen;                                        // owners with whole pairs
  std::vector<Cut> cuts;
  std::vector<int64_t> by_step(static_cast<std::size_t>(ranks));
  for (int holder = 0; holder < ranks; ++holder) {
    std::fill(whole.begin(), whole.end(), 0);
    std::fill(whole_queries.begin(), whole_queries.end(), 0);
    seen.clear();
    cuts.clear();
    for (int owner = 0; owner < ranks; ++owner) {
      bool seen_whole = false;
      for (SequenceChunk queries : layout.chunks(holder)) {
        // Both in the positions the mask compares for the holder (SequenceLayout::mask_position).
        queries.position = layout.mask_position(queries.position, holder);
        for (std::size_t index = 0; index < key_chunks; ++index) {
          SequenceChunk keys = layout.chunks(owner)[index];
          keys.position = layout.mask_position(keys.position, holder);
          const int64_t q_end = queries.position + queries.length, k_end = keys.position + keys.length;
          if (!mask.any_visible(queries.position, q_end, keys.position, k_end)) continue;
          if (mask.all_visible(queries.position, q_end, keys.position, k_end)) {
            whole[static_cast<std::size_t>(owner)] += queries.length * (keys.length / slots);
            whole_queries[static_cast<std::size_t>(owner) * key_chunks + index] += queries.length;
            seen_whole = true;
          } else {
            cuts.push_back({owner, queries, keys, index});
          }
        }
      }
      if (seen_whole) seen.push_back(owner);
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
      const std::vector<std::size_t>& longer_here = longer[static_cast<std::size_t>(slot)];
      for (int owner : seen) {
        int64_t owner_pairs = whole[static_cast<std::size_t>(owner)];
        for (std::size_t index : longer_here)
          owner_pairs += whole_queries[static_cast<std::size_t>(owner) * key_chunks + index];
        by_step[step_of(owner)] += owner_pairs;
      }
      for (const Cut& cut : cuts) {
        const SequenceChunk piece = slot_cut.piece(cut.keys, cut.key_index, slot);
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
