// Block backward vs the fp64 reference, over the same whole problems as the forward (the conformance
// suite, tests/conformance, holds each block to it and to accumulation onto existing gradients).

#include <gtest/gtest.h>

#include "attention_problem.hpp"

namespace spattn::test {
namespace {

constexpr double kGradientTolerance = 1e-5;

class BackwardTest : public ::testing::TestWithParam<AttentionCase> {};

TEST_P(BackwardTest, MatchesFp64Reference) {
  const AttentionProblem problem(GetParam());
  const ReferenceResult reference = problem.reference(true);
  auto kernels = make_cpu_block_kernels();
  std::vector<double> dq, dk, dv;
  problem.run_backward(*kernels, reference, dq, dk, dv);
  EXPECT_LE(relative_error(dq, reference.dq), kGradientTolerance);
  EXPECT_LE(relative_error(dk, reference.dk), kGradientTolerance);
  EXPECT_LE(relative_error(dv, reference.dv), kGradientTolerance);
}

INSTANTIATE_TEST_SUITE_P(Cases, BackwardTest, ::testing::ValuesIn(attention_cases()),
                         [](const ::testing::TestParamInfo<AttentionCase>& info) { return info.param.name(); });

}  // namespace
}  // namespace spattn::test
