// On GPUs, for every strategy and both device transports: a profiled call's times come from events
// on the kernels' stream (StreamMark), read once at its end. The profile adds up as on the CPU
// (expect_consistent_profile: per-step entries, a timeline of spans in order within the call) and
// the profiled call gives the same outputs as one without a profile.

#include <gtest/gtest.h>

#include <string>
#include <tuple>

#include "distributed_checks.hpp"
#include "distributed_world.hpp"
#include "shared_device_communicators.hpp"
#include "strategy_runner.hpp"

namespace spattn {
namespace {

using ProfileCase = std::tuple<Algorithm, Transport>;

class ProfileOnGpus : public ::testing::TestWithParam<ProfileCase> {};

TEST_P(ProfileOnGpus, AddsUpAndLeavesTheOutputsAsTheyWere) {
  const auto [algorithm, transport] = GetParam();
  AlgorithmSetup setup;
  std::string why_skipped;
  Communicator* communicator = gpu_case_communicator(algorithm, transport, setup, why_skipped);
  if (communicator == nullptr) GTEST_SKIP() << why_skipped;
  const AttentionShape shape = gpu_case_shape(setup);
  AttentionOptions options;
  options.causal = true;
  options.deterministic = true;  // the same bits with and without the profile
  const AttentionProblem problem = random_problem(shape, options, 41, /*backward=*/true);
  const StrategyRun profiled =
      run_strategy(*communicator, algorithm, problem, 0, 1, /*per_step_profile=*/true, setup.options);
  const StrategyRun plain = run_strategy(*communicator, algorithm, problem, 0, 1, false, setup.options);
  for (const Profile* profile : {&profiled.forward, &profiled.backward})
    expect_consistent_profile(*profile, profile->steps.size());
  EXPECT_GT(profiled.forward.steps.size(), 0u);
  expect_identical_outputs(profiled.outputs, plain.outputs);
}

INSTANTIATE_TEST_SUITE_P(EveryStrategy, ProfileOnGpus,
                         ::testing::Combine(::testing::ValuesIn(all_algorithms()),
                                            ::testing::ValuesIn(kDeviceTransports)),
                         algorithm_transport_case_name);

}  // namespace
}  // namespace spattn
