#include "spattn/tensor.hpp"

#include <sstream>

#include "spattn/error.hpp"

namespace spattn {

TensorView TensorView::contiguous(void* data, DType dtype, std::initializer_list<int64_t> shape,
                                  Device device) {
  SPATTN_CHECK(shape.size() >= 1 && shape.size() <= kMaxDims,
               "a tensor has 1 to " << kMaxDims << " dimensions, not " << shape.size());
  TensorView view;
  view.data = data;
  view.dtype = dtype;
  view.device = device;
  view.ndim = static_cast<int>(shape.size());
  int dim = 0;
  for (int64_t extent : shape) view.shape[static_cast<std::size_t>(dim++)] = extent;
  int64_t stride = 1;
  for (int d = view.ndim - 1; d >= 0; --d) {
    view.strides[static_cast<std::size_t>(d)] = stride;
    stride *= view.shape[static_cast<std::size_t>(d)];
  }
  return view;
}

int64_t TensorView::numel() const {
  int64_t count = 1;
  for (int d = 0; d < ndim; ++d) count *= size(d);
  return count;
}

bool TensorView::is_contiguous() const {
  int64_t expected = 1;
  for (int d = ndim - 1; d >= 0; --d) {
    if (size(d) != 1 && stride(d) != expected) return false;
    expected *= size(d);
  }
  return true;
}

TensorView TensorView::slice(int dim, int64_t start, int64_t length) const {
  SPATTN_CHECK(dim >= 0 && dim < ndim, "slice dimension " << dim << " of a " << ndim << "-d tensor");
  SPATTN_CHECK(start >= 0 && length >= 0 && start + length <= size(dim),
               "slice [" << start << ", " << start + length << ") of dimension " << dim
                         << " with extent " << size(dim));
  TensorView view = *this;
  view.data = static_cast<char*>(data) + start * stride(dim) * static_cast<int64_t>(dtype_size(dtype));
  view.shape[static_cast<std::size_t>(dim)] = length;
  return view;
}

void* TensorView::element_pointer(const std::array<int64_t, kMaxDims>& index) const {
  int64_t offset = 0;
  for (int d = 0; d < ndim; ++d) offset += index[static_cast<std::size_t>(d)] * stride(d);
  return static_cast<char*>(data) + offset * static_cast<int64_t>(dtype_size(dtype));
}

std::string TensorView::describe() const {
  std::ostringstream text;
  text << "(";
  for (int d = 0; d < ndim; ++d) text << (d ? ", " : "") << size(d);
  text << ") " << dtype_name(dtype) << " " << device_name(device);
  return text.str();
}

}  // namespace spattn
