// A rank that stops answering (SPATTN_FAULT stalls it at its first transfer) makes every other
// rank's call fail within the timeout (SPATTN_TIMEOUT), with an Error that says it timed out, what
// it waited for and at which step, for every strategy; the stalled rank's own call then fails too.
// The ranks meet again on the world communicator, so the tests after these run as usual.

#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "distributed_world.hpp"
#include "scoped_environment.hpp"
#include "spattn/mpi_communicator.hpp"
#include "stall_checks.hpp"

namespace spattn {
namespace {

class StalledRank : public ::testing::TestWithParam<Algorithm> {};

TEST_P(StalledRank, EveryOtherRankReportsItWithinTheTimeout) {
  const Algorithm algorithm = GetParam();
  const int ranks = world().size();
  if (ranks < 2) GTEST_SKIP() << "a stalled peer needs at least 2 ranks";
  const AlgorithmSetup setup = algorithm_setup(algorithm, ranks);
  if (!setup.not_applicable.empty()) GTEST_SKIP() << setup.not_applicable;
  const int stalled = ranks - 1;
  std::unique_ptr<MpiCommunicator> communicator;
  {
    // Read when a communicator is made; this one (and what splits from it) carries the fault.
    const ScopedEnvironment timeout("SPATTN_TIMEOUT", std::to_string(kHostStallTimes.timeout_seconds));
    const ScopedEnvironment fault("SPATTN_FAULT", stall_at_first_transfer(stalled, kHostStallTimes));
    communicator = std::make_unique<MpiCommunicator>();
  }
  EXPECT_DOUBLE_EQ(communicator->timeout_seconds(), kHostStallTimes.timeout_seconds);
  const AttentionShape shape{1, 2 * setup.length_unit, 2 * ranks, ranks, 8, DType::f32};
  const AttentionProblem problem = random_problem(shape, AttentionOptions{}, 91, /*backward=*/false);
  expect_stall_reported(*communicator, algorithm, setup, problem, stalled, kHostStallTimes,
                        algorithm_name(algorithm) + " at " + std::to_string(ranks) + " ranks");
}

INSTANTIATE_TEST_SUITE_P(AllStrategies, StalledRank, ::testing::ValuesIn(all_algorithms()),
                         [](const ::testing::TestParamInfo<Algorithm>& info) { return algorithm_name(info.param); });

}  // namespace
}  // namespace spattn
