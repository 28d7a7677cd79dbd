#include "conformance_perf.hpp"

#include <chrono>
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "kernel_targets.hpp"
#include "prepared_case.hpp"

namespace spattn::test {
namespace {

// Calls before the timed ones: first-call costs (cuDNN graphs, allocations, caches) stay out.
constexpr int kWarmupRuns = 2;

/// A row of the table: the case, then its measures and shape, or why it has none.
void print_row(const std::string& target, const BlockKernelCase& c, const std::string& result) {
  std::printf("%-10s  %-58s  %s\n", target.c_str(), c.name().c_str(), result.c_str());
}

/// "ms TFLOP/s GB/s shape" of one case, timed on `kernels`.
std::string time_case(BlockKernels& kernels, const BlockKernelCase& c, int iterations) {
  const PreparedCase prepared = prepare_case(c, /*with_expectations=*/false);
  const std::vector<DeviceTensor> on_device = place_on(prepared.tensors, kernels.device());
  for (int run = 0; run < kWarmupRuns; ++run) prepared.run(kernels, on_device);
  kernels.synchronize();
  const auto start = std::chrono::steady_clock::now();
  for (int run = 0; run < iterations; ++run) prepared.run(kernels, on_device);
  kernels.synchronize();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / iterations;
  // A rate where the operation has that measure, else "-".
  const auto rate = [seconds](double amount, double unit, int decimals) {
    char text[32] = "-";
    if (amount > 0) std::snprintf(text, sizeof text, "%.*f", decimals, amount / seconds / unit);
    return std::string(text);
  };
  char measures[64];
  std::snprintf(measures, sizeof measures, "%10.4f  %9s  %9s  ", seconds * 1e3, rate(prepared.flops, 1e12, 3).c_str(),
                rate(prepared.bytes, 1e9, 1).c_str());
  return measures + c.shape();
}

}  // namespace

int run_perf(const PerfOptions& options) {
  std::vector<KernelTarget> targets;
  for (const KernelTarget& target : kernel_targets())
    if (options.target.empty() || target.name == options.target) targets.push_back(target);
  if (targets.empty()) {
    std::fprintf(stderr, "spattn_conformance perf: no target '%s'; targets:", options.target.c_str());
    for (const KernelTarget& target : kernel_targets()) std::fprintf(stderr, " %s", target.name.c_str());
    std::fprintf(stderr, "\n");
    return 2;
  }
  const std::vector<BlockKernelCase> cases = block_kernel_cases(options.scale);
  std::printf("%-10s  %-58s  %10s  %9s  %9s  %s\n", "target", "case", "ms", "TFLOP/s", "GB/s", "shape");
  int status = 0;
  for (const KernelTarget& target : targets) {
    const std::string unavailable = target_unavailable(target);
    if (!unavailable.empty()) {
      std::printf("%-10s  skipped: %s\n", target.name.c_str(), unavailable.c_str());
      continue;
    }
    BlockKernels& kernels = kernels_of(target);
    for (const BlockKernelCase& c : cases) {
      if (c.name().find(options.filter) == std::string::npos) continue;
      const std::string unsupported = case_unsupported(target, c);
      if (!unsupported.empty()) {
        print_row(target.name, c, "skipped: " + unsupported);
        continue;
      }
      try {
        print_row(target.name, c, time_case(kernels, c, options.iterations));
      } catch (const std::exception& error) {
        print_row(target.name, c, std::string("failed: ") + error.what());
        status = 1;
      }
      std::fflush(stdout);
    }
  }
  return status;
}

}  // namespace spattn::test
