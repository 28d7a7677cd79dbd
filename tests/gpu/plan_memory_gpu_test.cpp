// On GPUs, for every strategy and both device transports: a plan allocates device memory at its
// first call only (a cudaMalloc inside the step loop would synchronize), releases all of it when
// it goes, and repeated plans leave the GPU's free memory where it was (cudaMemGetInfo, which
// sees cuDNN's and NCCL's own allocations too). The peak workspace per rank is printed for the log.
// The free memory is only a plan's to keep level with every kernel module loaded at the start
// (CUDA_MODULE_LOADING=EAGER, which the CTest entries set): loaded lazily, a module comes in when a
// later call first launches one of its kernels, 2 MiB that no plan owns and that stays (measured on
// an H100 with the own backward: once, at the second plan of six, then level).

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <tuple>

#include "distributed_checks.hpp"
#include "distributed_world.hpp"
#include "shared_device_communicators.hpp"
#include "spattn/device_memory.hpp"
#include "strategy_runner.hpp"

namespace spattn {
namespace {

// Free bytes of this rank's GPU once every rank has got here (ranks may share a GPU).
std::size_t free_bytes_after_barrier(Communicator& communicator) {
  synchronize_device(communicator.device());
  world().barrier();
  std::size_t free = 0, total = 0;
  EXPECT_EQ(cudaMemGetInfo(&free, &total), cudaSuccess);
  world().barrier();
  return free;
}

using MemoryCase = std::tuple<Algorithm, Transport>;

class PlanMemoryOnGpus : public ::testing::TestWithParam<MemoryCase> {};

TEST_P(PlanMemoryOnGpus, AllocatesAtTheFirstCallOnlyAndLeavesTheGpuAsItWas) {
  const char* module_loading = std::getenv("CUDA_MODULE_LOADING");
  ASSERT_TRUE(module_loading != nullptr && std::string(module_loading) == "EAGER")
      << "PlanMemoryOnGpus needs CUDA_MODULE_LOADING=EAGER (its CTest entries set it), not '"
      << (module_loading != nullptr ? module_loading : "") << "': see the top of plan_memory_gpu_test.cpp";
  const auto [algorithm, transport] = GetParam();
  AlgorithmSetup setup;
  std::string why_skipped;
  Communicator* communicator = gpu_case_communicator(algorithm, transport, setup, why_skipped);
  if (communicator == nullptr) GTEST_SKIP() << why_skipped;
  const AttentionShape shape = gpu_case_shape(setup);
  AttentionOptions options;
  options.causal = true;
  const AttentionProblem problem = random_problem(shape, options, 97, /*backward=*/true);
  const auto run_once = [&] {
    return run_strategy(*communicator, algorithm, problem, /*warmup=*/1, /*iterations=*/2, false, setup.options);
  };

  const StrategyRun first = run_once();  // also fills the caches that outlive plans (cuDNN graphs)
  EXPECT_EQ(first.memory.allocations_after_first_call, 0);
  EXPECT_EQ(first.memory.bytes_left_after_plan, 0);
  EXPECT_GT(first.memory.peak_bytes, 0);
  const std::size_t free_before = free_bytes_after_barrier(*communicator);
  for (int repeat = 0; repeat < 3; ++repeat) run_once();
  const std::size_t free_after = free_bytes_after_barrier(*communicator);
  EXPECT_EQ(free_after, free_before) << "the GPU's free memory moved by "
                                     << (static_cast<double>(free_before) - static_cast<double>(free_after)) << " bytes";
  if (world().rank() == 0) {
    std::printf("%s over %s at %d ranks, S=%lld H=%lld HK=%lld D=128 bf16 causal: peak workspace %.2f MiB per rank\n",
                algorithm_name(algorithm).c_str(), transport_name(transport).c_str(), world().size(),
                static_cast<long long>(shape.seq), static_cast<long long>(shape.heads),
                static_cast<long long>(shape.kv_heads), static_cast<double>(first.memory.peak_bytes) / (1 << 20));
  }
}

INSTANTIATE_TEST_SUITE_P(AllStrategies, PlanMemoryOnGpus,
                         ::testing::Combine(::testing::ValuesIn(all_algorithms()),
                                            ::testing::ValuesIn(kDeviceTransports)),
                         algorithm_transport_case_name);

}  // namespace
}  // namespace spattn
