#pragma once
/// \file ulysses_attention.hpp
/// Ulysses attention (DeepSpeed-Ulysses): an all-to-all turns each rank's sequence shard of every
/// head into the whole sequence of H/N heads, each rank attends over the whole sequence for its
/// heads, and a second all-to-all brings the results back to sequence shards. Needs heads
/// divisible by ranks. With GQA a kv head that the query heads of several ranks read is sent to
/// each of them, and its gradients are summed on the rank that holds it.

#include "spattn/attention_options.hpp"
#include "spattn/communicator.hpp"
#include "spattn/profile.hpp"
#include "spattn/tensor.hpp"

namespace spattn {

/// One-shot calls in the style of ring-flash-attn; each builds a plan, so repeated calls should
/// keep a DistributedAttention (Algorithm::ulysses) instead. Tensors are this rank's shard of the
/// contiguous layout (rank r holds tokens [r S/N, (r+1) S/N), see shard_sequence):
///   q, out, dout, dq: (B, S_local, H, D);  k, v, dk, dv: (B, S_local, HK, D);
///   lse: (B, H, S_local) fp32.
/// The global length is S_local x N; H must be divisible by N (Error otherwise, on every rank).
/// \param[in,out] communicator  every rank of the group calls collectively
/// \param[out] out, lse         forward results of this rank's tokens
/// \param[out] dq, dk, dv       gradients of this rank's q, k and v
/// \param[out] profile          optional: compute and communication-wait time, 3 steps
///                              (to head shards, attention, back to sequence shards)
void ulysses_attention_forward(Communicator& communicator, const TensorView& q, const TensorView& k,
                               const TensorView& v, TensorView out, TensorView lse, const AttentionOptions& options = {},
                               Profile* profile = nullptr);
void ulysses_attention_backward(Communicator& communicator, const TensorView& q, const TensorView& k,
                                const TensorView& v, const TensorView& out, const TensorView& lse,
                                const TensorView& dout, TensorView dq, TensorView dk, TensorView dv,
                                const AttentionOptions& options = {}, Profile* profile = nullptr);

}  // namespace spattn
