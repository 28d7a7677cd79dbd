#include "spattn/document_layout.hpp"

#include <algorithm>
#include <sstream>

#include "schedule/host_shards.hpp"
#include "spattn/attention_options.hpp"
#include "spattn/error.hpp"

namespace spattn {
namespace {

// The lengths padded so that they split, after checking the arguments (before any layout is
// built from them): per document, each to the next multiple of what `kind` cuts it into over
// `groups` groups of `ranks_per_group` ranks; as a whole sequence, the last so that the sum
// splits into `groups` stretches.
std::vector<int64_t> padded_document_lengths(DocumentSplit split, LayoutKind kind, const std::vector<int64_t>& lengths,
                                             int groups, int ranks_per_group) {
  SPATTN_CHECK(groups >= 1, "the number of ranks must be at least 1, got " << groups);
  SPATTN_CHECK(ranks_per_group >= 1, "ranks per group must be at least 1, got " << ranks_per_group);
  SPATTN_CHECK(!lengths.empty(), "a packed sequence needs at least one document; got none");
  const std::string error = document_lengths_error(lengths);
  SPATTN_CHECK(error.empty(), error);
  const int64_t parts = (kind == LayoutKind::zigzag ? 2 : 1) * int64_t{groups} * ranks_per_group;
  const auto round_up = [parts](int64_t length) { return (length + parts - 1) / parts * parts; };
  std::vector<int64_t> padded = lengths;
  if (split == DocumentSplit::whole_sequence) {
    int64_t tokens = 0;
    for (int64_t length : lengths) tokens += length;
    padded.back() += round_up(tokens) - tokens;
    return padded;
  }
  for (int64_t& length : padded) length = round_up(length);
  return padded;
}

// `split_groups`: the groups' shards cut over their ranks (SequenceLayout::grouped).
SequenceLayout padded_sequence_layout(DocumentSplit split, LayoutKind kind, const std::vector<int64_t>& padded,
                                      int groups, int ranks_per_group, bool split_groups) {
  if (split == DocumentSplit::whole_sequence) {
    int64_t tokens = 0;
    for (int64_t length : padded) tokens += length;
    return SequenceLayout(kind, tokens, groups);
  }
  SequenceLayout over_groups = SequenceLayout::per_document(kind, padded, groups);
  return split_groups ? SequenceLayout::grouped(over_groups, ranks_per_group) : over_groups;
}

// 0, then the running sums of `lengths`.
std::vector<int64_t> starts_of(const std::vector<int64_t>& lengths) {
  std::vector<int64_t> starts{0};
  for (int64_t length : lengths) starts.push_back(starts.back() + length);
  return starts;
}

// The real tokens of `chunk` (padded positions): how many lead it before the padding, and where
// they are in the packed sequence.
struct RealPart {
  int64_t packed_position = 0;
  int64_t length = 0;
};

RealPart real_part(const DocumentLayout& layout, const SequenceChunk& chunk) {
  const auto document = static_cast<std::size_t>(layout.document_at(chunk.position));
  const int64_t into_document = chunk.position - layout.padded_starts()[document];
  return {layout.packed_starts()[document] + into_document, layout.real_tokens(chunk.position, chunk.length)};
}

void check_document_shapes(const DocumentLayout& layout, const TensorView& packed, const TensorView& local,
                           int seq_dim) {
  check_whole_and_shard("packed", packed, local, seq_dim, layout.sequence_layout().local_length());
  SPATTN_CHECK(packed.size(seq_dim) == layout.tokens(),
               "packed tensor " << packed.describe() << " has " << packed.size(seq_dim) << " tokens; the "
                                << layout.documents() << " documents have " << layout.tokens());
}

}  // namespace

DocumentLayout::DocumentLayout(LayoutKind kind, std::vector<int64_t> document_lengths, int ranks)
    : DocumentLayout(DocumentSplit::per_document, kind, std::move(document_lengths), ranks, 1, false) {}

DocumentLayout DocumentLayout::whole_sequence(std::vector<int64_t> document_lengths, int ranks) {
  return DocumentLayout(DocumentSplit::whole_sequence, LayoutKind::contiguous, std::move(document_lengths), ranks, 1,
                        false);
}

DocumentLayout DocumentLayout::grouped(LayoutKind group_kind, std::vector<int64_t> document_lengths, int groups,
                                       int ranks_per_group) {
  return DocumentLayout(DocumentSplit::per_document, group_kind, std::move(document_lengths), groups, ranks_per_group,
                        true);
}

DocumentLayout DocumentLayout::over_groups() const {
  return DocumentLayout(split_, kind_, document_lengths_, groups_, ranks_per_group_, false);
}

DocumentLayout::DocumentLayout(DocumentSplit split, LayoutKind kind, std::vector<int64_t> document_lengths, int groups,
                               int ranks_per_group, bool split_groups)
    : split_(split),
      groups_(groups),
      ranks_per_group_(ranks_per_group),
      split_groups_(split_groups),
      kind_(kind),
      document_lengths_(std::move(document_lengths)),
      padded_lengths_(padded_document_lengths(split, kind, document_lengths_, groups, ranks_per_group)),
      packed_starts_(starts_of(document_lengths_)),
      padded_starts_(starts_of(padded_lengths_)),
      sequence_layout_(padded_sequence_layout(split, kind, padded_lengths_, groups, ranks_per_group, split_groups)) {}

std::vector<SequenceChunk> DocumentLayout::chunks(int rank) const {
  std::vector<SequenceChunk> cut;
  for (SequenceChunk chunk : sequence_layout_.chunks(rank))
    while (chunk.length > 0) {
      const auto document = static_cast<std::size_t>(document_at(chunk.position));
      SequenceChunk piece = chunk;
      piece.length = std::min(chunk.length, padded_starts_[document + 1] - chunk.position);
      cut.push_back(piece);
      chunk.position += piece.length;
      chunk.local_offset += piece.length;
      chunk.length -= piece.length;
    }
  return cut;
}

std::vector<int64_t> DocumentLayout::local_starts(int rank) const {
  std::vector<int64_t> starts;
  int previous_document = -1;
  for (const SequenceChunk& chunk : chunks(rank)) {
    // A zigzag rank's two parts of a document lie side by side in its shard: one entry.
    const int document = document_at(chunk.position);
    if (document != previous_document) starts.push_back(chunk.local_offset);
    previous_document = document;
  }
  starts.push_back(sequence_layout_.local_length());
  return starts;
}

int DocumentLayout::document_at(int64_t padded_position) const {
  SPATTN_CHECK(padded_position >= 0 && padded_position < padded_starts_.back(),
               "position " << padded_position << " is outside the padded sequence 0.." << padded_starts_.back() - 1);
  return static_cast<int>(std::upper_bound(padded_starts_.begin(), padded_starts_.end(), padded_position) -
                          padded_starts_.begin() - 1);
}

int64_t DocumentLayout::real_tokens(int64_t padded_position, int64_t length) const {
  const auto document = static_cast<std::size_t>(document_at(padded_position));
  const int64_t real = document_lengths_[document] - (padded_position - padded_starts_[document]);
  return std::clamp<int64_t>(real, 0, length);
}

int64_t DocumentLayout::local_padding(int rank) const {
  int64_t real = 0;
  for (const SequenceChunk& chunk : chunks(rank)) real += real_part(*this, chunk).length;
  return sequence_layout_.local_length() - real;
}

int64_t DocumentLayout::query_pairs(int rank, const AttentionMask& mask) const {
  int64_t pairs = 0;
  for (const SequenceChunk& chunk : chunks(rank)) {
    const int64_t real = real_tokens(chunk.position, chunk.length);
    const auto document = static_cast<std::size_t>(document_at(chunk.position));
    const int64_t keys_begin = padded_starts_[document];
    pairs += mask.visible_pairs(chunk.position, chunk.position + real, keys_begin,
                                keys_begin + document_lengths_[document]);
  }
  return pairs;
}

std::string DocumentLayout::describe() const {
  std::ostringstream text;
  if (split_ == DocumentSplit::per_document) text << layout_name(kind_) << " per document";
  else text << "the whole sequence " << layout_name(kind_);
  if (split_groups_) text << " over " << groups_ << " groups of " << ranks_per_group_ << " ranks: ";
  else text << " over " << ranks() << " rank" << (ranks() == 1 ? "" : "s") << ": ";
  text << documents() << " document" << (documents() == 1 ? "" : "s") << ", " << tokens() << " tokens and "
       << padding() << " of padding";
  return text.str();
}

void shard_documents(const DocumentLayout& layout, int rank, const TensorView& packed, TensorView local,
                     int seq_dim) {
  check_document_shapes(layout, packed, local, seq_dim);
  for (const SequenceChunk& chunk : layout.chunks(rank)) {
    const RealPart real = real_part(layout, chunk);
    if (real.length > 0)
      copy_host_tensor(packed.slice(seq_dim, real.packed_position, real.length),
                       local.slice(seq_dim, chunk.local_offset, real.length));
    if (real.length < chunk.length)
      zero_host_tensor(local.slice(seq_dim, chunk.local_offset + real.length, chunk.length - real.length));
  }
}

void unshard_documents(const DocumentLayout& layout, int rank, const TensorView& local, TensorView packed,
                       int seq_dim) {
  check_document_shapes(layout, packed, local, seq_dim);
  for (const SequenceChunk& chunk : layout.chunks(rank)) {
    const RealPart real = real_part(layout, chunk);
    if (real.length > 0)
      copy_host_tensor(local.slice(seq_dim, chunk.local_offset, real.length),
                       packed.slice(seq_dim, real.packed_position, real.length));
  }
}

}  // namespace spattn
