#pragma once
// Device-side reads and writes of one element of any spattn dtype as fp32. Writes round to
// nearest even (the hardware conversions), as the CPU kernels do; only NaN payloads may differ.

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "kernels/cuda/strided_operand.hpp"

namespace spattn::cuda {

/// Offset in elements of the element at row-major position `flat` of `operand`.
__device__ inline int64_t element_offset(const StridedOperand& operand, int64_t flat) {
  int64_t offset = 0;
  for (int d = operand.ndim - 1; d >= 0; --d) {
    offset += (flat % operand.shape[d]) * operand.strides[d];
    flat /= operand.shape[d];
  }
  return offset;
}

__device__ inline float load_as_float(const void* data, DType dtype, int64_t offset) {
  switch (dtype) {
    case DType::f16:
      return __half2float(static_cast<const __half*>(data)[offset]);
    case DType::bf16:
      return __bfloat162float(static_cast<const __nv_bfloat16*>(data)[offset]);
    case DType::f32:
    default:
      return static_cast<const float*>(data)[offset];
  }
}

__device__ inline void store_from_float(float value, void* data, DType dtype, int64_t offset) {
  switch (dtype) {
    case DType::f16:
      static_cast<__half*>(data)[offset] = __float2half_rn(value);
      return;
    case DType::bf16:
      static_cast<__nv_bfloat16*>(data)[offset] = __float2bfloat16_rn(value);
      return;
    case DType::f32:
    default:
      static_cast<float*>(data)[offset] = value;
      return;
  }
}

}  // namespace spattn::cuda
