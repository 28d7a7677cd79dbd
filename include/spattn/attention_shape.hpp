#pragma once
/// \file attention_shape.hpp
/// The global shape of a distributed attention call, the same on every rank.

#include <cstdint>
#include <string>

#include "spattn/dtype.hpp"

namespace spattn {

struct AttentionShape {
  int64_t batch = 1;
  int64_t seq = 0;  // global sequence length S (all ranks together)
  int64_t heads = 1;
  int64_t kv_heads = 1;  // heads % kv_heads == 0 (GQA / MQA)
  int64_t head_dim = 64;
  DType dtype = DType::f32;  // of q, k, v, out, dout, dq, dk, dv; lse is always fp32
};

/// Largest head dimension the kernels support.
constexpr int64_t kMaxHeadDim = 256;

/// "" when `shape` is one that spattn computes: every size at least 1, heads divisible by
/// kv_heads, head_dim up to kMaxHeadDim; otherwise the first problem, naming the value and what
/// is allowed. Plans refuse what it refuses, and so does the cost model.
std::string shape_error(const AttentionShape& shape);

}  // namespace spattn
