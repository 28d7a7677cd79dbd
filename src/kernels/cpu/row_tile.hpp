#pragma once
// Tiles of consecutive sequence rows of one head of a (B, S, H, D) tensor, as the fp32 row-major
// matrices that BLAS multiplies, and the way back into the tensor.

#include <cstdint>

#include "kernels/cpu/element_access.hpp"
#include "spattn/tensor.hpp"

namespace spattn::cpu {

/// A (rows, D) fp32 matrix: element (i, d) at data[i * row_stride + d].
struct RowTile {
  const float* data;
  int64_t row_stride;
};

/// Rows [row_begin, row_begin + rows) of head `head` of batch `batch`. fp32 tensors whose head
/// dim is contiguous are used in place (no copy); anything else is converted into `scratch`.
inline RowTile load_row_tile(const TensorView& tensor,  // (B, S, H, D)
                             int64_t batch, int64_t row_begin, int64_t rows, int64_t head,
                             float* scratch) {  // (rows, D)
  const int64_t head_dim = tensor.size(3);
  const char* first = static_cast<const char*>(tensor.element_pointer({batch, row_begin, head, 0}));
  if (tensor.dtype == DType::f32 && tensor.stride(3) == 1)
    return RowTile{reinterpret_cast<const float*>(first), tensor.stride(1)};
  const int64_t row_bytes = tensor.stride(1) * static_cast<int64_t>(dtype_size(tensor.dtype));
  for (int64_t i = 0; i < rows; ++i)
    load_run_as_float(first + i * row_bytes, tensor.dtype, tensor.stride(3), head_dim, scratch + i * head_dim);
  return RowTile{scratch, head_dim};
}

/// tensor rows += tile (fp32 tensors only: they are the accumulators dq, dk, dv).
inline void accumulate_row_tile(const float* tile,  // (rows, D), row stride D
                                int64_t rows, TensorView tensor,  // (B, S, H, D) fp32
                                int64_t batch, int64_t row_begin, int64_t head) {
  const int64_t head_dim = tensor.size(3);
  for (int64_t i = 0; i < rows; ++i) {
    float* row = static_cast<float*>(tensor.element_pointer({batch, row_begin + i, head, 0}));
    const int64_t stride = tensor.stride(3);
    for (int64_t d = 0; d < head_dim; ++d) row[d * stride] += tile[i * head_dim + d];
  }
}

/// The (B, H, S) fp32 values of rows [row_begin, row_begin + rows) of one head.
inline void load_row_statistics(const TensorView& statistics,  // (B, H, S) fp32
                                int64_t batch, int64_t head, int64_t row_begin, int64_t rows,
                                float* values) {  // (rows)
  const float* first = static_cast<const float*>(statistics.element_pointer({batch, head, row_begin, 0}));
  for (int64_t i = 0; i < rows; ++i) values[i] = first[i * statistics.stride(2)];
}

}  // namespace spattn::cpu
