// Block backward vs the fp64 reference, over the same cases as the forward, and accumulation.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

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

TEST(BackwardAccumulation, AddsToExistingGradients) {
  std::mt19937 generator(11);
  HostTensor q(DType::f32, {1, 40, 4, 32}), k(DType::f32, {1, 50, 1, 32}), v(DType::f32, {1, 50, 1, 32}),
      dout(DType::f32, {1, 40, 4, 32}), lse(DType::f32, {1, 4, 40}), delta(DType::f32, {1, 4, 40});
  for (HostTensor* tensor : {&q, &k, &v, &dout, &delta}) tensor->randomize(generator);
  lse.randomize(generator, 0.1f);
  lse.set(3, -std::numeric_limits<float>::infinity());  // a row that sees no key anywhere
  auto kernels = make_cpu_block_kernels();
  auto run = [&](HostTensor& dq, HostTensor& dk, HostTensor& dv) {
    BackwardBlock block;
    block.q = q.view();
    block.q_position = 45;
    block.segments = {KvGradSegment{KvSegment{k.view(), v.view(), 10}, dk.view(), dv.view()}};
    block.dout = dout.view();
    block.lse = lse.view();
    block.delta = delta.view();
    block.mask = AttentionMask{30, 0};
    block.scale = 0.2f;
    block.dq = dq.view();
    kernels->backward(block);
  };
  HostTensor dq0(DType::f32, {1, 40, 4, 32}), dk0(DType::f32, {1, 50, 1, 32}), dv0(DType::f32, {1, 50, 1, 32});
  HostTensor dq1(DType::f32, {1, 40, 4, 32}), dk1(DType::f32, {1, 50, 1, 32}), dv1(DType::f32, {1, 50, 1, 32});
  for (HostTensor* tensor : {&dq0, &dk0, &dv0}) tensor->fill(0.0f);
  for (HostTensor* tensor : {&dq1, &dk1, &dv1}) tensor->randomize(generator);
  const std::vector<double> initial_dq = dq1.values(), initial_dk = dk1.values(), initial_dv = dv1.values();
  run(dq0, dk0, dv0);
  run(dq1, dk1, dv1);
  auto check = [](const HostTensor& from_zero, const HostTensor& accumulated, const std::vector<double>& initial) {
    for (int64_t i = 0; i < from_zero.numel(); ++i) {
      ASSERT_TRUE(std::isfinite(accumulated.at(i)));
      const double expected = initial[static_cast<std::size_t>(i)] + from_zero.at(i);
      // fp32 accumulation: a few units in the last place of the sum's magnitude.
      ASSERT_NEAR(accumulated.at(i), expected, 1e-6 * std::max(1.0, std::abs(expected)));
    }
  };
  check(dq0, dq1, initial_dq);
  check(dk0, dk1, initial_dk);
  check(dv0, dv1, initial_dv);
  // The row with lse = -inf (batch 0, head 0, query 3) gets no gradient.
  for (int64_t d = 0; d < 32; ++d) EXPECT_EQ(dq0.at((3 * 4 + 0) * 32 + d), 0.0f);
}

}  // namespace
}  // namespace spattn::test
