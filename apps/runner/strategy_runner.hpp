#pragma once
// Runs a distributed attention strategy on a full-sequence problem the way a user would: shard
// the inputs for the strategy's layout, call the strategy (timed), gather and unshard the
// outputs. Shared by the `spattn` program and the distributed tests.

#include <cstdint>
#include <string>
#include <vector>

#include "host_tensor.hpp"
#include "spattn/attention_options.hpp"
#include "spattn/attention_shape.hpp"
#include "spattn/communicator.hpp"
#include "spattn/distributed_attention.hpp"
#include "spattn/profile.hpp"
#include "spattn/sequence_layout.hpp"

namespace spattn {

/// A full-sequence problem, identical on every rank.
struct AttentionProblem {
  AttentionShape shape;
  AttentionOptions options;
  HostTensor q;     // (B, S, H, D)
  HostTensor k;     // (B, S, HK, D)
  HostTensor v;     // (B, S, HK, D)
  HostTensor dout;  // (B, S, H, D); empty for forward only
};

/// Fresh standard-normal inputs in shape.dtype from `seed` (each tensor its own stream).
AttentionProblem random_problem(const AttentionShape& shape, const AttentionOptions& options, uint64_t seed,
                                bool backward);

/// Full-sequence outputs: out (B, S, H, D) dtype, lse (B, H, S) fp32, and with backward
/// dq (B, S, H, D), dk and dv (B, S, HK, D).
struct AttentionOutputs {
  HostTensor out;
  HostTensor lse;
  HostTensor dq;
  HostTensor dk;
  HostTensor dv;
};

/// What a plan held on its device beyond the caller's tensors (see memory_statistics.hpp).
struct PlanMemory {
  int64_t peak_bytes = 0;                   // the most held at once, from the plan's making to its last call
  int64_t allocations_after_first_call = 0; // by the later calls: 0 when no step loop allocates
  int64_t bytes_left_after_plan = 0;        // still held once the plan is gone: 0 when nothing leaks
};

struct StrategyRun {
  AttentionOutputs outputs;
  Profile forward;   // this rank's mean over the timed iterations
  Profile backward;  // likewise; zero without backward
  PlanMemory memory;
};

/// The whole problem on this process alone with the block kernels of `device` called once, no
/// strategy and no communication: the same-dtype single-rank baseline of the accuracy criterion.
AttentionOutputs run_single_device(const AttentionProblem& problem, const Device& device = Device::cpu());

/// `strategy_options` with usp's Ulysses degree resolved for `shape` at `ranks` (inner 0: the
/// degree the plan chooses), which plan_document_layout needs for usp; other strategies unchanged.
StrategyOptions resolved_strategy_options(Algorithm algorithm, int ranks, const AttentionShape& shape,
                                          StrategyOptions strategy_options);

/// Runs `algorithm` over `communicator` on `problem`, with this rank's shards in the memory of
/// the communicator's device: `warmup` untimed and `iterations` timed calls (forward, then
/// backward when the problem has dout). Outputs are poisoned with NaN before the first call.
/// On a GPU the profiles' totals are of unprofiled calls and their compute / communication split
/// comes from one more, profiled, call. Collective.
StrategyRun run_strategy(Communicator& communicator, Algorithm algorithm, const AttentionProblem& problem,
                         int warmup, int iterations, bool per_step_profile,
                         const StrategyOptions& strategy_options = {});

}  // namespace spattn
