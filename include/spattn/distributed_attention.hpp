#pragma once
/// \file distributed_attention.hpp
/// Every strategy behind one plan: pick an Algorithm, give the global shape and options, and call
/// forward/backward with this rank's shard (see layout() and shard_sequence).

#include <memory>
#include <string>
#include <vector>

#include "spattn/algorithm.hpp"
#include "spattn/attention_options.hpp"
#include "spattn/attention_shape.hpp"
#include "spattn/communicator.hpp"
#include "spattn/document_layout.hpp"
#include "spattn/profile.hpp"
#include "spattn/sequence_layout.hpp"
#include "spattn/tensor.hpp"

namespace spattn {

/// The packed documents of options.document_lengths as a plan of `algorithm` over `ranks` ranks
/// holds them: each document split over the ranks in the strategy's layout (zigzag per document
/// where the strategy balances causal work that way), padded where its length does not split.
/// Its sequence_layout().global_length() is the shape's seq of such a plan, and
/// shard_documents / unshard_documents move the caller's packed tensors to and from the shards.
/// usp's layout needs strategy_options.inner given (0 chooses the degree from the head counts,
/// which this function is not given). Throws Error for bad lengths, for a strategy that takes no
/// documents (stripe) or for usp without its degree.
DocumentLayout plan_document_layout(Algorithm algorithm, int ranks, const AttentionOptions& options,
                                    const StrategyOptions& strategy_options = {});

/// A plan for repeated calls of one shape with one strategy: validates once, agrees across
/// ranks, and owns its workspace (allocated at the first call, reused by later ones).
/// Collective: every rank constructs it with the same arguments.
///
/// Tensors are this rank's shard in layout(), S_local = S / N (with packed documents, S is their
/// padded length: see plan_document_layout):
///   q, out, dout, dq: (B, S_local, H, D) in shape.dtype;  k, v, dk, dv: (B, S_local, HK, D);
///   lse: (B, H, S_local) fp32.
class DistributedAttention {
 public:
  DistributedAttention(Communicator& communicator, Algorithm algorithm, const AttentionShape& shape,
                       const AttentionOptions& options, const StrategyOptions& strategy_options = {});
  ~DistributedAttention();
  DistributedAttention(const DistributedAttention&) = delete;
  DistributedAttention& operator=(const DistributedAttention&) = delete;

  Algorithm algorithm() const { return algorithm_; }
  /// Which global tokens each rank holds.
  const SequenceLayout& layout() const;

  /// The device stream that later calls run on (a cudaStream_t on CUDA, e.g. PyTorch's current
  /// stream; default nullptr, the legacy default stream). Their compute is enqueued on it and
  /// their transfers on the communicator's own stream, ordered with events; a call returns
  /// without waiting for the device, and work the caller enqueues on the stream afterwards sees
  /// its results. Ignored on the CPU, where calls are synchronous.
  void set_stream(void* stream);

  void forward(const TensorView& q, const TensorView& k, const TensorView& v, TensorView out, TensorView lse,
               Profile* profile = nullptr);
  void backward(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& out,
                const TensorView& lse, const TensorView& dout, TensorView dq, TensorView dk, TensorView dv,
                Profile* profile = nullptr);

  /// Blocks until the device has run all work queued on it (the calls so far among it), then
  /// throws Error if a transfer of these calls failed or timed out: a peer died or stalled (see
  /// Communicator::check_transfers_completed). On CUDA a call returns before its work is done, so
  /// without this such a failure surfaces at the next call; on the CPU a call fails by itself.
  void synchronize();

  class Strategy;  ///< what each algorithm implements (src/strategies/strategy.hpp)

 private:
  Communicator& communicator_;
  Algorithm algorithm_;
  std::unique_ptr<Strategy> strategy_;
};

}  // namespace spattn
