#pragma once
// Same-shape operands of an element-wise kernel seen as `rows` rows of `row_length` contiguous
// elements each: the layout of nearly every tensor the strategies touch (whole tensors, slices
// along the sequence, slices along heads, lse slices), for which the kernels need no index
// arithmetic per element and can move several elements per load. Views that do not fold this
// way (a transposed view) take the kernels' general strided path.

#include <cstdint>

#include "kernels/cuda/strided_operand.hpp"

namespace spattn::cuda {

/// One operand of a row layout: row r starts at element r * row_stride of data.
struct RowOperand {
  void* data;
  int64_t row_stride;  // in elements
};

struct RowLayout {
  int64_t rows = 0;
  int64_t row_length = 0;
  int vector_width = 1;  // elements per load and store: 4 when every row start is aligned to it, else 1
};

/// Folds the dimensions that `operands` (all of one shape) share into rows of contiguous
/// elements: dimensions of size 1 drop out, the innermost dimensions with stride 1 and nested
/// strides form the row, and every outer dimension must nest into one row stride. Returns false
/// when some operand's strides do not fold so (the general strided kernels then apply).
inline bool fold_into_rows(const StridedOperand* operands, int count, RowLayout& layout, RowOperand* rows_of) {
  const StridedOperand& shape_of = operands[0];
  int64_t row_length = 1, rows = 1;
  bool in_row = true;  // still folding dimensions into the row, from the innermost outwards
  int64_t row_strides[8] = {};
  int64_t expected_row_stride[8] = {};
  for (int i = 0; i < count; ++i) expected_row_stride[i] = 1;
  for (int d = shape_of.ndim - 1; d >= 0; --d) {
    const int64_t size = shape_of.shape[d];
    if (size == 1) continue;
    if (in_row) {
      bool nests = true;
      for (int i = 0; i < count; ++i) nests = nests && operands[i].strides[d] == row_length;
      if (nests) {
        row_length *= size;
        continue;
      }
      in_row = false;
      for (int i = 0; i < count; ++i) {
        row_strides[i] = operands[i].strides[d];
        expected_row_stride[i] = operands[i].strides[d];
      }
    }
    // An outer dimension: it must continue the row stride of every operand.
    for (int i = 0; i < count; ++i) {
      if (operands[i].strides[d] != expected_row_stride[i]) return false;
      expected_row_stride[i] = operands[i].strides[d] * size;
    }
    rows *= size;
  }
  layout.rows = rows;
  layout.row_length = row_length;
  layout.vector_width = row_length % 4 == 0 ? 4 : 1;
  for (int i = 0; i < count; ++i) {
    rows_of[i] = {operands[i].data, in_row ? row_length : row_strides[i]};
    const auto address = reinterpret_cast<std::uintptr_t>(operands[i].data);
    const std::size_t vector_bytes = 4 * dtype_size(operands[i].dtype);
    if (address % vector_bytes != 0 || rows_of[i].row_stride % 4 != 0) layout.vector_width = 1;
  }
  return true;
}

}  // namespace spattn::cuda
