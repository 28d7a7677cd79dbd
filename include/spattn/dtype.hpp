#pragma once
/// \file dtype.hpp
/// Element types of tensors that spattn reads and writes.

#include <cstddef>
#include <string>

namespace spattn {

/// Element type. fp16 and bf16 are stored as 16-bit patterns and computed in fp32.
enum class DType { f32, f16, bf16 };

/// Bytes per element.
std::size_t dtype_size(DType dtype);

/// "fp32", "fp16" or "bf16".
std::string dtype_name(DType dtype);

/// Parses "fp32"/"float32", "fp16"/"float16", "bf16"/"bfloat16"; throws Error naming the
/// accepted spellings otherwise.
DType parse_dtype(const std::string& name);

}  // namespace spattn
