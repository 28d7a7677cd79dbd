#pragma once
/// \file local_attention.hpp
/// Attention of a whole sequence on one device with spattn's block kernels, no communication:
/// the single-rank baseline of accuracy checks and the "ideal" of benchmarks.

#include "spattn/attention_options.hpp"
#include "spattn/tensor.hpp"

namespace spattn {

/// out, lse = attention(q, k, v) over the whole sequence (with options.document_lengths: the
/// documents packed without padding, each attending only to itself, one block per document).
/// \param[in]  q     (B, S, H, D)
/// \param[in]  k, v  (B, S, HK, D), same dtype as q
/// \param[out] out   (B, S, H, D), q's dtype
/// \param[out] lse   (B, H, S) fp32
void local_attention_forward(const TensorView& q, const TensorView& k, const TensorView& v, TensorView out,
                             TensorView lse, const AttentionOptions& options = {});

/// dq, dk, dv of local_attention_forward, from its out and lse and the incoming gradient dout
/// (B, S, H, D). Gradients take q's dtype; accumulation is fp32.
void local_attention_backward(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& out,
                              const TensorView& lse, const TensorView& dout, TensorView dq, TensorView dk,
                              TensorView dv, const AttentionOptions& options = {});

}  // namespace spattn
