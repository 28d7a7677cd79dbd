#include "spattn/local_attention.hpp"

#include "kernels/block_kernels.hpp"
#include "spattn/error.hpp"
#include "strategies/call_validation.hpp"
#include "strategies/device_buffer.hpp"

namespace spattn {

namespace {

// The shape implied by q and k, after checking every argument against it.
AttentionShape checked_shape(const TensorView& q, const TensorView& k,
                             std::initializer_list<std::pair<const char*, const TensorView*>> query_like,
                             std::initializer_list<std::pair<const char*, const TensorView*>> key_like,
                             const TensorView& lse, const AttentionOptions& options, const Device& device) {
  SPATTN_CHECK(q.ndim == 4, "q has shape " << q.describe() << "; expected 4 dimensions (B, S, H, D)");
  SPATTN_CHECK(k.ndim == 4, "k has shape " << k.describe() << "; expected 4 dimensions (B, S, HK, D)");
  const AttentionShape shape{q.size(0), q.size(1), q.size(2), k.size(2), q.size(3), q.dtype};
  std::string error = shape_and_options_error(shape, options);
  for (const auto& [name, tensor] : query_like)
    if (error.empty())
      error = tensor_error(name, *tensor, {shape.batch, shape.seq, shape.heads, shape.head_dim}, shape.dtype, device);
  for (const auto& [name, tensor] : key_like)
    if (error.empty())
      error = tensor_error(name, *tensor, {shape.batch, shape.seq, shape.kv_heads, shape.head_dim}, shape.dtype, device);
  if (error.empty()) error = tensor_error("lse", lse, {shape.batch, shape.heads, shape.seq}, DType::f32, device);
  SPATTN_CHECK(error.empty(), error);
  return shape;
}

std::size_t fp32_bytes(int64_t batch, int64_t seq, int64_t heads, int64_t head_dim) {
  return static_cast<std::size_t>(batch * seq * heads * head_dim) * sizeof(float);
}

}  // namespace

void local_attention_forward(const TensorView& q, const TensorView& k, const TensorView& v, TensorView out,
                             TensorView lse, const AttentionOptions& options) {
  auto kernels = make_block_kernels(q.device);
  const AttentionShape shape = checked_shape(q, k, {{"q", &q}, {"out", &out}}, {{"k", &k}, {"v", &v}}, lse, options,
                                             kernels->device());
  const DeviceBuffer out_buffer(*kernels, fp32_bytes(shape.batch, shape.seq, shape.heads, shape.head_dim));
  ForwardBlock block;
  block.q = q;
  block.segments = {KvSegment{k, v, 0}};
  block.mask = AttentionMask::from_options(options);
  block.scale = resolved_scale(shape, options);
  block.out = TensorView::contiguous(out_buffer.data(), DType::f32, {shape.batch, shape.seq, shape.heads, shape.head_dim},
                                     kernels->device());
  block.lse = lse;
  kernels->forward(block);
  kernels->copy(block.out, out);
}

void local_attention_backward(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& out,
                              const TensorView& lse, const TensorView& dout, TensorView dq, TensorView dk,
                              TensorView dv, const AttentionOptions& options) {
  auto kernels = make_block_kernels(q.device);
  const AttentionShape shape =
      checked_shape(q, k, {{"q", &q}, {"out", &out}, {"dout", &dout}, {"dq", &dq}},
                    {{"k", &k}, {"v", &v}, {"dk", &dk}, {"dv", &dv}}, lse, options, kernels->device());
  const auto [B, S, H, HK, D] = std::make_tuple(shape.batch, shape.seq, shape.heads, shape.kv_heads, shape.head_dim);
  const Device device = kernels->device();
  const DeviceBuffer dq_buffer(*kernels, fp32_bytes(B, S, H, D)), dk_buffer(*kernels, fp32_bytes(B, S, HK, D)),
      dv_buffer(*kernels, fp32_bytes(B, S, HK, D)), delta_buffer(*kernels, fp32_bytes(B, H, S, 1));
  const TensorView dq_accumulator = TensorView::contiguous(dq_buffer.data(), DType::f32, {B, S, H, D}, device);
  const TensorView dk_accumulator = TensorView::contiguous(dk_buffer.data(), DType::f32, {B, S, HK, D}, device);
  const TensorView dv_accumulator = TensorView::contiguous(dv_buffer.data(), DType::f32, {B, S, HK, D}, device);
  const TensorView delta = TensorView::contiguous(delta_buffer.data(), DType::f32, {B, H, S}, device);
  for (const TensorView& accumulator : {dq_accumulator, dk_accumulator, dv_accumulator}) kernels->fill(accumulator, 0.0f);
  kernels->softmax_delta(out, dout, delta);
  BackwardBlock block;
  block.q = q;
  block.segments = {KvGradSegment{KvSegment{k, v, 0}, dk_accumulator, dv_accumulator}};
  block.dout = dout;
  block.lse = lse;
  block.delta = delta;
  block.mask = AttentionMask::from_options(options);
  block.scale = resolved_scale(shape, options);
  block.dq = dq_accumulator;
  kernels->backward(block);
  kernels->copy(dq_accumulator, dq);
  kernels->copy(dk_accumulator, dk);
  kernels->copy(dv_accumulator, dv);
}

}  // namespace spattn
