#include "stall_checks.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

#include "distributed_world.hpp"

namespace spattn {

namespace {

constexpr double kStallSeconds = 3.0;
// What a rank may take beyond the timeout to report: the steps before the one it waits at, on
// ranks that share two cores (up to 8 of them); under the timeout itself, so that waiting out a
// second timeout (one per transfer, say) fails.
constexpr double kReportSlackSeconds = 0.9;

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

std::string stall_at_first_transfer(int stalled) {
  return "stall:" + std::to_string(stalled) + ":0:" + std::to_string(kStallSeconds);
}

void expect_stall_reported(Communicator& communicator, Algorithm algorithm, const AlgorithmSetup& setup,
                           const AttentionProblem& problem, int stalled, const std::string& what) {
  const auto start = std::chrono::steady_clock::now();
  const std::string error = error_of([&] { run_strategy(communicator, algorithm, problem, 0, 1, false, setup.options); });
  const double elapsed = seconds_since(start);

  if (world().rank() == stalled) {
    EXPECT_NE(error.find("stalled for"), std::string::npos) << error;
  } else {
    EXPECT_NE(error.find("timed out after 1 s waiting for"), std::string::npos) << error;
    EXPECT_NE(error.find("(at step "), std::string::npos) << error;
    EXPECT_GE(elapsed, kStallTestTimeoutSeconds) << error;
    EXPECT_LE(elapsed, kStallTestTimeoutSeconds + kReportSlackSeconds) << error;
    // Given up on: later calls fail at once instead of waiting again (asked only of a
    // communicator that gave up: a healthy one would wait for the stalled rank).
    if (error.find("timed out") != std::string::npos) {
      const auto again = std::chrono::steady_clock::now();
      EXPECT_NE(error_of([&] { communicator.barrier(); }), "");
      EXPECT_LT(seconds_since(again), kStallTestTimeoutSeconds);
    }
  }
  // The slowest report, for the log (the figures in the notes come from these lines).
  std::vector<double> reported(static_cast<std::size_t>(world().size()));
  world().host_all_gather(&elapsed, reported.data(), sizeof elapsed);  // the stalled rank comes back
  reported.erase(reported.begin() + stalled);
  if (world().rank() == 0) {
    std::printf("%s: every other rank reported the stall in %.2f-%.2f s (timeout %.0f s)\n", what.c_str(),
                *std::min_element(reported.begin(), reported.end()),
                *std::max_element(reported.begin(), reported.end()), kStallTestTimeoutSeconds);
  }
}

}  // namespace spattn
