#include "schedule/host_copy.hpp"

#include <algorithm>
#include <array>
#include <cstring>

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
