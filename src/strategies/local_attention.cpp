#include "spattn/local_attention.hpp"

#include <vector>

#include "kernels/block_kernels.hpp"
#include "spattn/error.hpp"
#include "strategies/call_validation.hpp"
#include "strategies/device_buffer.hpp"

namespace spattn {

namespace {

// The shape implied by q and k, after `arguments_error` (a check of every argument against it)
// passes.
template <typename ArgumentsError>
AttentionShape checked_shape(const TensorView& q, const TensorView& k, const AttentionOptions& options,
                             ArgumentsError&& arguments_error) {
  auto [shape, error] = global_shape_of(q, k, 1);
  if (error.empty())
    error = first_error({shape_and_options_error(shape, options, q.device),
                         packed_documents_error(options.document_lengths, shape.seq), arguments_error(shape)});
  SPATTN_CHECK(error.empty(), error);
  return shape;
}

// What the kernels are made for: q's dtype and head dim (checked with the other arguments after).
KernelInputs kernel_inputs(const TensorView& q) { return {q.dtype, q.ndim == 4 ? q.size(3) : 0}; }

// Where each document starts and how long it is: one block each (the whole sequence without
// documents), whose global positions make the mask mean the same as in a plan.
struct DocumentRange {
  int64_t begin, length;
};
std::vector<DocumentRange> document_ranges(const AttentionOptions& options, int64_t seq) {
  if (options.document_lengths.empty()) return {{0, seq}};
  std::vector<DocumentRange> ranges;
  int64_t begin = 0;
  for (int64_t length : options.document_lengths) {
    ranges.push_back({begin, length});
    begin += length;
  }
  return ranges;
}

std::size_t fp32_bytes(int64_t batch, int64_t seq, int64_t heads, int64_t head_dim) {
  return static_cast<std::size_t>(batch * seq * heads * head_dim) * sizeof(float);
}

}  // namespace

void local_attention_forward(const TensorView& q, const TensorView& k, const TensorView& v, TensorView out,
                             TensorView lse, const AttentionOptions& options) {
  auto kernels = make_block_kernels(q.device, kernel_inputs(q), options.kernel, options.deterministic);
  const AttentionShape shape = checked_shape(q, k, options, [&](const AttentionShape& implied) {
    return forward_arguments_error(implied, implied.seq, kernels->device(), q, k, v, out, lse);
  });
  const DeviceBuffer out_buffer(*kernels, fp32_bytes(shape.batch, shape.seq, shape.heads, shape.head_dim));
  const TensorView running_out = TensorView::contiguous(
      out_buffer.data(), DType::f32, {shape.batch, shape.seq, shape.heads, shape.head_dim}, kernels->device());
  ForwardBlock block;
  block.mask = AttentionMask::from_options(options);
  block.scale = resolved_scale(shape, options);
  for (const DocumentRange& document : document_ranges(options, shape.seq)) {
    block.q = q.slice(1, document.begin, document.length);
    block.q_position = document.begin;
    block.segments = {KvSegment{k.slice(1, document.begin, document.length),
                                v.slice(1, document.begin, document.length), document.begin}};
    block.out = running_out.slice(1, document.begin, document.length);
    block.lse = lse.slice(2, document.begin, document.length);
    block.final_out = out.slice(1, document.begin, document.length);
    kernels->forward(block);
  }
}

void local_attention_backward(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& out,
                              const TensorView& lse, const TensorView& dout, TensorView dq, TensorView dk,
                              TensorView dv, const AttentionOptions& options) {
  auto kernels = make_block_kernels(q.device, kernel_inputs(q), options.kernel, options.deterministic);
  const AttentionShape shape = checked_shape(q, k, options, [&](const AttentionShape& implied) {
    return backward_arguments_error(implied, implied.seq, kernels->device(), q, k, v, out, lse, dout, dq, dk, dv);
  });
  const auto [B, S, H, HK, D] = std::make_tuple(shape.batch, shape.seq, shape.heads, shape.kv_heads, shape.head_dim);
  const Device device = kernels->device();
  const DeviceBuffer dq_buffer(*kernels, fp32_bytes(B, S, H, D)), dk_buffer(*kernels, fp32_bytes(B, S, HK, D)),
      dv_buffer(*kernels, fp32_bytes(B, S, HK, D)), delta_buffer(*kernels, fp32_bytes(B, H, S, 1));
  const TensorView dq_accumulator = TensorView::contiguous(dq_buffer.data(), DType::f32, {B, S, H, D}, device);
  const TensorView dk_accumulator = TensorView::contiguous(dk_buffer.data(), DType::f32, {B, S, HK, D}, device);
  const TensorView dv_accumulator = TensorView::contiguous(dv_buffer.data(), DType::f32, {B, S, HK, D}, device);
  const TensorView delta = TensorView::contiguous(delta_buffer.data(), DType::f32, {B, H, S}, device);
  for (const TensorView& accumulator : {dq_accumulator, dk_accumulator, dv_accumulator}) kernels->fill(accumulator, 0.0f);
  kernels->prepare_backward_delta(out, dout, delta);
  BackwardBlock block;
  block.mask = AttentionMask::from_options(options);
  block.scale = resolved_scale(shape, options);
  for (const DocumentRange& document : document_ranges(options, S)) {
    const auto part = [&](const TensorView& tensor, int seq_dim = 1) {
      return tensor.slice(seq_dim, document.begin, document.length);
    };
    block.q = part(q);
    block.q_position = document.begin;
    block.segments = {KvGradSegment{KvSegment{part(k), part(v), document.begin}, part(dk_accumulator),
                                    part(dv_accumulator)}};
    block.dout = part(dout);
    block.out = part(out);
    block.lse = part(lse, 2);
    block.delta = part(delta, 2);
    block.dq = part(dq_accumulator);
    kernels->backward(block);
  }
  kernels->copy(dq_accumulator, dq);
  kernels->copy(dk_accumulator, dk);
  kernels->copy(dv_accumulator, dv);
}

}  // namespace spattn
