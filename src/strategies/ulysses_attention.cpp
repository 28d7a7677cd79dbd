// The one-shot Ulysses calls in the style of ring-flash-attn (spattn/ulysses_attention.hpp).

#include "spattn/ulysses_attention.hpp"

#include <memory>

#include "strategies/call_validation.hpp"
#include "strategies/strategy.hpp"

namespace spattn {

namespace {

// A one-shot plan for the global shape implied by this rank's q and k, and why that shape cannot
// be read when they are not (B, S_local, H, D) tensors (agreed with the other ranks like any
// other invalid argument).
std::unique_ptr<Strategy> plan_from_tensors(Communicator& communicator, const TensorView& q, const TensorView& k,
                                            const AttentionOptions& options) {
  const auto [shape, error] = global_shape_of(q, k, communicator.size());
  return make_ulysses_strategy(communicator, shape, options, error);
}

}  // namespace

void ulysses_attention_forward(Communicator& communicator, const TensorView& q, const TensorView& k,
                               const TensorView& v, TensorView out, TensorView lse, const AttentionOptions& options,
                               Profile* profile) {
  plan_from_tensors(communicator, q, k, options)->forward(q, k, v, out, lse, profile);
}

void ulysses_attention_backward(Communicator& communicator, const TensorView& q, const TensorView& k,
                                const TensorView& v, const TensorView& out, const TensorView& lse,
                                const TensorView& dout, TensorView dq, TensorView dk, TensorView dv,
                                const AttentionOptions& options, Profile* profile) {
  plan_from_tensors(communicator, q, k, options)->backward(q, k, v, out, lse, dout, dq, dk, dv, profile);
}

}  // namespace spattn
