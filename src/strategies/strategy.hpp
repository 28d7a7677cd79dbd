#pragma once
// What every strategy implements behind DistributedAttention, and the factory of each. A factory
// validates its arguments and agrees on them with every rank (agree_on_call) before constructing
// the strategy (strategy_base.hpp: what they share); `caller_error` is a problem the caller found
// first and must be part of that agreement.

#include <memory>
#include <string>

#include "spattn/distributed_attention.hpp"

namespace spattn {

class DistributedAttention::Strategy {
 public:
  virtual ~Strategy() = default;
  virtual const SequenceLayout& layout() const = 0;
  /// The device stream of later calls (DistributedAttention::set_stream). Each call binds its
  /// kernels and communicators to it before anything else.
  virtual void set_stream(void* stream) = 0;
  virtual void forward(const TensorView& q, const TensorView& k, const TensorView& v, TensorView out, TensorView lse,
                       Profile* profile) = 0;
  virtual void backward(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& out,
                        const TensorView& lse, const TensorView& dout, TensorView dq, TensorView dk, TensorView dv,
                        Profile* profile) = 0;
};

using Strategy = DistributedAttention::Strategy;

/// ring, zigzag, stripe or Hamiltonian-cycle attention (the n-1 cycles of K*_n) over `communicator`.
std::unique_ptr<Strategy> make_rotation_strategy(Algorithm algorithm, Communicator& communicator,
                                                 const AttentionShape& shape, const AttentionOptions& options,
                                                 const std::string& caller_error);

/// A single-level rotation (ring, zigzag, hamilton) over `communicator` of packed documents that
/// `documents` lays out over its ranks: USP's rotation across its groups, whose documents are
/// padded so that each group's part splits over the group (DocumentLayout::over_groups).
std::unique_ptr<Strategy> make_rotation_strategy_over(Algorithm algorithm, Communicator& communicator,
                                                      const AttentionShape& shape, const AttentionOptions& options,
                                                      const DocumentLayout& documents);

/// ulysses (contiguous layout, heads divisible by ranks).
std::unique_ptr<Strategy> make_ulysses_strategy(Communicator& communicator, const AttentionShape& shape,
                                                const AttentionOptions& options, const std::string& caller_error);

/// The two-level Hamiltonian scheme over `nodes` nodes of ranks / nodes ranks each.
std::unique_ptr<Strategy> make_two_level_hamilton_strategy(Communicator& communicator, int nodes,
                                                           const AttentionShape& shape, const AttentionOptions& options,
                                                           const std::string& caller_error);

/// All-gather attention over the zigzag layout, one group of kv heads at a time.
std::unique_ptr<Strategy> make_allgather_strategy(Communicator& communicator, const AttentionShape& shape,
                                                  const AttentionOptions& options, const std::string& caller_error);

/// USP: Ulysses inside groups of `inner` consecutive ranks (0 chooses the largest degree that
/// divides ranks, heads and kv heads) x a single-level rotation `across` the groups (ring,
/// zigzag or hamilton).
std::unique_ptr<Strategy> make_usp_strategy(Communicator& communicator, int inner, Algorithm across,
                                            const AttentionShape& shape, const AttentionOptions& options,
                                            const std::string& caller_error);

}  // namespace spattn
