#include "spattn/dtype.hpp"

#include "spattn/error.hpp"

namespace spattn {

std::size_t dtype_size(DType dtype) { return dtype == DType::f32 ? 4 : 2; }

std::string dtype_name(DType dtype) {
  switch (dtype) {
    case DType::f32: return "fp32";
    case DType::f16: return "fp16";
    case DType::bf16: return "bf16";
  }
  return "unknown";
}

DType parse_dtype(const std::string& name) {
  if (name == "fp32" || name == "float32") return DType::f32;
  if (name == "fp16" || name == "float16") return DType::f16;
  if (name == "bf16" || name == "bfloat16") return DType::bf16;
  SPATTN_FAIL("unknown dtype '" << name << "'; allowed: fp32, fp16, bf16");
}

}  // namespace spattn
