#pragma once
// What a kernel needs of a TensorView, as a plain struct that is passed by value to a launch
// (TensorView's std::array accessors are host-only).

#include <cstdint>

#include "spattn/dtype.hpp"
#include "spattn/tensor.hpp"

namespace spattn::cuda {

struct StridedOperand {
  void* data;
  DType dtype;
  int ndim;
  int64_t shape[TensorView::kMaxDims];    // unused trailing entries are 1
  int64_t strides[TensorView::kMaxDims];  // in elements; unused trailing entries are 0
};

inline StridedOperand strided_operand(const TensorView& view) {
  StridedOperand operand{view.data, view.dtype, view.ndim, {1, 1, 1, 1}, {0, 0, 0, 0}};
  for (int d = 0; d < view.ndim; ++d) {
    operand.shape[d] = view.size(d);
    operand.strides[d] = view.stride(d);
  }
  return operand;
}

}  // namespace spattn::cuda
