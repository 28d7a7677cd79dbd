// A plan allocates its workspace at its first call and never again (no allocation inside a step
// loop, where a device allocation would synchronize), and gives all of it back when it goes: for
// every strategy, forward and backward, at the rank count of this run. The peak each strategy
// holds per rank is printed for the log.

#include <gtest/gtest.h>

#include <cstdio>

#include "distributed_checks.hpp"
#include "distributed_world.hpp"
#include "strategy_runner.hpp"

namespace spattn {
namespace {

class PlanMemory : public ::testing::TestWithParam<Algorithm> {};

TEST_P(PlanMemory, AllocatesAtTheFirstCallOnlyAndReleasesEverything) {
  const Algorithm algorithm = GetParam();
  const int ranks = world().size();
  const AlgorithmSetup setup = algorithm_setup(algorithm, ranks);
  if (!setup.not_applicable.empty()) GTEST_SKIP() << setup.not_applicable;
  const AttentionShape shape{2, 4 * setup.length_unit, 2 * ranks, ranks, 16, DType::bf16};
  AttentionOptions options;
  options.causal = true;
  const AttentionProblem problem = random_problem(shape, options, 95, /*backward=*/true);

  const StrategyRun run = run_strategy(world(), algorithm, problem, /*warmup=*/1, /*iterations=*/2, false, setup.options);

  EXPECT_EQ(run.memory.allocations_after_first_call, 0);
  EXPECT_EQ(run.memory.bytes_left_after_plan, 0);
  EXPECT_GT(run.memory.peak_bytes, 0);
  if (world().rank() == 0) {
    std::printf("%s at %d ranks, B=%lld S=%lld H=%lld HK=%lld D=%lld bf16 causal: peak workspace %.1f KiB per rank\n",
                algorithm_name(algorithm).c_str(), ranks, static_cast<long long>(shape.batch),
                static_cast<long long>(shape.seq), static_cast<long long>(shape.heads),
                static_cast<long long>(shape.kv_heads), static_cast<long long>(shape.head_dim),
                static_cast<double>(run.memory.peak_bytes) / 1024.0);
  }
}

INSTANTIATE_TEST_SUITE_P(AllStrategies, PlanMemory, ::testing::ValuesIn(all_algorithms()),
                         [](const ::testing::TestParamInfo<Algorithm>& info) { return algorithm_name(info.param); });

}  // namespace
}  // namespace spattn
