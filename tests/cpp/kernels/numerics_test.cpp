// The CPU block kernels at the edges of their number ranges: rows that see no key in a block or
// anywhere, scores of +-1e4, tiny and huge softmax scales, fp16 inputs whose products overflow
// fp16. Blocked results (zigzag chunks, merged) are held to the fp64 reference with the 2x
// criterion against the one-block run of the same inputs; and results do not depend on the
// number of threads.

#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "accuracy_report.hpp"
#include "attention_problem.hpp"

namespace spattn::test {
namespace {

constexpr double kMinusInfinity = -std::numeric_limits<double>::infinity();

struct NumericsCase {
  const char* name;
  AttentionCase attention;
};

void PrintTo(const NumericsCase& numerics_case, std::ostream* stream) { *stream << numerics_case.name; }

/// A zigzag-decomposed problem of 2 x 96 tokens, 4 query heads on 2 kv heads, head dim 32.
AttentionCase zigzag_case(DType dtype, AttentionOptions options, double qk_deviation, double v_deviation) {
  AttentionCase c;
  c.batch = 2, c.sequence = 96, c.heads = 4, c.kv_heads = 2, c.head_dim = 32, c.dtype = dtype;
  c.options = options, c.decomposition = Decomposition::zigzag;
  c.qk_deviation = qk_deviation, c.v_deviation = v_deviation;
  return c;
}

AttentionOptions with_scale(AttentionOptions options, float scale) {
  options.softmax_scale = scale;
  return options;
}

std::vector<NumericsCase> numerics_cases() {
  const AttentionOptions none{false, -1, -1}, causal{true, -1, -1}, narrow_window{false, 2, 1},
      causal_window{true, 3, -1};
  // q.k has standard deviation qk^2 sqrt(D): qk = 100 gives scores of about +-1e4 at the default
  // scale 1/sqrt(D).
  const double score_1e4_deviation = 100.0;
  // fp16 q and k of about +-250 (their products, 6e4 each, overflow fp16 after two terms),
  // scaled back to scores of about +-1 so that every output and gradient fits in fp16.
  const float fp16_large_scale = static_cast<float>(1.0 / (250.0 * 250.0 * std::sqrt(32.0)));
  return {
      // 24-token chunks under a window of 4: most chunk pairs are wholly masked, and in the rest
      // most rows see no key of the pair.
      {"narrow_window_rows_without_keys", zigzag_case(DType::f32, narrow_window, 1, 1)},
      {"causal_window_rows_without_keys_bf16", zigzag_case(DType::bf16, causal_window, 1, 1)},
      {"scores_1e4", zigzag_case(DType::f32, none, score_1e4_deviation, 1)},
      {"scores_1e4_causal_window", zigzag_case(DType::f32, causal_window, score_1e4_deviation, 1)},
      {"scale_1e-6", zigzag_case(DType::f32, with_scale(causal, 1e-6f), 1, 1)},
      {"scale_1e3", zigzag_case(DType::f32, with_scale(none, 1e3f), 1, 1)},
      {"scale_1e3_narrow_window", zigzag_case(DType::bf16, with_scale(narrow_window, 1e3f), 1, 1)},
      {"fp16_qk_250", zigzag_case(DType::f16, with_scale(causal, fp16_large_scale), 250, 1)},
      // v of about +-250: the products dout.v (1e3 and more) need fp32.
      {"fp16_v_250", zigzag_case(DType::f16, causal, 1, 250)},
  };
}

/// fp64 values as a 1-d fp32 host tensor (the kernels' results are fp32, so exactly).
HostTensor as_tensor(const std::vector<double>& values) {
  HostTensor tensor(DType::f32, {static_cast<int64_t>(values.size())});
  for (std::size_t i = 0; i < values.size(); ++i) tensor.set(static_cast<int64_t>(i), values[i]);
  return tensor;
}

/// Forward and backward of `problem` through its block decomposition, as AttentionOutputs.
AttentionOutputs run_blocks(const AttentionProblem& problem, const ReferenceResult& reference) {
  auto kernels = make_cpu_block_kernels();
  std::vector<double> out, lse, dq, dk, dv;
  problem.run_forward(*kernels, out, lse);
  problem.run_backward(*kernels, reference, dq, dk, dv);
  return {as_tensor(out), as_tensor(lse), as_tensor(dq), as_tensor(dk), as_tensor(dv)};
}

class ExtremeInputs : public ::testing::TestWithParam<NumericsCase> {};

TEST_P(ExtremeInputs, BlockedResultsAreFiniteAndMeetTheCriterion) {
  const AttentionCase& blocked_case = GetParam().attention;
  AttentionCase whole_case = blocked_case;
  whole_case.decomposition = Decomposition::whole;
  // The same seed: the same inputs in both.
  const AttentionProblem blocked(blocked_case), whole(whole_case);
  const ReferenceResult reference = blocked.reference(true);
  for (double lse : reference.lse) ASSERT_TRUE(std::isfinite(lse)) << "every row sees its own key";

  const AttentionOutputs blocked_outputs = run_blocks(blocked, reference);
  if (HasFatalFailure()) return;
  const AttentionOutputs whole_outputs = run_blocks(whole, reference);
  if (HasFatalFailure()) return;
  const std::vector<OutputError> errors = compare_with_reference(blocked_outputs, whole_outputs, reference);
  ASSERT_EQ(errors.size(), 5u);
  for (const OutputError& error : errors)
    EXPECT_TRUE(error.pass) << error.name << ": blocked error " << error.distributed << " > bound " << error.bound
                            << " (one-block error " << error.single_rank << ")";
}

INSTANTIATE_TEST_SUITE_P(Numerics, ExtremeInputs, ::testing::ValuesIn(numerics_cases()),
                         [](const ::testing::TestParamInfo<NumericsCase>& info) {
                           std::string name = info.param.name;
                           for (char& c : name)
                             if (c == '-') c = 'm';
                           return name;
                         });

// Queries that see no key anywhere (the block's keys all lie left of their window) get out = 0,
// lse = -inf and dq = 0, and leave dk and dv as the other queries alone make them. (The public
// API cannot ask for such rows, every query seeing its own key; blocks of strategies can.)
TEST(NumericsRowsWithoutKeys, ZeroOutputMinusInfinityLseAndNoGradient) {
  constexpr int64_t kQueries = 40, kKeys = 30, kHeads = 2, kHeadDim = 16, kVisibleQueries = 20;
  constexpr int64_t kQueryPosition = 20;
  // Query at position p sees keys [p - 10, p]: queries 20..39 see some of keys 0..29, 40..59 none.
  const AttentionMask mask{10, 0};
  const float scale = 0.25f;
  // fp32 round-off of values of order 1: the two runs differ only in the query count of a tile.
  constexpr double kTolerance = 1e-5;
  std::mt19937 generator(21);
  HostTensor q(DType::f32, {1, kQueries, kHeads, kHeadDim}), k(DType::f32, {1, kKeys, 1, kHeadDim}),
      v(DType::f32, {1, kKeys, 1, kHeadDim}), dout(DType::f32, {1, kQueries, kHeads, kHeadDim});
  for (HostTensor* tensor : {&q, &k, &v, &dout}) tensor->randomize(generator);
  auto kernels = make_cpu_block_kernels();

  struct Gradients {
    HostTensor out, lse, dq, dk, dv;
  };
  // Forward, then backward from its own out and lse, of the first `queries` queries.
  const auto run = [&](int64_t queries) {
    Gradients result{HostTensor(DType::f32, {1, queries, kHeads, kHeadDim}), HostTensor(DType::f32, {1, kHeads, queries}),
                     HostTensor(DType::f32, {1, queries, kHeads, kHeadDim}), HostTensor(DType::f32, {1, kKeys, 1, kHeadDim}),
                     HostTensor(DType::f32, {1, kKeys, 1, kHeadDim})};
    result.out.poison();
    result.lse.poison();
    const TensorView q_rows = q.view().slice(1, 0, queries);
    const KvSegment keys{k.view(), v.view(), 0};
    kernels->forward(ForwardBlock{q_rows, kQueryPosition, {keys}, mask, scale, result.out.view(), result.lse.view()});
    HostTensor delta(DType::f32, {1, kHeads, queries});
    delta.poison();
    const TensorView dout_rows = dout.view().slice(1, 0, queries);
    kernels->softmax_delta(result.out.view(), dout_rows, delta.view());
    for (HostTensor* gradient : {&result.dq, &result.dk, &result.dv}) kernels->fill(gradient->view(), 0.0f);
    BackwardBlock block;
    block.q = q_rows;
    block.q_position = kQueryPosition;
    block.segments = {KvGradSegment{keys, result.dk.view(), result.dv.view()}};
    block.dout = dout_rows;
    block.lse = result.lse.view();
    block.delta = delta.view();
    block.mask = mask;
    block.scale = scale;
    block.dq = result.dq.view();
    kernels->backward(block);
    return result;
  };
  const Gradients all = run(kQueries), visible = run(kVisibleQueries);

  for (int64_t h = 0; h < kHeads; ++h)
    for (int64_t i = 0; i < kQueries; ++i) {
      const double lse = all.lse.at(h * kQueries + i);
      if (i < kVisibleQueries) {
        ASSERT_TRUE(std::isfinite(lse)) << "query " << i << " head " << h;
        ASSERT_NEAR(lse, visible.lse.at(h * kVisibleQueries + i), kTolerance * std::abs(lse));
      } else {
        ASSERT_EQ(lse, kMinusInfinity) << "query " << i << " head " << h;
      }
      for (int64_t d = 0; d < kHeadDim; ++d) {
        const int64_t element = (i * kHeads + h) * kHeadDim + d;
        const double out = all.out.at(element), dq = all.dq.at(element);
        if (i < kVisibleQueries) {
          ASSERT_NEAR(out, visible.out.at(element), kTolerance);
          ASSERT_NEAR(dq, visible.dq.at(element), kTolerance);
        } else {
          ASSERT_EQ(out, 0.0) << "query " << i << " head " << h;
          ASSERT_EQ(dq, 0.0) << "query " << i << " head " << h;
        }
      }
    }
  for (int64_t i = 0; i < all.dk.numel(); ++i) {
    ASSERT_NEAR(all.dk.at(i), visible.dk.at(i), kTolerance) << "dk element " << i;
    ASSERT_NEAR(all.dv.at(i), visible.dv.at(i), kTolerance) << "dv element " << i;
  }
}

/// Whether two host tensors hold the same bytes.
bool same_bits(const HostTensor& a, const HostTensor& b) {
  const TensorView &x = a.view(), &y = b.view();
  return x.numel() == y.numel() && x.dtype == y.dtype &&
         std::memcmp(x.data, y.data, static_cast<std::size_t>(x.numel()) * dtype_size(x.dtype)) == 0;
}

// Every work item of the CPU kernels (a query tile, a key tile) is summed by one thread in a fixed
// order, so neither the thread count nor which thread takes which item changes a bit.
TEST(NumericsDeterminism, SameBitsAtAnyThreadCount) {
  // Several query and key tiles per block (128 and 256 rows), GQA, a window that hides some.
  AttentionCase c;
  c.batch = 2, c.sequence = 700, c.heads = 4, c.kv_heads = 2, c.head_dim = 32;
  c.options = AttentionOptions{true, 300, -1};
  c.decomposition = Decomposition::zigzag;
  const AttentionProblem problem(c);
  const ReferenceResult reference = problem.reference(true);
  const int threads_before = omp_get_max_threads();
  std::vector<AttentionOutputs> runs;
  for (int threads : {1, 3, 3}) {
    omp_set_num_threads(threads);
    runs.push_back(run_blocks(problem, reference));
  }
  omp_set_num_threads(threads_before);
  if (HasFatalFailure()) return;
  for (std::size_t run = 1; run < runs.size(); ++run) {
    EXPECT_TRUE(same_bits(runs[run].out, runs[0].out)) << "out, run " << run;
    EXPECT_TRUE(same_bits(runs[run].lse, runs[0].lse)) << "lse, run " << run;
    EXPECT_TRUE(same_bits(runs[run].dq, runs[0].dq)) << "dq, run " << run;
    EXPECT_TRUE(same_bits(runs[run].dk, runs[0].dk)) << "dk, run " << run;
    EXPECT_TRUE(same_bits(runs[run].dv, runs[0].dv)) << "dv, run " << run;
  }
}

// Window bounds up to the largest int64 are valid; one at least as long as the sequence hides
// nothing, whatever the arithmetic on positions and bounds does near the int64 limits.
TEST(NumericsWindowBounds, BeyondTheSequenceEqualsUnbounded) {
  const int64_t huge = std::numeric_limits<int64_t>::max();
  AttentionCase c;
  c.batch = 1, c.sequence = 300, c.heads = 2, c.kv_heads = 1, c.head_dim = 16;
  c.decomposition = Decomposition::zigzag;
  for (const AttentionOptions& options : {AttentionOptions{false, huge, huge}, AttentionOptions{true, huge, huge},
                                          AttentionOptions{false, huge - 1, 0}, AttentionOptions{false, 0, huge / 2}}) {
    AttentionOptions unbounded = options;
    if (options.window_left > 0) unbounded.window_left = -1;
    if (options.window_right > 0) unbounded.window_right = -1;
    AttentionCase bounded_case = c, unbounded_case = c;
    bounded_case.options = options;
    unbounded_case.options = unbounded;
    const AttentionProblem bounded(bounded_case), reference_problem(unbounded_case);
    const ReferenceResult reference = reference_problem.reference(true);
    const AttentionOutputs expected = run_blocks(reference_problem, reference);
    const AttentionOutputs actual = run_blocks(bounded, reference);
    if (HasFatalFailure()) return;
    const std::string window = std::to_string(options.window_left) + ", " + std::to_string(options.window_right);
    EXPECT_TRUE(same_bits(actual.out, expected.out)) << "window " << window;
    EXPECT_TRUE(same_bits(actual.lse, expected.lse)) << "window " << window;
    EXPECT_TRUE(same_bits(actual.dq, expected.dq)) << "window " << window;
    EXPECT_TRUE(same_bits(actual.dk, expected.dk)) << "window " << window;
    EXPECT_TRUE(same_bits(actual.dv, expected.dv)) << "window " << window;
  }
}

// Two partials of lse 1e4 and 1e4 - 12: the merged lse rounds to 1e4 (the gap, 6e-6, is below
// half an ulp of 1e4), and weights taken against the rounded lse would sum to 1 + 6e-6. Taken
// against the gap they sum to 1, so that merging equal outputs gives them back.
TEST(NumericsMerge, WeightsSumToOneAtLargeLse) {
  constexpr int64_t kRows = 8, kHeadDim = 4;
  auto kernels = make_cpu_block_kernels();
  HostTensor running_out(DType::f32, {1, kRows, 1, kHeadDim}), partial_out(DType::f32, {1, kRows, 1, kHeadDim});
  HostTensor running_lse(DType::f32, {1, 1, kRows}), partial_lse(DType::f32, {1, 1, kRows});
  running_out.fill(3.0);
  partial_out.fill(3.0);
  for (int64_t i = 0; i < kRows; ++i) {
    // Either side the larger one.
    running_lse.set(i, i % 2 == 0 ? 1e4 : 1e4 - 12);
    partial_lse.set(i, i % 2 == 0 ? 1e4 - 12 : 1e4);
  }
  kernels->merge(partial_out.view(), partial_lse.view(), running_out.view(), running_lse.view());
  for (int64_t i = 0; i < running_out.numel(); ++i) EXPECT_NEAR(running_out.at(i), 3.0, 3.0 * 1e-6) << "element " << i;
  for (int64_t i = 0; i < kRows; ++i) EXPECT_EQ(running_lse.at(i), 1e4f) << "row " << i;
}

}  // namespace
}  // namespace spattn::test
