#include "stall_checks.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <sstream>
#include <thread>
#include <vector>

#include "distributed_world.hpp"

namespace spattn {

namespace {

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

std::string stall_at_first_transfer(int stalled, const StallTimes& times) {
  return "stall:" + std::to_string(stalled) + ":0:" + std::to_string(times.stall_seconds);
}

void expect_stall_reported(Communicator& communicator, Algorithm algorithm, const AlgorithmSetup& setup,
                           const AttentionProblem& problem, int stalled, const StallTimes& times,
                           const std::string& what) {
  const auto start = std::chrono::steady_clock::now();
  // When the communicator first knows: NCCL's watchdog thread knows while the call still waits
  // for its GPU work to end; on the host the call knows and throws at once.
  std::atomic<bool> call_returned{false};
  std::atomic<double> failure_seen_after{-1};
  std::thread watcher([&] {
    while (!call_returned) {
      if (!error_of([&] { communicator.check_transfers_completed(); }).empty()) {
        failure_seen_after = seconds_since(start);
        return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  });
  const ThrownError thrown =
      thrown_error_of([&] { run_strategy(communicator, algorithm, problem, 0, 1, false, setup.options); });
  const std::string& error = thrown.message;
  const double returned_after = seconds_since(start);
  call_returned = true;
  watcher.join();
  const double known_after = failure_seen_after >= 0 ? failure_seen_after.load() : returned_after;

  // Every rank's error is its own, typed as such (the program prints it on every rank).
  EXPECT_TRUE(thrown.timeout) << "not a TimeoutError: " << error;
  if (world().rank() == stalled) {
    EXPECT_NE(error.find("stalled for"), std::string::npos) << error;
  } else {
    std::ostringstream timed_out;
    timed_out << "timed out after " << times.timeout_seconds << " s waiting for";
    EXPECT_NE(error.find(timed_out.str()), std::string::npos) << error;
    EXPECT_NE(error.find("(at step "), std::string::npos) << error;
    EXPECT_EQ(error.find("(at step "), error.rfind("(at step ")) << "one step, the failed transfer's: " << error;
    EXPECT_GE(known_after, times.timeout_seconds) << error;
    EXPECT_LE(known_after, times.timeout_seconds + times.slack_seconds) << error;
    EXPECT_LE(returned_after, known_after + times.ending_device_work_seconds) << error;
    // Given up on: later calls fail at once instead of waiting again (asked only of a
    // communicator that gave up: a healthy one would wait for the stalled rank).
    if (error.find("timed out") != std::string::npos) {
      const auto again = std::chrono::steady_clock::now();
      const ThrownError later = thrown_error_of([&] { communicator.barrier(); });
      EXPECT_NE(later.message, "");
      EXPECT_TRUE(later.timeout) << "the family's failure keeps its kind: " << later.message;
      EXPECT_LT(seconds_since(again), times.timeout_seconds);
    }
  }
  // The slowest reports, for the log (the figures in the notes come from these lines).
  const double mine[2] = {known_after, returned_after};
  std::vector<double> everyone(2 * static_cast<std::size_t>(world().size()));
  world().host_all_gather(mine, everyone.data(), sizeof mine);  // the stalled rank comes back
  std::vector<double> known, returned;
  for (int rank = 0; rank < world().size(); ++rank) {
    if (rank == stalled) continue;
    known.push_back(everyone[2 * static_cast<std::size_t>(rank)]);
    returned.push_back(everyone[2 * static_cast<std::size_t>(rank) + 1]);
  }
  if (world().rank() == 0) {
    std::printf("%s: every other rank knew of the stall after %.2f-%.2f s and its call returned after %.2f-%.2f s "
                "(timeout %.0f s)\n",
                what.c_str(), *std::min_element(known.begin(), known.end()), *std::max_element(known.begin(), known.end()),
                *std::min_element(returned.begin(), returned.end()),
                *std::max_element(returned.begin(), returned.end()), times.timeout_seconds);
  }
}

}  // namespace spattn
