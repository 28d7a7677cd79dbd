#pragma once
// The perf mode: the cases of the test mode, larger, timed on every target this build and machine
// have.

#include <cstdint>
#include <string>

namespace spattn::test {

struct PerfOptions {
  std::string target;  // a target's name, or "" for every target
  std::string filter;  // a substring of the case names, or "" for every case
  int64_t scale = 1;   // block_kernel_cases' scale
  int iterations = 10;
};

/// Prints one row per (target, case): its shape, the mean time of one run of its operation's
/// calls, and TFLOP/s (attention) or GB/s (element-wise); a skipped or failed case says why.
/// Returns the exit status: 0, 1 when a case failed, 2 for a target that does not exist.
int run_perf(const PerfOptions& options);

}  // namespace spattn::test
