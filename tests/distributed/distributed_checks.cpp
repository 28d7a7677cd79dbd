#include "distributed_checks.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <sstream>
#include <vector>

#include "accuracy_report.hpp"
#include "distributed_world.hpp"
#include "spattn/reference_attention.hpp"

namespace spattn {

AlgorithmSetup algorithm_setup(Algorithm algorithm, int ranks) {
  switch (algorithm) {
    case Algorithm::ring: return {{}, ranks, ""};
    case Algorithm::hamilton:
      if (ranks == 4 || ranks == 6) return {{}, 1, "no Hamiltonian decomposition at 4 or 6 ranks"};
      return {{}, 2 * ranks * std::max(1, ranks - 1), ""};
    case Algorithm::hamilton2: {
      int ranks_per_node = 1;
      for (int size = 2; 2 * size <= ranks; size += 2)
        if (ranks % size == 0) ranks_per_node = size;
      StrategyOptions options;
      options.nodes = ranks / ranks_per_node;
      return {options, 2 * ranks * ranks_per_node, ""};
    }
    default: return {{}, 2 * ranks, ""};
  }
}

void expect_accurate(Algorithm algorithm, const AttentionProblem& problem, const StrategyOptions& strategy_options) {
  expect_accurate_on(world(), algorithm, problem, strategy_options);
}

void expect_accurate_on(Communicator& communicator, Algorithm algorithm, const AttentionProblem& problem,
                        const StrategyOptions& strategy_options) {
  const StrategyRun distributed = run_strategy(communicator, algorithm, problem, 0, 1, false, strategy_options);
  std::string failures;
  if (world().rank() == 0) {
    const AttentionOutputs single = run_single_device(problem, communicator.device());
    const ReferenceResult reference = reference_attention(problem.q.view(), problem.k.view(), problem.v.view(),
                                                          problem.dout.view(), problem.options);
    const std::vector<OutputError> errors = compare_with_reference(distributed.outputs, single, reference);
    if (errors.size() != 5) failures = "expected 5 outputs to compare, got " + std::to_string(errors.size());
    for (const OutputError& error : errors) {
      if (error.pass) continue;
      std::ostringstream text;
      text << algorithm_name(algorithm) << " (nodes " << strategy_options.nodes << ", inner " << strategy_options.inner
           << ") " << error.name << " at " << world().size() << " ranks: distributed error " << error.distributed
           << " > bound " << error.bound << " (single-rank error " << error.single_rank << "); ";
      failures += text.str();
    }
  }
  EXPECT_EQ(error_of([&] { agree_on_call(world(), failures, {}); }), "");
}

void expect_consistent_profile(const Profile& profile, std::size_t steps) {
  EXPECT_GT(profile.total_ms, 0);
  EXPECT_GT(profile.compute_ms, 0);
  EXPECT_GE(profile.comm_wait_ms, 0);
  EXPECT_LE(profile.compute_ms + profile.comm_wait_ms, profile.total_ms * 1.01 + 0.01);
  ASSERT_EQ(profile.steps.size(), steps);
  double steps_compute = 0, steps_wait = 0;
  for (const StepTiming& step : profile.steps) {
    EXPECT_GE(step.compute_ms, 0);
    EXPECT_GE(step.comm_wait_ms, 0);
    steps_compute += step.compute_ms;
    steps_wait += step.comm_wait_ms;
  }
  EXPECT_NEAR(steps_compute, profile.compute_ms, 1e-6 + 1e-9 * profile.compute_ms);
  EXPECT_NEAR(steps_wait, profile.comm_wait_ms, 1e-6 + 1e-9 * profile.comm_wait_ms);
  // The timeline: spans in the order they ran, one after another on the kernels' clock, within the
  // call, and per step as long as its compute and waiting together (a nested call's waiting moves
  // from compute to waiting, not out of the step).
  ASSERT_FALSE(profile.spans.empty());
  std::vector<double> steps_spanned(steps, 0.0);
  double previous_end = 0;
  for (const ProfileSpan& span : profile.spans) {
    ASSERT_GE(span.step, 0);
    ASSERT_LT(span.step, static_cast<int>(steps));
    EXPECT_GE(span.start_ms, previous_end - 1e-3);
    EXPECT_GE(span.end_ms, span.start_ms);
    EXPECT_LE(span.end_ms, profile.total_ms * 1.01 + 0.01);
    previous_end = span.end_ms;
    steps_spanned[static_cast<std::size_t>(span.step)] += span.end_ms - span.start_ms;
  }
  for (std::size_t step = 0; step < steps; ++step)
    EXPECT_NEAR(steps_spanned[step], profile.steps[step].compute_ms + profile.steps[step].comm_wait_ms,
                1e-6 + 1e-9 * profile.total_ms)
        << "step " << step;
}

void expect_identical_outputs(const AttentionOutputs& first, const AttentionOutputs& second) {
  const std::pair<const HostTensor*, const HostTensor*> pairs[] = {{&first.out, &second.out}, {&first.lse, &second.lse},
                                                                   {&first.dq, &second.dq},   {&first.dk, &second.dk},
                                                                   {&first.dv, &second.dv}};
  for (const auto& [one, other] : pairs) {
    ASSERT_EQ(one->view().numel(), other->view().numel());
    ASSERT_EQ(one->dtype(), other->dtype());
    // Bytes, not values: -0 and 0 differ, and NaN matches only itself.
    const std::size_t element_bytes = dtype_size(one->dtype());
    const auto* one_bytes = static_cast<const unsigned char*>(one->view().data);
    const auto* other_bytes = static_cast<const unsigned char*>(other->view().data);
    for (int64_t i = 0; i < one->view().numel(); ++i) {
      const std::size_t offset = static_cast<std::size_t>(i) * element_bytes;
      ASSERT_EQ(std::memcmp(one_bytes + offset, other_bytes + offset, element_bytes), 0)
          << "element " << i << ": " << one->at(i) << " and " << other->at(i);
    }
  }
}

}  // namespace spattn
