#pragma once
/// \file sequence_layout.hpp
/// How a global sequence is split over ranks, and the helpers that split a full tensor into a
/// rank's shard and put shards back, so users never reorder tokens by hand.

#include <cstdint>
#include <string>
#include <vector>

#include "spattn/tensor.hpp"

namespace spattn {

enum class LayoutKind {
  /// Rank r holds tokens [r * S/N, (r + 1) * S/N). Needs S % N == 0.
  contiguous,
  /// The sequence is cut into 2N chunks; rank r holds chunks r and 2N-1-r, so that under a
  /// causal mask every rank has the same work. Needs S % 2N == 0.
  zigzag,
  /// Striped attention's layout: rank r holds tokens r, r + N, r + 2N, ... (one chunk whose
  /// positions are N apart), so that under a causal mask every rank has the same work at every
  /// step of a ring. Needs S % N == 0.
  stripe,
};

/// "contiguous", "zigzag" or "stripe".
std::string layout_name(LayoutKind kind);

/// A stretch of the global sequence held by one rank: `length` tokens at global positions
/// position, position + stride, ... (SequenceLayout::position_stride: 1 but in the stripe layout).
struct SequenceChunk {
  int64_t position = 0;      // global position of its first token
  int64_t length = 0;        // tokens
  int64_t local_offset = 0;  // where it starts in the rank's shard
};

/// Which tokens of a global sequence every rank holds, as chunks of consecutive positions.
class SequenceLayout {
 public:
  /// Throws Error when the length cannot be split this way, naming the nearest valid lengths.
  SequenceLayout(LayoutKind kind, int64_t global_length, int ranks);

  /// The layout of Ulysses-in-groups schemes (USP): `group_layout` places the sequence over the
  /// groups, and each group's tokens (its chunks, in order) are split contiguously over its
  /// `ranks_per_group` ranks; rank g * ranks_per_group + i is rank i of group g. Throws Error
  /// when a group's tokens do not split evenly.
  static SequenceLayout grouped(const SequenceLayout& group_layout, int ranks_per_group);

  /// Packed documents of `document_lengths`, each split over the ranks by `kind` on its own
  /// (contiguous: rank r holds the r-th of N parts of every document; zigzag: parts r and 2N-1-r
  /// of 2N, so that under a causal mask within documents every rank has the same work); a rank's
  /// shard holds its parts in document order. Throws Error naming the first document whose length
  /// does not split (DocumentLayout pads documents so that they do).
  static SequenceLayout per_document(LayoutKind kind, const std::vector<int64_t>& document_lengths, int ranks);

  /// An empty string when `global_length` splits over `ranks` in this layout, else the reason
  /// with the nearest valid lengths.
  static std::string split_error(LayoutKind kind, int64_t global_length, int ranks);

  /// Like split_error, for grouped(SequenceLayout(group_kind, global_length, groups), ranks_per_group).
  static std::string grouped_split_error(LayoutKind group_kind, int64_t global_length, int groups,
                                         int ranks_per_group);

  /// e.g. "zigzag", or "zigzag over 2 groups of 4 ranks".
  const std::string& name() const { return name_; }
  int64_t global_length() const { return global_length_; }
  int ranks() const { return static_cast<int>(chunks_.size()); }
  /// Tokens per rank: S / N.
  int64_t local_length() const { return global_length_ / ranks(); }
  /// The chunks of `rank`, in the order they sit in its shard.
  const std::vector<SequenceChunk>& chunks(int rank) const;
  /// The distance between the global positions of a chunk's consecutive tokens: N in the stripe
  /// layout, 1 in every other.
  int64_t position_stride() const { return position_stride_; }
  /// Where the token at global `position` sits among the positions that the mask compares for
  /// `viewer`'s queries, in which every chunk's tokens are consecutive: `position` itself in every
  /// layout but stripe. There (stride N) it is the token's stripe, plus one for a token of a rank
  /// after the viewer: the viewer's query i (global iN + r) sees key j of rank s (global jN + s)
  /// under a causal mask exactly when j + [s > r] <= i. Only a causal mask, or none, keeps its
  /// meaning in these positions (a window's width would shrink N times): the stripe layout takes
  /// no sliding window and no packed documents.
  int64_t mask_position(int64_t position, int viewer) const;

 private:
  SequenceLayout(std::string name, int64_t global_length, std::vector<std::vector<SequenceChunk>> chunks,
                 int64_t position_stride = 1);

  std::string name_;
  int64_t global_length_;
  std::vector<std::vector<SequenceChunk>> chunks_;  // per rank
  int64_t position_stride_ = 1;
};

/// Copies rank `rank`'s shard of `full` (the whole sequence along `seq_dim`) into `local`.
/// Both on the host, same dtype; other dimensions equal. seq_dim is 1 for BSHD, 2 for lse (B, H, S).
void shard_sequence(const SequenceLayout& layout, int rank, const TensorView& full, TensorView local,
                    int seq_dim = 1);

/// The inverse of shard_sequence: writes `local` into its place in `full`.
void unshard_sequence(const SequenceLayout& layout, int rank, const TensorView& local, TensorView full,
                      int seq_dim = 1);

}  // namespace spattn
