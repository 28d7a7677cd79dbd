// Every strategy at the rank count of this run on inputs at the edges of the number ranges: a
// window so narrow that most blocks of a step, and most rows of the rest, see no key; scores of
// +-1e4; fp16 inputs whose products overflow fp16; a tiny softmax scale. Forward and
// backward are held to the fp64 reference with the 2x criterion (which fails any non-finite
// element). And a call repeated on the same inputs gives the same bits.

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <tuple>

#include "distributed_checks.hpp"
#include "distributed_world.hpp"
#include "strategy_runner.hpp"

namespace spattn {
namespace {

constexpr int64_t kHeadDim = 16;

struct NumericsCase {
  const char* name;
  DType dtype;
  AttentionOptions options;
  double qk_factor;  // q and k are standard normal times this
  double v_factor;   // v likewise (dout stays standard normal)
};

AttentionOptions with_scale(AttentionOptions options, float scale) {
  options.softmax_scale = scale;
  return options;
}

const AttentionOptions kNarrowWindow{false, 2, 1};
const AttentionOptions kCausal{true, -1, -1};

const NumericsCase kCases[] = {
    {"narrow_window", DType::f32, kNarrowWindow, 1, 1},
    // q.k of standard deviation 100^2 sqrt(D), times 1/sqrt(D): scores of about +-1e4.
    {"scores_1e4", DType::f32, kCausal, 100, 1},
    // fp16 q and k of about +-250 (products of 6e4), scaled back to scores of about +-1 so that
    // out and every gradient fit in fp16.
    {"fp16_qk_250", DType::f16, with_scale(kCausal, static_cast<float>(1.0 / (250.0 * 250.0 * 4.0))), 250, 1},
    // fp16 v of about +-250 (out too; dq and dk reach about 1e3); larger v would make the true
    // dq and dk overflow fp16.
    {"fp16_v_250", DType::f16, AttentionOptions{true, 11, -1}, 1, 250},
    {"scale_1e-6", DType::bf16, with_scale(AttentionOptions{}, 1e-6f), 1, 1},
    // No huge scale here: a partial result's lse, rounded at its magnitude (an ulp of 400 is
    // 3e-5), weighs it in every later merge or accumulating block, an error that a one-block run
    // does not make; at scale 100 and more it outgrows the 2x criterion (ring at 5 ranks: dq 2.3x
    // the single-rank error). numerics_test.cpp checks scale 1e3 on the kernels.
};

void multiply(HostTensor& tensor, double factor) {
  for (int64_t i = 0; i < tensor.numel(); ++i) tensor.set(i, tensor.at(i) * factor);
}

/// The case's problem for `algorithm` at this rank count: 2N query heads on 2 kv heads (so
/// that Ulysses and USP split heads), at least 8 tokens per rank.
AttentionProblem numerics_problem(const NumericsCase& numerics_case, const AlgorithmSetup& setup, uint64_t seed) {
  const int64_t ranks = world().size();
  const int64_t units = (8 * ranks + setup.length_unit - 1) / setup.length_unit;
  const AttentionShape shape{1, setup.length_unit * units, 2 * ranks, 2, kHeadDim, numerics_case.dtype};
  AttentionProblem problem = random_problem(shape, numerics_case.options, seed, /*backward=*/true);
  multiply(problem.q, numerics_case.qk_factor);
  multiply(problem.k, numerics_case.qk_factor);
  multiply(problem.v, numerics_case.v_factor);
  return problem;
}

using ExtremeCase = std::tuple<Algorithm, int /*case index*/>;

class ExtremeInputs : public ::testing::TestWithParam<ExtremeCase> {};

TEST_P(ExtremeInputs, FiniteAndAccurateForwardAndBackward) {
  const auto [algorithm, case_index] = GetParam();
  const AlgorithmSetup setup = algorithm_setup(algorithm, world().size());
  if (!setup.not_applicable.empty()) GTEST_SKIP() << setup.not_applicable;
  // stripe refuses windows (bad_input_test holds it to that).
  const std::string refusal = mask_unsupported(algorithm, kCases[case_index].options);
  if (!refusal.empty()) GTEST_SKIP() << refusal;
  const uint64_t seed = 5000 + static_cast<uint64_t>(case_index) * 10;
  expect_accurate(algorithm, numerics_problem(kCases[case_index], setup, seed), setup.options);
}

INSTANTIATE_TEST_SUITE_P(Numerics, ExtremeInputs,
                         ::testing::Combine(::testing::ValuesIn(all_algorithms()), ::testing::Range(0, 5)),
                         [](const ::testing::TestParamInfo<ExtremeCase>& info) {
                           std::string name = algorithm_name(std::get<0>(info.param)) + "_" +
                                              kCases[std::get<1>(info.param)].name;
                           for (char& c : name)
                             if (c == '-') c = 'm';
                           return name;
                         });

class Determinism : public ::testing::TestWithParam<Algorithm> {};

// At a fixed rank count (and any thread count) every partial result is computed and merged in
// an order fixed by the schedule, never by arrival: a fresh plan and a reused one give the first
// call's bits.
TEST_P(Determinism, RepeatedCallsGiveTheSameBits) {
  const Algorithm algorithm = GetParam();
  const AlgorithmSetup setup = algorithm_setup(algorithm, world().size());
  if (!setup.not_applicable.empty()) GTEST_SKIP() << setup.not_applicable;
  // A window where the strategy takes one (stripe: causal alone).
  const AttentionOptions window{true, 11, -1};
  const bool windowed = mask_unsupported(algorithm, window).empty();
  const NumericsCase bf16{"bf16", DType::bf16, windowed ? window : kCausal, 1, 1};
  const AttentionProblem problem = numerics_problem(bf16, setup, 5100);
  const StrategyRun first = run_strategy(world(), algorithm, problem, 0, 1, false, setup.options);
  const StrategyRun again = run_strategy(world(), algorithm, problem, 1, 1, false, setup.options);
  expect_identical_outputs(first.outputs, again.outputs);
}

INSTANTIATE_TEST_SUITE_P(Numerics, Determinism, ::testing::ValuesIn(all_algorithms()),
                         [](const ::testing::TestParamInfo<Algorithm>& info) { return algorithm_name(info.param); });

}  // namespace
}  // namespace spattn
