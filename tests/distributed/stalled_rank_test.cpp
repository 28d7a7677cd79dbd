// A rank that stops answering (SPATTN_FAULT stalls it at its first transfer) makes every other
// rank's call fail within the timeout (SPATTN_TIMEOUT), with an Error that says it timed out, what
// it waited for and at which step, for every strategy over MPI, and over oneCCL (where built) for a
// strategy of each kind of transfer: point-to-point (zigzag), all-to-all (ulysses), all-gather and
// reduce-scatter (allgather). The stalled rank's own call then fails too. The ranks meet again on
// the world communicator, so the tests after these run as usual.

#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "distributed_world.hpp"
#include "scoped_environment.hpp"
#include "spattn/mpi_communicator.hpp"
#include "stall_checks.hpp"
#ifdef SPATTN_WITH_ONECCL
#include "spattn/oneccl_communicator.hpp"
#endif

namespace spattn {
namespace {

/// The host communicator a test stalls a rank of, made while SPATTN_TIMEOUT and SPATTN_FAULT are set
/// (each communicator reads them when made; this one, and what splits from it, carries the fault).
enum class HostTransport { mpi, oneccl };

std::unique_ptr<Communicator> make_communicator(HostTransport transport) {
  // Each took SPATTN_TIMEOUT when it was made.
  const auto with_the_timeout = [](auto communicator) -> std::unique_ptr<Communicator> {
    EXPECT_DOUBLE_EQ(communicator->timeout_seconds(), kHostStallTimes.timeout_seconds);
    return communicator;
  };
#ifdef SPATTN_WITH_ONECCL
  if (transport == HostTransport::oneccl) return with_the_timeout(std::make_unique<OnecclCommunicator>(world()));
#endif
  (void)transport;
  return with_the_timeout(std::make_unique<MpiCommunicator>());
}

void expect_stall_reported_over(HostTransport transport, Algorithm algorithm) {
  const int ranks = world().size();
  if (ranks < 2) GTEST_SKIP() << "a stalled peer needs at least 2 ranks";
  const AlgorithmSetup setup = algorithm_setup(algorithm, ranks);
  if (!setup.not_applicable.empty()) GTEST_SKIP() << setup.not_applicable;
  const int stalled = ranks - 1;
  std::unique_ptr<Communicator> communicator;
  {
    const ScopedEnvironment timeout("SPATTN_TIMEOUT", std::to_string(kHostStallTimes.timeout_seconds));
    const ScopedEnvironment fault("SPATTN_FAULT", stall_at_first_transfer(stalled, kHostStallTimes));
    communicator = make_communicator(transport);
  }
  const AttentionShape shape{1, 2 * setup.length_unit, 2 * ranks, ranks, 8, DType::f32};
  const AttentionProblem problem = random_problem(shape, AttentionOptions{}, 91, /*backward=*/false);
  expect_stall_reported(*communicator, algorithm, setup, problem, stalled, kHostStallTimes,
                        algorithm_name(algorithm) + " at " + std::to_string(ranks) + " ranks");
}

const auto kAlgorithmName = [](const ::testing::TestParamInfo<Algorithm>& info) { return algorithm_name(info.param); };

class StalledRank : public ::testing::TestWithParam<Algorithm> {};

TEST_P(StalledRank, EveryOtherRankReportsItWithinTheTimeout) {
  expect_stall_reported_over(HostTransport::mpi, GetParam());
}

INSTANTIATE_TEST_SUITE_P(AllStrategies, StalledRank, ::testing::ValuesIn(all_algorithms()), kAlgorithmName);

#ifdef SPATTN_WITH_ONECCL
class StalledRankOverOneccl : public ::testing::TestWithParam<Algorithm> {};

TEST_P(StalledRankOverOneccl, EveryOtherRankReportsItWithinTheTimeout) {
  expect_stall_reported_over(HostTransport::oneccl, GetParam());
}

INSTANTIATE_TEST_SUITE_P(EachKindOfTransfer, StalledRankOverOneccl,
                         ::testing::Values(Algorithm::zigzag, Algorithm::ulysses, Algorithm::allgather),
                         kAlgorithmName);
#endif

}  // namespace
}  // namespace spattn
