// The one-shot ring and zigzag ring calls in the style of ring-flash-attn.

#include "spattn/ring_attention.hpp"

#include "strategies/call_validation.hpp"
#include "strategies/strategy.hpp"

namespace spattn {

namespace {

// A one-shot plan for the global shape implied by this rank's q and k.
std::unique_ptr<Strategy> plan_from_tensors(Communicator& communicator, LayoutKind layout, const TensorView& q,
                                            const TensorView& k, const AttentionOptions& options) {
  const auto [shape, error] = global_shape_of(q, k, communicator.size());
  return make_rotation_strategy(layout == LayoutKind::zigzag ? Algorithm::zigzag : Algorithm::ring, communicator, shape,
                                options, error);
}

}  // namespace

void ring_attention_forward(Communicator& communicator, const TensorView& q, const TensorView& k,
                            const TensorView& v, TensorView out, TensorView lse, const AttentionOptions& options,
                            Profile* profile) {
  plan_from_tensors(communicator, LayoutKind::contiguous, q, k, options)->forward(q, k, v, out, lse, profile);
}

void ring_attention_backward(Communicator& communicator, const TensorView& q, const TensorView& k,
                             const TensorView& v, const TensorView& out, const TensorView& lse,
                             const TensorView& dout, TensorView dq, TensorView dk, TensorView dv,
                             const AttentionOptions& options, Profile* profile) {
  plan_from_tensors(communicator, LayoutKind::contiguous, q, k, options)
      ->backward(q, k, v, out, lse, dout, dq, dk, dv, profile);
}

void zigzag_ring_attention_forward(Communicator& communicator, const TensorView& q, const TensorView& k,
                                   const TensorView& v, TensorView out, TensorView lse,
                                   const AttentionOptions& options, Profile* profile) {
  plan_from_tensors(communicator, LayoutKind::zigzag, q, k, options)->forward(q, k, v, out, lse, profile);
}

void zigzag_ring_attention_backward(Communicator& communicator, const TensorView& q, const TensorView& k,
                                    const TensorView& v, const TensorView& out, const TensorView& lse,
                                    const TensorView& dout, TensorView dq, TensorView dk, TensorView dv,
                                    const AttentionOptions& options, Profile* profile) {
  plan_from_tensors(communicator, LayoutKind::zigzag, q, k, options)
      ->backward(q, k, v, out, lse, dout, dq, dk, dv, profile);
}

}  // namespace spattn
