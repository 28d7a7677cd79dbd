#pragma once
// What the ranks check after a run in which one rank stalled at its first transfer (SPATTN_FAULT)
// and the others gave up after the timeout: the same on the CPU and on GPUs.

#include <string>

#include "distributed_checks.hpp"
#include "spattn/communicator.hpp"
#include "strategy_runner.hpp"

namespace spattn {

/// The timeout the communicators of these tests are made with.
constexpr double kStallTestTimeoutSeconds = 1.0;

/// SPATTN_FAULT's value that stalls world rank `stalled` at its first transfer for 3 s: longer
/// than the timeout, so that every other rank gives up before the stalled rank returns.
std::string stall_at_first_transfer(int stalled);

/// Collective over the world. Runs `algorithm` on `problem` over `communicator` (made with the
/// fault and the timeout above) and checks: the stalled rank's call fails saying it stalled; every
/// other rank's fails within the timeout (plus the time to get there, under a second timeout),
/// saying what it waited for and at which step, and the communicator then fails at once. Rank 0
/// prints the slowest report after `what` ("ring at 3 ranks").
void expect_stall_reported(Communicator& communicator, Algorithm algorithm, const AlgorithmSetup& setup,
                           const AttentionProblem& problem, int stalled, const std::string& what);

}  // namespace spattn
