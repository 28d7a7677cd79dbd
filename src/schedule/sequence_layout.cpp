#include "spattn/sequence_layout.hpp"

#include <algorithm>
#include <sstream>

#include "schedule/host_shards.hpp"
#include "schedule/length_divisibility.hpp"
#include "spattn/error.hpp"

namespace spattn {

std::string layout_name(LayoutKind kind) {
  switch (kind) {
    case LayoutKind::contiguous: return "contiguous";
    case LayoutKind::zigzag: return "zigzag";
    case LayoutKind::stripe: return "stripe";
  }
  SPATTN_FAIL("unknown layout kind " << static_cast<int>(kind));
}

namespace {

int64_t chunks_per_rank(LayoutKind kind) { return kind == LayoutKind::zigzag ? 2 : 1; }

// The chunks of every rank of a layout of `kind` (stripe: one chunk of stride `ranks`).
std::vector<std::vector<SequenceChunk>> base_chunks(LayoutKind kind, int64_t global_length, int ranks) {
  std::vector<std::vector<SequenceChunk>> chunks(static_cast<std::size_t>(ranks));
  for (int rank = 0; rank < ranks; ++rank) {
    if (kind == LayoutKind::contiguous) {
      const int64_t length = global_length / ranks;
      chunks[static_cast<std::size_t>(rank)] = {SequenceChunk{rank * length, length, 0}};
    } else if (kind == LayoutKind::stripe) {
      chunks[static_cast<std::size_t>(rank)] = {SequenceChunk{rank, global_length / ranks, 0}};
    } else {
      // zigzag: 2N chunks of S / 2N; rank r holds chunk r, then chunk 2N-1-r.
      const int64_t chunk = global_length / (2 * ranks);
      chunks[static_cast<std::size_t>(rank)] = {SequenceChunk{rank * chunk, chunk, 0},
                                                SequenceChunk{(2 * ranks - 1 - rank) * chunk, chunk, chunk}};
    }
  }
  return chunks;
}

}  // namespace

std::string SequenceLayout::split_error(LayoutKind kind, int64_t global_length, int ranks) {
  if (ranks < 1) return "the number of ranks must be at least 1, got " + std::to_string(ranks);
  const int64_t multiple = chunks_per_rank(kind) * ranks;
  if (global_length >= multiple && global_length % multiple == 0) return "";
  std::ostringstream what;
  what << "sequence length " << global_length << " cannot be split over " << ranks << " ranks in the "
       << layout_name(kind) << " layout";
  return not_a_multiple(what.str(), kind == LayoutKind::zigzag ? "2 x ranks = " : "ranks = ", global_length, multiple);
}

std::string SequenceLayout::grouped_split_error(LayoutKind group_kind, int64_t global_length, int groups,
                                                int ranks_per_group) {
  if (ranks_per_group < 1) return "ranks per group must be at least 1, got " + std::to_string(ranks_per_group);
  const std::string group_error = split_error(group_kind, global_length, groups);
  if (!group_error.empty()) return group_error;
  const int64_t multiple = chunks_per_rank(group_kind) * groups * ranks_per_group;
  if (global_length % multiple == 0) return "";
  std::ostringstream what;
  what << "sequence length " << global_length << " cannot be split over " << groups << " groups of "
       << ranks_per_group << " ranks in the " << layout_name(group_kind) << " layout";
  return not_a_multiple(what.str(),
                        group_kind == LayoutKind::zigzag ? "2 x groups x ranks per group = " : "ranks = ",
                        global_length, multiple);
}

SequenceLayout::SequenceLayout(LayoutKind kind, int64_t global_length, int ranks)
    : name_(layout_name(kind)), global_length_(global_length) {
  const std::string error = split_error(kind, global_length, ranks);
  SPATTN_CHECK(error.empty(), error);
  chunks_ = base_chunks(kind, global_length, ranks);
  if (kind == LayoutKind::stripe) position_stride_ = ranks;
}

SequenceLayout::SequenceLayout(std::string name, int64_t global_length, std::vector<std::vector<SequenceChunk>> chunks,
                               int64_t position_stride)
    : name_(std::move(name)),
      global_length_(global_length),
      chunks_(std::move(chunks)),
      position_stride_(position_stride) {}

int64_t SequenceLayout::mask_position(int64_t position, int viewer) const {
  if (position_stride_ == 1) return position;
  return position / position_stride_ + (position % position_stride_ > viewer ? 1 : 0);
}

SequenceLayout SequenceLayout::grouped(const SequenceLayout& group_layout, int ranks_per_group) {
  SPATTN_CHECK(group_layout.position_stride() == 1,
               "the " << group_layout.name() << " layout cannot be split within groups: its chunks are strided");
  const int64_t group_length = group_layout.local_length();
  SPATTN_CHECK(ranks_per_group >= 1 && group_length % ranks_per_group == 0,
               "a group of " << group_length << " tokens cannot be split over " << ranks_per_group << " ranks");
  const int64_t share = group_length / ranks_per_group;
  std::vector<std::vector<SequenceChunk>> chunks;
  for (int group = 0; group < group_layout.ranks(); ++group) {
    for (int member = 0; member < ranks_per_group; ++member) {
      // Tokens [member * share, (member + 1) * share) of the group's shard, cut where the group's
      // chunks meet.
      const int64_t begin = member * share;
      const int64_t end = begin + share;
      std::vector<SequenceChunk> mine;
      for (const SequenceChunk& chunk : group_layout.chunks(group)) {
        const int64_t overlap_begin = std::max(begin, chunk.local_offset);
        const int64_t overlap_end = std::min(end, chunk.local_offset + chunk.length);
        if (overlap_begin >= overlap_end) continue;
        mine.push_back(SequenceChunk{chunk.position + overlap_begin - chunk.local_offset,
                                     overlap_end - overlap_begin, overlap_begin - begin});
      }
      chunks.push_back(std::move(mine));
    }
  }
  std::ostringstream name;
  name << group_layout.name() << " over " << group_layout.ranks() << " groups of " << ranks_per_group << " ranks";
  return SequenceLayout(name.str(), group_layout.global_length(), std::move(chunks));
}

SequenceLayout SequenceLayout::per_document(LayoutKind kind, const std::vector<int64_t>& document_lengths,
                                            int ranks) {
  SPATTN_CHECK(!document_lengths.empty(), "a packed sequence needs at least one document; got none");
  SPATTN_CHECK(kind != LayoutKind::stripe, "packed documents are not split in the stripe layout");
  std::vector<std::vector<SequenceChunk>> chunks(static_cast<std::size_t>(std::max(ranks, 0)));
  int64_t document_start = 0;
  int64_t local_start = 0;  // of the document's part in every rank's shard
  for (std::size_t document = 0; document < document_lengths.size(); ++document) {
    const int64_t length = document_lengths[document];
    const std::string error = split_error(kind, length, ranks);
    SPATTN_CHECK(error.empty(), "document " << document << ": " << error);
    const std::vector<std::vector<SequenceChunk>> parts = base_chunks(kind, length, ranks);
    for (int rank = 0; rank < ranks; ++rank)
      for (const SequenceChunk& part : parts[static_cast<std::size_t>(rank)])
        chunks[static_cast<std::size_t>(rank)].push_back(
            SequenceChunk{document_start + part.position, part.length, local_start + part.local_offset});
    document_start += length;
    local_start += length / ranks;
  }
  std::ostringstream name;
  name << layout_name(kind) << " per document (" << document_lengths.size() << " document"
       << (document_lengths.size() == 1 ? "" : "s") << ")";
  return SequenceLayout(name.str(), document_start, std::move(chunks));
}

const std::vector<SequenceChunk>& SequenceLayout::chunks(int rank) const {
  SPATTN_CHECK(rank >= 0 && rank < ranks(), "rank " << rank << " is outside 0.." << ranks() - 1);
  return chunks_[static_cast<std::size_t>(rank)];
}

namespace {

void check_shard_shapes(const SequenceLayout& layout, const TensorView& full, const TensorView& local,
                        int seq_dim) {
  check_whole_and_shard("full", full, local, seq_dim, layout.local_length());
  SPATTN_CHECK(full.size(seq_dim) == layout.global_length(),
               "full tensor " << full.describe() << " has " << full.size(seq_dim) << " tokens; the layout has "
                              << layout.global_length());
}

// The tokens of `chunk` in `full` (the whole sequence along `seq_dim`): a strided view.
TensorView chunk_of(const SequenceLayout& layout, const SequenceChunk& chunk, const TensorView& full, int seq_dim) {
  TensorView tokens = full.slice(seq_dim, chunk.position, 1);
  tokens.shape[static_cast<std::size_t>(seq_dim)] = chunk.length;
  tokens.strides[static_cast<std::size_t>(seq_dim)] *= layout.position_stride();
  return tokens;
}

}  // namespace

void shard_sequence(const SequenceLayout& layout, int rank, const TensorView& full, TensorView local, int seq_dim) {
  check_shard_shapes(layout, full, local, seq_dim);
  for (const SequenceChunk& chunk : layout.chunks(rank))
    copy_host_tensor(chunk_of(layout, chunk, full, seq_dim), local.slice(seq_dim, chunk.local_offset, chunk.length));
}

void unshard_sequence(const SequenceLayout& layout, int rank, const TensorView& local, TensorView full,
                      int seq_dim) {
  check_shard_shapes(layout, full, local, seq_dim);
  for (const SequenceChunk& chunk : layout.chunks(rank))
    copy_host_tensor(local.slice(seq_dim, chunk.local_offset, chunk.length), chunk_of(layout, chunk, full, seq_dim));
}

}  // namespace spattn
