#include "strategies/strategy_base.hpp"

#include <utility>

namespace spattn {

StrategyBase::StrategyBase(Communicator& every_rank, std::vector<CallField> agreed_signature,
                           SequenceLayout agreed_layout, const AttentionShape& call_shape,
                           const AttentionOptions& call_options)
    : world(every_rank),
      shape(call_shape),
      options(call_options),
      signature(std::move(agreed_signature)),
      sequence_layout(std::move(agreed_layout)),
      kernels(make_block_kernels(every_rank.device(), KernelInputs{call_shape.dtype, call_shape.head_dim},
                                 call_options.kernel, call_options.deterministic)),
      mask(AttentionMask::from_options(call_options)),
      scale(resolved_scale(call_shape, call_options)) {}

void StrategyBase::bind_to_stream(Communicator& transfers) {
  kernels->set_stream(device_stream);
  transfers.set_compute_stream(device_stream);
  if (&world != &transfers) world.set_compute_stream(device_stream);
}

void StrategyBase::begin_forward(Communicator& transfers, const TensorView& q, const TensorView& k,
                                 const TensorView& v, const TensorView& out, const TensorView& lse) {
  bind_to_stream(transfers);
  agree_on_call(world,
                forward_arguments_error(shape, sequence_layout.local_length(), kernels->device(), q, k, v, out, lse),
                signature);
}

void StrategyBase::begin_backward(Communicator& transfers, const TensorView& q, const TensorView& k,
                                  const TensorView& v, const TensorView& out, const TensorView& lse,
                                  const TensorView& dout, const TensorView& dq, const TensorView& dk,
                                  const TensorView& dv) {
  bind_to_stream(transfers);
  agree_on_call(world,
                backward_arguments_error(shape, sequence_layout.local_length(), kernels->device(), q, k, v, out, lse,
                                         dout, dq, dk, dv),
                signature);
}

}  // namespace spattn
