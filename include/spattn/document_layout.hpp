#pragma once
/// \file document_layout.hpp
/// Packed documents (variable-length sequences, flash-attn's cu_seqlens) split over ranks. Per
/// document (the default), for balance: every rank holds an equal part of every document, so that
/// each rank's work is the same whatever the documents' lengths, and a document whose length does
/// not split is padded at its end. As a whole sequence (Llama 3's context parallelism): rank r
/// holds the r-th of N equal stretches of the packed sequence, padded at its end. Padding is
/// reported, filled with zeros in the shards and dropped when the shards are put back, and
/// nothing is truncated.

#include <cstdint>
#include <string>
#include <vector>

#include "spattn/attention_options.hpp"
#include "spattn/sequence_layout.hpp"
#include "spattn/tensor.hpp"

namespace spattn {

class DocumentLayout {
 public:
  /// Documents of `document_lengths` (each at least 1 token, packed one after another) over
  /// `ranks` ranks. contiguous: rank r holds the r-th of N equal parts of every document; zigzag:
  /// parts r and 2N-1-r of 2N, which gives every rank the same work under a causal mask within
  /// documents. A document is padded to the next multiple of N (contiguous) or 2N (zigzag).
  /// Throws Error naming the value and what is allowed: ranks below 1, no documents, a length
  /// below 1.
  DocumentLayout(LayoutKind kind, std::vector<int64_t> document_lengths, int ranks);
  /// USP's split: every document split over `groups` groups in `group_kind` as above, then each
  /// group's shard (its parts of the documents, in order) cut contiguously over its
  /// `ranks_per_group` ranks; rank g * ranks_per_group + i is rank i of group g. A document is
  /// padded to the next multiple of groups x ranks_per_group (x 2 for zigzag), so that every
  /// group's part splits over its ranks. Throws like the constructor.
  static DocumentLayout grouped(LayoutKind group_kind, std::vector<int64_t> document_lengths, int groups,
                                int ranks_per_group);
  /// DocumentSplit::whole_sequence: the packed sequence padded to the next multiple of N (the
  /// last document takes the padding), rank r holding its r-th of N contiguous stretches. Throws
  /// like the constructor.
  static DocumentLayout whole_sequence(std::vector<int64_t> document_lengths, int ranks);

  /// The documents as the groups of a grouped layout hold them: the same padded documents split
  /// over the groups alone (the layout the rotation across USP's groups runs). Any other layout is
  /// its own groups, of one rank each.
  DocumentLayout over_groups() const;

  DocumentSplit split() const { return split_; }
  /// How each document (per_document) or the whole sequence (whole_sequence) is cut.
  LayoutKind kind() const { return kind_; }
  int ranks() const { return sequence_layout_.ranks(); }
  int documents() const { return static_cast<int>(document_lengths_.size()); }
  const std::vector<int64_t>& document_lengths() const { return document_lengths_; }
  /// Each document's length with its padding.
  const std::vector<int64_t>& padded_lengths() const { return padded_lengths_; }
  /// The tokens the caller holds: the sum of the document lengths.
  int64_t tokens() const { return packed_starts_.back(); }
  /// Padding tokens over all documents: sequence_layout().global_length() - tokens().
  int64_t padding() const { return sequence_layout_.global_length() - tokens(); }
  /// Where each document starts in the packed sequence the caller holds, and its end at the back:
  /// flash-attn's cu_seqlens (documents() + 1 entries).
  const std::vector<int64_t>& packed_starts() const { return packed_starts_; }
  /// The same in the padded packed sequence.
  const std::vector<int64_t>& padded_starts() const { return padded_starts_; }
  /// The layout of the padded packed sequence: a rank's shard holds its parts of the documents
  /// in document order (SequenceLayout::per_document), or its stretch of the whole sequence.
  const SequenceLayout& sequence_layout() const { return sequence_layout_; }
  /// `rank`'s chunks of sequence_layout() cut where documents end: each inside one document, in
  /// shard order (split per document, the chunks themselves).
  std::vector<SequenceChunk> chunks(int rank) const;
  /// Where each document that `rank` holds a part of starts in its shard, padding included, and
  /// the shard's length at the back: the rank's cu_seqlens (per document, the same on every rank).
  std::vector<int64_t> local_starts(int rank) const;
  /// The document that holds `padded_position` (a position of the padded sequence).
  int document_at(int64_t padded_position) const;
  /// How many of the `length` tokens from `padded_position` (all in one document) are real: they
  /// lead, and the document's padding follows them.
  int64_t real_tokens(int64_t padded_position, int64_t length) const;
  /// Padding tokens in `rank`'s shard.
  int64_t local_padding(int rank) const;
  /// The query-key pairs that `rank`'s real queries see under `mask` within their documents:
  /// the rank's share of the work where queries stay on their rank (the rotations, all-gather).
  int64_t query_pairs(int rank, const AttentionMask& mask) const;
  /// e.g. "zigzag per document over 4 ranks: 3 documents, 4103 tokens and 9 of padding".
  std::string describe() const;

 private:
  DocumentLayout(DocumentSplit split, LayoutKind kind, std::vector<int64_t> document_lengths, int groups,
                 int ranks_per_group, bool split_groups);

  DocumentSplit split_;
  int groups_;
  int ranks_per_group_;  // what the padding lets every group's part split over
  bool split_groups_;    // sequence_layout_ cuts the groups' shards over their ranks
  LayoutKind kind_;
  std::vector<int64_t> document_lengths_;
  std::vector<int64_t> padded_lengths_;
  std::vector<int64_t> packed_starts_;
  std::vector<int64_t> padded_starts_;
  SequenceLayout sequence_layout_;
};

/// Copies rank `rank`'s shard of `packed` (the documents one after another along `seq_dim`,
/// layout.tokens() of them, no padding) into `local` (layout.sequence_layout().local_length()
/// along `seq_dim`), writing zeros where the shard holds padding. Host tensors of one dtype; the
/// other dimensions equal. seq_dim is 1 for BSHD (batch 1), 0 for THD, 2 for lse (B, H, S).
void shard_documents(const DocumentLayout& layout, int rank, const TensorView& packed, TensorView local,
                     int seq_dim = 1);

/// The inverse of shard_documents: writes the real tokens of `local` into their places in
/// `packed`; its padding goes nowhere.
void unshard_documents(const DocumentLayout& layout, int rank, const TensorView& local, TensorView packed,
                       int seq_dim = 1);

}  // namespace spattn
