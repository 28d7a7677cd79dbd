#pragma once
// What a kernel needs of a TensorView, as a plain struct that is passed by value to a launch
// (TensorView's std::array accessors are host-only).

#include <cstdint>
#include <initializer_list>

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

/// Whether every (b, s, h) row of these (B, S, H, D) operands starts on a `width`-element boundary
/// with head_dim contiguous and a multiple of `width`, so that a thread may move `width`
/// neighbouring elements of a row in one aligned load.
inline bool rows_take_packs(std::initializer_list<const StridedOperand*> operands, int width) {
  for (const StridedOperand* operand : operands) {
    const std::size_t pack_bytes = static_cast<std::size_t>(width) * dtype_size(operand->dtype);
    if (operand->ndim != 4 || operand->shape[3] % width != 0 || operand->strides[3] != 1 ||
        operand->strides[0] % width != 0 || operand->strides[1] % width != 0 || operand->strides[2] % width != 0 ||
        reinterpret_cast<std::uintptr_t>(operand->data) % pack_bytes != 0)
      return false;
  }
  return true;
}

}  // namespace spattn::cuda
