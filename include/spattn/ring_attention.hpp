#pragma once
/// \file ring_attention.hpp
/// Ring attention and zigzag ring attention: each rank keeps its queries and passes its keys and
/// values around the ring, one hop per step, overlapping the next hop with this step's blocks.
/// The zigzag layout (rank r holds chunks r and 2N-1-r of 2N) gives every rank equal work under
/// a causal mask: every step computes only unmasked blocks.

#include <memory>

#include "spattn/attention_options.hpp"
#include "spattn/attention_shape.hpp"
#include "spattn/communicator.hpp"
#include "spattn/profile.hpp"
#include "spattn/sequence_layout.hpp"
#include "spattn/tensor.hpp"

namespace spattn {

/// A plan for repeated calls of one shape: validates once, agrees across ranks, and owns its
/// workspace (double-buffered keys/values, fp32 accumulators), allocated at the first call and
/// reused by every later one.
///
/// Tensors are this rank's shard in the plan's layout (see shard_sequence), with S_local = S / N:
///   q, out, dout, dq: (B, S_local, H, D) in shape.dtype
///   k, v, dk, dv:     (B, S_local, HK, D) in shape.dtype
///   lse:              (B, H, S_local) fp32
class RingAttention {
 public:
  /// layout: contiguous for ring attention, zigzag for zigzag ring attention.
  /// Collective: every rank of `communicator` constructs the plan with the same arguments.
  RingAttention(Communicator& communicator, LayoutKind layout, const AttentionShape& shape,
                const AttentionOptions& options);
  ~RingAttention();
  RingAttention(const RingAttention&) = delete;
  RingAttention& operator=(const RingAttention&) = delete;

  const SequenceLayout& layout() const;

  /// out, lse = attention(q, k, v) for this rank's queries over the whole sequence.
  void forward(const TensorView& q, const TensorView& k, const TensorView& v, TensorView out, TensorView lse,
               Profile* profile = nullptr);

  /// dq, dk, dv from the forward's out and lse and the incoming gradient dout. dk and dv are the
  /// full gradients of this rank's own keys and values (contributions from every rank included).
  void backward(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& out,
                const TensorView& lse, const TensorView& dout, TensorView dq, TensorView dk, TensorView dv,
                Profile* profile = nullptr);

 private:
  friend struct RingAttentionCalls;  // the one-shot calls below run a plan of their own
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// One-shot calls (they build a plan, so repeated calls should keep a RingAttention instead).
/// The global sequence length is S_local x N, read from q.
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
