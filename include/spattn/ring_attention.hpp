#pragma once
/// \file ring_attention.hpp
/// Ring attention and zigzag ring attention: each rank keeps its queries and passes its keys and
/// values around the ring, one hop per step, overlapping the next hop with this step's blocks.
/// The zigzag layout (rank r holds chunks r and 2N-1-r of 2N) gives every rank equal work under
/// a causal mask: every step computes only unmasked blocks.

#include "spattn/attention_options.hpp"
#include "spattn/attention_shape.hpp"
#include "spattn/communicator.hpp"
#include "spattn/profile.hpp"
#include "spattn/sequence_layout.hpp"
#include "spattn/tensor.hpp"

namespace spattn {

/// One-shot calls in the style of ring-flash-attn; each builds a plan, so repeated calls should
/// keep a DistributedAttention (Algorithm::ring or Algorithm::zigzag) instead. Tensors are this
/// rank's shard (see shard_sequence): q, out, dout, dq (B, S_local, H, D); k, v, dk, dv
/// (B, S_local, HK, D); lse (B, H, S_local) fp32. The global length is S_local x N.
void ring_attention_forward(Communicator& communicator, const TensorView& q, const TensorView& k,
                            const TensorView& v, TensorView out, TensorView lse,
                            const AttentionOptions& options = {}, Profile* profile = nullptr);
void ring_attention_backward(Communicator& communicator, const TensorView& q, const TensorView& k,
                             const TensorView& v, const TensorView& out, const TensorView& lse,
                             const TensorView& dout, TensorView dq, TensorView dk, TensorView dv,
                             const AttentionOptions& options = {}, Profile* profile = nullptr);
void zigzag_ring_attention_forward(Communicator& communicator, const TensorView& q, const TensorView& k,
                                   const TensorView& v, TensorView out, TensorView lse,
                                   const AttentionOptions& options = {}, Profile* profile = nullptr);
void zigzag_ring_attention_backward(Communicator& communicator, const TensorView& q, const TensorView& k,
                                    const TensorView& v, const TensorView& out, const TensorView& lse,
                                    const TensorView& dout, TensorView dq, TensorView dk, TensorView dv,
                                    const AttentionOptions& options = {}, Profile* profile = nullptr);

}  // namespace spattn
