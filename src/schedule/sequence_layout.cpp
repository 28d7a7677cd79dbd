#include "spattn/sequence_layout.hpp"

#include <algorithm>
#include <cstring>
#include <sstream>

#include "spattn/error.hpp"

namespace spattn {

std::string layout_name(LayoutKind kind) { return kind == LayoutKind::contiguous ? "contiguous" : "zigzag"; }

namespace {

int64_t chunks_per_rank(LayoutKind kind) { return kind == LayoutKind::zigzag ? 2 : 1; }

}  // namespace

std::string SequenceLayout::split_error(LayoutKind kind, int64_t global_length, int ranks) {
  std::ostringstream reason;
  if (ranks < 1) {
    reason << "the number of ranks must be at least 1, got " << ranks;
    return reason.str();
  }
  const int64_t multiple = chunks_per_rank(kind) * ranks;
  if (global_length >= multiple && global_length % multiple == 0) return "";
  const int64_t lower = global_length / multiple * multiple;
  reason << "sequence length " << global_length << " cannot be split over " << ranks << " ranks in the "
         << layout_name(kind) << " layout: it must be a positive multiple of "
         << (kind == LayoutKind::zigzag ? "2 x ranks = " : "ranks = ") << multiple << "; nearest valid lengths: ";
  if (lower > 0) reason << lower << " or ";
  reason << lower + multiple;
  return reason.str();
}

SequenceLayout::SequenceLayout(LayoutKind kind, int64_t global_length, int ranks)
    : kind_(kind), global_length_(global_length), ranks_(ranks) {
  const std::string error = split_error(kind, global_length, ranks);
  SPATTN_CHECK(error.empty(), error);
}

std::vector<SequenceChunk> SequenceLayout::chunks(int rank) const {
  SPATTN_CHECK(rank >= 0 && rank < ranks_, "rank " << rank << " is outside 0.." << ranks_ - 1);
  if (kind_ == LayoutKind::contiguous) {
    const int64_t length = local_length();
    return {SequenceChunk{rank * length, length, 0}};
  }
  // zigzag: 2N chunks of S / 2N; rank r holds chunk r, then chunk 2N-1-r.
  const int64_t chunk = global_length_ / (2 * ranks_);
  return {SequenceChunk{rank * chunk, chunk, 0},
          SequenceChunk{(2 * ranks_ - 1 - rank) * chunk, chunk, chunk}};
}

namespace {

// Copies `source` into `destination` (same dtype, same shape, any strides), a row of the last
// dimension at a time when both store that row contiguously.
void copy_same_dtype(const TensorView& source, const TensorView& destination) {
  const std::size_t element = dtype_size(source.dtype);
  const int last = source.ndim - 1;
  const bool rows_contiguous = source.stride(last) == 1 && destination.stride(last) == 1;
  const int64_t run = rows_contiguous ? source.size(last) : 1;
  std::array<int64_t, TensorView::kMaxDims> index{};
  const int64_t runs = source.numel() / std::max<int64_t>(run, 1);
  for (int64_t linear = 0; linear < runs; ++linear) {
    int64_t rest = linear * run;
    for (int d = last; d >= 0; --d) {
      index[static_cast<std::size_t>(d)] = rest % source.size(d);
      rest /= source.size(d);
    }
    std::memcpy(destination.element_pointer(index), source.element_pointer(index), element * static_cast<std::size_t>(run));
  }
}

void check_shard_shapes(const SequenceLayout& layout, const TensorView& full, const TensorView& local,
                        int seq_dim) {
  SPATTN_CHECK(full.dtype == local.dtype, "full tensor is " << dtype_name(full.dtype) << " but the shard is "
                                                            << dtype_name(local.dtype) << "; they must match");
  SPATTN_CHECK(full.device.kind == DeviceKind::cpu && local.device.kind == DeviceKind::cpu,
               "sharding helpers work on host tensors; got " << full.describe() << " and " << local.describe());
  SPATTN_CHECK(full.ndim == local.ndim && seq_dim >= 0 && seq_dim < full.ndim,
               "full tensor " << full.describe() << " and shard " << local.describe()
                              << " must have the same rank, with sequence dimension " << seq_dim);
  for (int d = 0; d < full.ndim; ++d) {
    const int64_t expected = d == seq_dim ? layout.local_length() : full.size(d);
    SPATTN_CHECK(local.size(d) == expected, "shard " << local.describe() << " has extent " << local.size(d)
                                                     << " in dimension " << d << "; expected " << expected);
  }
  SPATTN_CHECK(full.size(seq_dim) == layout.global_length(),
               "full tensor " << full.describe() << " has " << full.size(seq_dim) << " tokens; the layout has "
                              << layout.global_length());
}

}  // namespace

void shard_sequence(const SequenceLayout& layout, int rank, const TensorView& full, TensorView local, int seq_dim) {
  check_shard_shapes(layout, full, local, seq_dim);
  for (const SequenceChunk& chunk : layout.chunks(rank))
    copy_same_dtype(full.slice(seq_dim, chunk.position, chunk.length),
                    local.slice(seq_dim, chunk.local_offset, chunk.length));
}

void unshard_sequence(const SequenceLayout& layout, int rank, const TensorView& local, TensorView full,
                      int seq_dim) {
  check_shard_shapes(layout, full, local, seq_dim);
  for (const SequenceChunk& chunk : layout.chunks(rank))
    copy_same_dtype(local.slice(seq_dim, chunk.local_offset, chunk.length),
                    full.slice(seq_dim, chunk.position, chunk.length));
}

}  // namespace spattn
