#include "spattn/dtype.hpp"

#include "core/name_table.hpp"

namespace spattn {
namespace {

// PyTorch's names are accepted too.
const NameTable<DType>& dtype_names() {
  static const NameTable<DType> table("dtype", {{DType::f32, "fp32"},
                                                {DType::f16, "fp16"},
                                                {DType::bf16, "bf16"},
                                                {DType::f32, "float32"},
                                                {DType::f16, "float16"},
                                                {DType::bf16, "bfloat16"}});
  return table;
}

}  // namespace

std::size_t dtype_size(DType dtype) { return dtype == DType::f32 ? 4 : 2; }

std::string dtype_name(DType dtype) { return dtype_names().name(dtype); }

DType parse_dtype(const std::string& name) { return dtype_names().parse(name); }

}  // namespace spattn
