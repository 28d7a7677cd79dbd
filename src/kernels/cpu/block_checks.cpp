#include "kernels/cpu/block_checks.hpp"

#include <string>

#include "spattn/error.hpp"

namespace spattn::cpu {
namespace {

void check_on_cpu(const TensorView& tensor, const char* name) {
  SPATTN_CHECK(tensor.data != nullptr, name << " has no data");
  SPATTN_CHECK(tensor.device == Device::cpu(),
               name << " " << tensor.describe() << " must be on the cpu for the cpu kernels");
}

void check_shape(const TensorView& tensor, const char* name, int64_t d0, int64_t d1, int64_t d2,
                 int64_t d3, int ndim) {
  check_on_cpu(tensor, name);
  const int64_t expected[4] = {d0, d1, d2, d3};
  bool matches = tensor.ndim == ndim;
  for (int d = 0; matches && d < ndim; ++d) matches = tensor.size(d) == expected[d];
  SPATTN_CHECK(matches, name << " is " << tensor.describe() << ", expected shape (" << d0 << ", "
                             << d1 << ", " << d2 << (ndim == 4 ? ", " + std::to_string(d3) : "")
                             << ")");
}

void check_fp32(const TensorView& tensor, const char* name) {
  SPATTN_CHECK(tensor.dtype == DType::f32, name << " is " << tensor.describe() << ", expected fp32");
}

BlockShape query_shape(const TensorView& q) {
  check_on_cpu(q, "q");
  SPATTN_CHECK(q.ndim == 4, "q is " << q.describe() << ", expected (B, S, H, D)");
  BlockShape shape;
  shape.batch = q.size(0);
  shape.query_rows = q.size(1);
  shape.heads = q.size(2);
  shape.head_dim = q.size(3);
  SPATTN_CHECK(shape.head_dim >= 1, "q " << q.describe() << " has head_dim 0");
  return shape;
}

void check_segment(const KvSegment& segment, BlockShape& shape) {
  check_on_cpu(segment.k, "k");
  SPATTN_CHECK(segment.k.ndim == 4, "k is " << segment.k.describe() << ", expected (B, S, HK, D)");
  if (shape.kv_heads == 0) shape.kv_heads = segment.k.size(2);
  const int64_t keys = segment.k.size(1);
  check_shape(segment.k, "k", shape.batch, keys, shape.kv_heads, shape.head_dim, 4);
  check_shape(segment.v, "v", shape.batch, keys, shape.kv_heads, shape.head_dim, 4);
  SPATTN_CHECK(shape.kv_heads >= 1 && shape.heads % shape.kv_heads == 0,
               "heads (" << shape.heads << ") must be divisible by kv_heads (" << shape.kv_heads << ")");
}

}  // namespace

BlockShape check_forward_block(const ForwardBlock& block) {
  BlockShape shape = query_shape(block.q);
  for (const KvSegment& segment : block.segments) check_segment(segment, shape);
  if (shape.kv_heads == 0) shape.kv_heads = shape.heads;  // no keys: every row is empty
  check_shape(block.out, "out", shape.batch, shape.query_rows, shape.heads, shape.head_dim, 4);
  check_fp32(block.out, "out");
  if (block.final_out.data != nullptr)
    check_shape(block.final_out, "final_out", shape.batch, shape.query_rows, shape.heads, shape.head_dim, 4);
  check_shape(block.lse, "lse", shape.batch, shape.heads, shape.query_rows, 0, 3);
  check_fp32(block.lse, "lse");
  return shape;
}

BlockShape check_backward_block(const BackwardBlock& block) {
  BlockShape shape = query_shape(block.q);
  for (const KvGradSegment& segment : block.segments) {
    check_segment(segment.kv, shape);
    check_shape(segment.dk, "dk", shape.batch, segment.kv.k.size(1), shape.kv_heads, shape.head_dim, 4);
    check_fp32(segment.dk, "dk");
    check_shape(segment.dv, "dv", shape.batch, segment.kv.k.size(1), shape.kv_heads, shape.head_dim, 4);
    check_fp32(segment.dv, "dv");
  }
  if (shape.kv_heads == 0) shape.kv_heads = shape.heads;
  check_shape(block.dout, "dout", shape.batch, shape.query_rows, shape.heads, shape.head_dim, 4);
  check_shape(block.lse, "lse", shape.batch, shape.heads, shape.query_rows, 0, 3);
  check_fp32(block.lse, "lse");
  check_shape(block.delta, "delta", shape.batch, shape.heads, shape.query_rows, 0, 3);
  check_fp32(block.delta, "delta");
  check_shape(block.dq, "dq", shape.batch, shape.query_rows, shape.heads, shape.head_dim, 4);
  check_fp32(block.dq, "dq");
  return shape;
}

}  // namespace spattn::cpu
