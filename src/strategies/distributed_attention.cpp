#include "spattn/distributed_attention.hpp"

#include "schedule/strategy_rules.hpp"
#include "spattn/device_memory.hpp"
#include "spattn/error.hpp"
#include "strategies/strategy.hpp"

namespace spattn {

namespace {

std::unique_ptr<Strategy> make_strategy(Communicator& communicator, Algorithm algorithm, const AttentionShape& shape,
                                        const AttentionOptions& options, const StrategyOptions& strategy_options) {
  switch (algorithm) {
    case Algorithm::ring:
    case Algorithm::zigzag:
    case Algorithm::stripe:
    case Algorithm::hamilton: return make_rotation_strategy(algorithm, communicator, shape, options, "");
    case Algorithm::ulysses: return make_ulysses_strategy(communicator, shape, options, "");
    case Algorithm::allgather: return make_allgather_strategy(communicator, shape, options, "");
    case Algorithm::hamilton2:
      return make_two_level_hamilton_strategy(communicator, strategy_options.nodes, shape, options, "");
    case Algorithm::usp:
      return make_usp_strategy(communicator, strategy_options.inner, strategy_options.across, shape, options, "");
  }
  // Only a value cast from outside the enumeration gets here, the same on every rank.
  SPATTN_FAIL("unknown algorithm value " << static_cast<int>(algorithm));
}

}  // namespace

DocumentLayout plan_document_layout(Algorithm algorithm, int ranks, const AttentionOptions& options,
                                    const StrategyOptions& strategy_options) {
  return strategy_document_layout(algorithm, ranks, strategy_options, options);
}

DistributedAttention::DistributedAttention(Communicator& communicator, Algorithm algorithm, const AttentionShape& shape,
                                           const AttentionOptions& options, const StrategyOptions& strategy_options)
    : communicator_(communicator), algorithm_(algorithm), strategy_(make_strategy(communicator, algorithm, shape, options, strategy_options)) {}

DistributedAttention::~DistributedAttention() = default;

const SequenceLayout& DistributedAttention::layout() const { return strategy_->layout(); }

void DistributedAttention::set_stream(void* stream) { strategy_->set_stream(stream); }

void DistributedAttention::forward(const TensorView& q, const TensorView& k, const TensorView& v, TensorView out,
                                   TensorView lse, Profile* profile) {
  strategy_->forward(q, k, v, out, lse, profile);
}

void DistributedAttention::backward(const TensorView& q, const TensorView& k, const TensorView& v,
                                    const TensorView& out, const TensorView& lse, const TensorView& dout, TensorView dq,
                                    TensorView dk, TensorView dv, Profile* profile) {
  strategy_->backward(q, k, v, out, lse, dout, dq, dk, dv, profile);
}

void DistributedAttention::synchronize() {
  synchronize_device(communicator_.device());
  communicator_.check_transfers_completed();
}

}  // namespace spattn
