#include "schedule/host_shards.hpp"

#include <algorithm>
#include <array>
#include <cstring>

#include "spattn/error.hpp"

namespace spattn {
namespace {

// Calls `visit(index, run)` for every run of `run` elements of `view` that lie next to each other
// in the last dimension when `rows_contiguous`, else one element at a time.
template <typename Visit>
void for_each_run(const TensorView& view, bool rows_contiguous, Visit visit) {
  const int last = view.ndim - 1;
  const int64_t run = rows_contiguous ? view.size(last) : 1;
  std::array<int64_t, TensorView::kMaxDims> index{};
  const int64_t runs = view.numel() / std::max<int64_t>(run, 1);
  for (int64_t linear = 0; linear < runs; ++linear) {
    int64_t rest = linear * run;
    for (int d = last; d >= 0; --d) {
      index[static_cast<std::size_t>(d)] = rest % view.size(d);
      rest /= view.size(d);
    }
    visit(index, run);
  }
}

}  // namespace

void check_whole_and_shard(const char* whole_name, const TensorView& whole, const TensorView& local, int seq_dim,
                           int64_t local_tokens) {
  SPATTN_CHECK(whole.dtype == local.dtype, whole_name << " tensor is " << dtype_name(whole.dtype) << " but the shard is "
                                                      << dtype_name(local.dtype) << "; they must match");
  SPATTN_CHECK(whole.device.kind == DeviceKind::cpu && local.device.kind == DeviceKind::cpu,
               "sharding helpers work on host tensors; got " << whole.describe() << " and " << local.describe());
  SPATTN_CHECK(whole.ndim == local.ndim && seq_dim >= 0 && seq_dim < whole.ndim,
               whole_name << " tensor " << whole.describe() << " and shard " << local.describe()
                          << " must have the same rank, with sequence dimension " << seq_dim);
  for (int d = 0; d < whole.ndim; ++d) {
    const int64_t expected = d == seq_dim ? local_tokens : whole.size(d);
    SPATTN_CHECK(local.size(d) == expected, "shard " << local.describe() << " has extent " << local.size(d)
                                                     << " in dimension " << d << "; expected " << expected);
  }
}

void copy_host_tensor(const TensorView& source, const TensorView& destination) {
  const std::size_t element = dtype_size(source.dtype);
  const int last = source.ndim - 1;
  for_each_run(source, source.stride(last) == 1 && destination.stride(last) == 1,
               [&](const std::array<int64_t, TensorView::kMaxDims>& index, int64_t run) {
                 std::memcpy(destination.element_pointer(index), source.element_pointer(index),
                             element * static_cast<std::size_t>(run));
               });
}

void zero_host_tensor(const TensorView& destination) {
  const std::size_t element = dtype_size(destination.dtype);
  for_each_run(destination, destination.stride(destination.ndim - 1) == 1,
               [&](const std::array<int64_t, TensorView::kMaxDims>& index, int64_t run) {
                 std::memset(destination.element_pointer(index), 0, element * static_cast<std::size_t>(run));
               });
}

}  // namespace spattn
