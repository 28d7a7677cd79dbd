#pragma once
// What every strategy holds and does alike. Its factory validates the plan's arguments and agrees
// on them with every rank (agree_on_call) before constructing one, so a strategy starts from the
// agreed layout and call signature; each later call begins with begin_forward or begin_backward,
// which bind the call to the plan's stream and agree on its tensors, before anything else.

#include <memory>
#include <vector>

#include "kernels/block_kernels.hpp"
#include "spattn/communicator.hpp"
#include "spattn/sequence_layout.hpp"
#include "strategies/call_validation.hpp"
#include "strategies/strategy.hpp"

namespace spattn {

class StrategyBase : public Strategy {
 public:
  const SequenceLayout& layout() const final { return sequence_layout; }
  void set_stream(void* stream) override { device_stream = stream; }

 protected:
  /// `every_rank`: the ranks of the call, which agreed on `agreed_signature` and `agreed_layout`.
  StrategyBase(Communicator& every_rank, std::vector<CallField> agreed_signature, SequenceLayout agreed_layout,
               const AttentionShape& call_shape, const AttentionOptions& call_options);

  /// Binds the kernels, `transfers` and the call's ranks to the plan's stream (they may have
  /// served other plans on other streams in between), then agrees with every rank on the call's
  /// tensors: a rank whose arguments are wrong makes every rank throw, before any transfer.
  void begin_forward(Communicator& transfers, const TensorView& q, const TensorView& k, const TensorView& v,
                     const TensorView& out, const TensorView& lse);
  void begin_backward(Communicator& transfers, const TensorView& q, const TensorView& k, const TensorView& v,
                      const TensorView& out, const TensorView& lse, const TensorView& dout, const TensorView& dq,
                      const TensorView& dk, const TensorView& dv);

  Communicator& world;  // every rank of the call: agreements span them
  const AttentionShape shape;
  const AttentionOptions options;
  const std::vector<CallField> signature;
  const SequenceLayout sequence_layout;
  std::unique_ptr<BlockKernels> kernels;
  void* device_stream = nullptr;  // see set_stream
  const AttentionMask mask;
  const float scale;

 private:
  void bind_to_stream(Communicator& transfers);
};

}  // namespace spattn
