// A rank that stops answering (SPATTN_FAULT stalls it at its first transfer) makes every other
// rank's call fail within the timeout (SPATTN_TIMEOUT), with an Error that says it timed out, what
// it waited for and at which step, for every strategy; the stalled rank's own call then fails too.
// The ranks meet again on the world communicator, so the tests after these run as usual.

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "distributed_checks.hpp"
#include "distributed_world.hpp"
#include "spattn/mpi_communicator.hpp"
#include "strategy_runner.hpp"

namespace spattn {
namespace {

constexpr double kTimeoutSeconds = 1.0;
// Longer than the timeout, so that every other rank gives up before the stalled rank returns.
constexpr double kStallSeconds = 3.0;
// What a rank may take beyond the timeout to report: the steps before the one it waits at, on
// ranks that share two cores (up to 8 of them); under 2x the timeout, so that waiting out a
// second timeout (one per transfer, say) fails.
constexpr double kReportSlackSeconds = 0.9;

// Sets an environment variable for the lifetime of this object (on this rank).
class ScopedEnvironment {
 public:
  ScopedEnvironment(const char* name, const std::string& value) : name_(name) { setenv(name, value.c_str(), 1); }
  ~ScopedEnvironment() { unsetenv(name_); }
  ScopedEnvironment(const ScopedEnvironment&) = delete;
  ScopedEnvironment& operator=(const ScopedEnvironment&) = delete;

 private:
  const char* name_;
};

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
    const ScopedEnvironment timeout("SPATTN_TIMEOUT", std::to_string(kTimeoutSeconds));
    const ScopedEnvironment fault("SPATTN_FAULT", "stall:" + std::to_string(stalled) + ":0:" +
                                                      std::to_string(kStallSeconds));
    communicator = std::make_unique<MpiCommunicator>();
  }
  EXPECT_DOUBLE_EQ(communicator->timeout_seconds(), kTimeoutSeconds);
  const AttentionShape shape{1, 2 * setup.length_unit, 2 * ranks, ranks, 8, DType::f32};
  const AttentionProblem problem = random_problem(shape, AttentionOptions{}, 91, /*backward=*/false);

  const auto start = std::chrono::steady_clock::now();
  const std::string error = error_of([&] { run_strategy(*communicator, algorithm, problem, 0, 1, false, setup.options); });
  const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

  if (world().rank() == stalled) {
    EXPECT_NE(error.find("stalled for"), std::string::npos) << error;
  } else {
    EXPECT_NE(error.find("timed out after 1 s waiting for"), std::string::npos) << error;
    EXPECT_NE(error.find("(at step "), std::string::npos) << error;
    EXPECT_GE(elapsed, kTimeoutSeconds) << error;
    EXPECT_LE(elapsed, kTimeoutSeconds + kReportSlackSeconds) << error;
    // Given up on: later calls fail at once instead of waiting again.
    EXPECT_NE(error_of([&] { communicator->barrier(); }).find("cannot be used again"), std::string::npos);
  }
  // The slowest report, for the log (the figures in the notes come from these lines).
  std::vector<double> reported(static_cast<std::size_t>(ranks));
  world().host_all_gather(&elapsed, reported.data(), sizeof elapsed);  // the stalled rank comes back
  reported.erase(reported.begin() + stalled);
  if (world().rank() == 0) {
    std::printf("%s at %d ranks: every other rank reported the stall in %.2f-%.2f s (timeout %.0f s)\n",
                algorithm_name(algorithm).c_str(), ranks, *std::min_element(reported.begin(), reported.end()),
                *std::max_element(reported.begin(), reported.end()), kTimeoutSeconds);
  }
}

INSTANTIATE_TEST_SUITE_P(AllStrategies, StalledRank,
                         ::testing::Values(Algorithm::ring, Algorithm::zigzag, Algorithm::ulysses, Algorithm::hamilton,
                                           Algorithm::hamilton2, Algorithm::allgather, Algorithm::usp),
                         [](const ::testing::TestParamInfo<Algorithm>& info) { return algorithm_name(info.param); });

}  // namespace
}  // namespace spattn
