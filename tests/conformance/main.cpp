// spattn_conformance: every BlockKernels operation of every kernel choice that this build and
// machine have, against the fp64 reference over one generated list of cases (block_cases.cpp),
// in the manner of ggml's test-backend-ops; or the same cases' throughput.
//
// Usage:
//   spattn_conformance [test] [GoogleTest options]
//     One test per (target, case); targets cpu, cuda_own (KernelChoice own) and cuda_cudnn.
//     --gtest_filter='cpu.*' runs one target, '*.merge_*' one operation. A target that this build
//     or machine lacks, and a case that a target refuses (block_kernels_unsupported), is skipped
//     with the reason; a target's skips say "<target> unavailable: <reason>".
//   spattn_conformance perf [--target T] [--filter SUBSTRING] [--scale N] [--iterations N]
//     The same cases timed: 2 runs of warm-up, then the mean of N runs (default 10) between two
//     synchronizations of the device, as a table of target, case, shape, ms and TFLOP/s
//     (attention, flash-attention's FLOP count) or GB/s (element-wise). The perf mode wants larger
//     shapes than the tests: --scale N multiplies every length, position and window side of the
//     cases (default 4; e.g. 32 on a GPU, where a 96-row block becomes 3072 rows). --filter keeps
//     the cases whose name contains SUBSTRING.

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "conformance_perf.hpp"
#include "conformance_tests.hpp"

namespace {

constexpr int64_t kDefaultPerfScale = 4;

int usage(const char* problem) {
  std::fprintf(stderr,
               "spattn_conformance: %s\n"
               "usage: spattn_conformance [test] [GoogleTest options]\n"
               "       spattn_conformance perf [--target T] [--filter SUBSTRING] [--scale N] [--iterations N]\n",
               problem);
  return 2;
}

/// The perf mode's options from argv[first..]; returns a usage error's status, or runs it.
int perf_main(int argc, char** argv, int first) {
  spattn::test::PerfOptions options;
  options.scale = kDefaultPerfScale;
  for (int i = first; i < argc; ++i) {
    const std::string option = argv[i];
    if (i + 1 == argc) return usage(("option " + option + " needs a value").c_str());
    const std::string value = argv[++i];
    if (option == "--target") {
      options.target = value;
    } else if (option == "--filter") {
      options.filter = value;
    } else if (option == "--scale" || option == "--iterations") {
      const long number = std::strtol(value.c_str(), nullptr, 10);
      if (number < 1) return usage((option + " takes a whole number of 1 or more, not " + value).c_str());
      if (option == "--scale")
        options.scale = number;
      else
        options.iterations = static_cast<int>(number);
    } else {
      return usage(("unknown option " + option).c_str());
    }
  }
  return spattn::test::run_perf(options);
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "perf") return perf_main(argc, argv, 2);
  if (mode == "test") {
    // GoogleTest reads its options from argv[1] on: drop the mode's word.
    for (int i = 1; i + 1 < argc; ++i) argv[i] = argv[i + 1];
    --argc;
  }
  ::testing::InitGoogleTest(&argc, argv);
  spattn::test::register_conformance_tests();
  return RUN_ALL_TESTS();
}
