#pragma once
// What the ranks check after a run in which one rank stalled at its first transfer (SPATTN_FAULT)
// and the others gave up after the timeout: the same on the CPU and on GPUs.

#include <string>

#include "distributed_checks.hpp"
#include "spattn/communicator.hpp"
#include "strategy_runner.hpp"

namespace spattn {

/// How a stall test is timed.
struct StallTimes {
  /// The timeout the communicators of the test are made with.
  double timeout_seconds;
  /// What a rank may take beyond the timeout to know of the stall: the work of the call before
  /// the transfer that waits (plans, splits, the steps before it); under the timeout itself, so
  /// that waiting out a second timeout (one per transfer, say) fails.
  double slack_seconds;
  /// What a call may take after its communicator knows: ending the device work that waits on the
  /// lost peer (ncclCommAbort). Host communicators throw at once.
  double ending_device_work_seconds;
  /// How long the stalled rank stalls: longer than all the above, so that a call which returns
  /// only because the stalled rank came back fails the checks.
  double stall_seconds;
};

/// On the host (MPI): ranks that share two cores, up to 8 of them.
constexpr StallTimes kHostStallTimes{1.0, 0.9, 0.0, 3.0};
/// On GPUs: NCCL connects a transfer's channels as it first enqueues it (0.4 s on 2 H200s), usp
/// splits its communicator twice, and ending the GPU work that waits takes 0.5 s.
constexpr StallTimes kGpuStallTimes{2.0, 1.5, 2.0, 6.0};

/// SPATTN_FAULT's value that stalls world rank `stalled` at its first transfer for
/// `times.stall_seconds`.
std::string stall_at_first_transfer(int stalled, const StallTimes& times);

/// Collective over the world. Runs `algorithm` on `problem` over `communicator` (made with the
/// fault and the timeout of `times`) and checks: the stalled rank's call fails saying it stalled;
/// on every other rank the communicator knows of the failure within the timeout and the slack,
/// the call returns soon after (at once on the host; on GPUs once the work that waited on the
/// stalled rank has ended) saying what it waited for and at which step, and the communicator then
/// fails at once. Rank 0 prints the slowest times after `what` ("ring at 3 ranks").
void expect_stall_reported(Communicator& communicator, Algorithm algorithm, const AlgorithmSetup& setup,
                           const AttentionProblem& problem, int stalled, const StallTimes& times,
                           const std::string& what);

}  // namespace spattn
