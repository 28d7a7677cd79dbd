#pragma once
// Device-side reads and writes of spattn's dtypes as fp32: typed (the element type is a template
// parameter, chosen once per launch) and several elements at a time for the fast kernels, and by
// run-time dtype for the general strided ones. Writes round to nearest even (the hardware
// conversions), as the CPU kernels do; only NaN payloads may differ.

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "kernels/cuda/strided_operand.hpp"

namespace spattn::cuda {

__device__ inline float to_float(float value) { return value; }
__device__ inline float to_float(__half value) { return __half2float(value); }
__device__ inline float to_float(__nv_bfloat16 value) { return __bfloat162float(value); }

template <typename Element>
__device__ inline Element from_float(float value);
template <>
__device__ inline float from_float<float>(float value) { return value; }
template <>
__device__ inline __half from_float<__half>(float value) { return __float2half_rn(value); }
template <>
__device__ inline __nv_bfloat16 from_float<__nv_bfloat16>(float value) { return __float2bfloat16_rn(value); }

/// `Width` neighbouring elements, aligned so that they move in one load or store.
template <typename Element, int Width>
struct alignas(sizeof(Element) * Width) ElementPack {
  Element element[Width];
};

/// values[i] = data[i] for i < Width; data must be aligned to the whole pack.
template <typename Element, int Width>
__device__ inline void load_pack(const void* data, float (&values)[Width]) {
  const ElementPack<Element, Width> pack = *static_cast<const ElementPack<Element, Width>*>(data);
#pragma unroll
  for (int i = 0; i < Width; ++i) values[i] = to_float(pack.element[i]);
}

/// data[i] = values[i] rounded, for i < Width; data must be aligned to the whole pack.
template <typename Element, int Width>
__device__ inline void store_pack(const float (&values)[Width], void* data) {
  ElementPack<Element, Width> pack;
#pragma unroll
  for (int i = 0; i < Width; ++i) pack.element[i] = from_float<Element>(values[i]);
  *static_cast<ElementPack<Element, Width>*>(data) = pack;
}

/// values[i] = row[d + i] for i < Width: one aligned pack when Width > 1 (head_dim contiguous),
/// else the single element at d of a row whose elements are `stride` apart.
template <typename Element, int Width>
__device__ inline void load_row_elements(const Element* row, int64_t d, int64_t stride, float (&values)[Width]) {
  if constexpr (Width > 1) {
    load_pack<Element, Width>(row + d, values);
  } else {
    values[0] = to_float(row[d * stride]);
  }
}

/// row[d + i] = values[i] rounded, the store that matches load_row_elements.
template <typename Element, int Width>
__device__ inline void store_row_elements(const float (&values)[Width], Element* row, int64_t d, int64_t stride) {
  if constexpr (Width > 1) {
    store_pack<Element, Width>(values, row + d);
  } else {
    row[d * stride] = from_float<Element>(values[0]);
  }
}

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

/// Host side: calls `visit` with a value of the element type of `dtype`, so that a launch picks
/// its typed kernel once.
template <typename Visit>
inline void visit_element_type(DType dtype, Visit&& visit) {
  switch (dtype) {
    case DType::f16:
      visit(__half{});
      return;
    case DType::bf16:
      visit(__nv_bfloat16{});
      return;
    case DType::f32:
    default:
      visit(float{});
      return;
  }
}
}  // namespace spattn::cuda
