#pragma once
// Reading and writing strided runs of elements of any dtype as fp32.

#include <cstdint>

#include "core/dtype_conversion.hpp"
#include "spattn/dtype.hpp"

namespace spattn::cpu {

/// destination[i] = source[i * stride] converted to fp32, for i < count.
inline void load_run_as_float(const void* source, DType dtype, int64_t stride, int64_t count,
                              float* destination) {  // (count)
  switch (dtype) {
    case DType::f32: {
      const float* values = static_cast<const float*>(source);
      for (int64_t i = 0; i < count; ++i) destination[i] = values[i * stride];
      return;
    }
    case DType::f16: {
      const uint16_t* bits = static_cast<const uint16_t*>(source);
      for (int64_t i = 0; i < count; ++i) destination[i] = fp16_to_float(bits[i * stride]);
      return;
    }
    case DType::bf16: {
      const uint16_t* bits = static_cast<const uint16_t*>(source);
      for (int64_t i = 0; i < count; ++i) destination[i] = bf16_to_float(bits[i * stride]);
      return;
    }
  }
}

/// destination[i * stride] = source[i] converted (rounding to nearest even), for i < count.
inline void store_run_from_float(const float* source,  // (count)
                                 int64_t count, void* destination, DType dtype, int64_t stride) {
  switch (dtype) {
    case DType::f32: {
      float* values = static_cast<float*>(destination);
      for (int64_t i = 0; i < count; ++i) values[i * stride] = source[i];
      return;
    }
    case DType::f16: {
      uint16_t* bits = static_cast<uint16_t*>(destination);
      for (int64_t i = 0; i < count; ++i) bits[i * stride] = float_to_fp16(source[i]);
      return;
    }
    case DType::bf16: {
      uint16_t* bits = static_cast<uint16_t*>(destination);
      for (int64_t i = 0; i < count; ++i) bits[i * stride] = float_to_bf16(source[i]);
      return;
    }
  }
}

}  // namespace spattn::cpu
