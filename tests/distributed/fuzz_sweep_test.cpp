// A seeded random sweep over (B, S, H, kv_heads, D, strategy, strategy options, causal, window,
// softmax scale, dtype) at the rank count of this run. Every rank draws the same configurations:
// case i comes from its own generator seeded with (SPATTN_FUZZ_SEED, i, ranks), so one case can be
// run alone, and each rank count sees other configurations. Sizes are drawn to fit the strategy
// at this rank count (S a random multiple of the strategy's length unit), and a valid
// configuration must match the fp64 reference with the 2x criterion for out, lse, dq, dk and dv
// (outputs poisoned before the run). About one case in six breaks one rule on purpose (a length
// off the unit, a kv head count that does not divide the heads, a head dim over 256, ...; hamilton
// at 4 or 6 ranks is one by nature), and must fail with an Error on every rank, naming the bad
// value, instead of running.
//
// Rank 0 prints one line per case. To run case 17 of seed 5 alone at 3 ranks:
//   SPATTN_FUZZ_SEED=5 SPATTN_FUZZ_CASE=17 mpirun -np 3 spattn_distributed_tests --gtest_filter='*FuzzSweep*'
// SPATTN_FUZZ_CASES sets how many cases run (scripts/fuzz-sweep.sh runs many at 1 to 8 ranks).

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <limits>
#include <numeric>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "distributed_checks.hpp"
#include "distributed_world.hpp"
#include "strategy_runner.hpp"

namespace spattn {
namespace {

constexpr uint64_t kDefaultSeed = 20261124;
// Sized for CI, where every rank count from 1 to 8 runs this file on two cores: 1-4 s each.
constexpr int kDefaultCases = 100;
// Cap on B x H x S x S x D, which keeps the fp64 reference and the oversubscribed ranks quick.
constexpr double kMaxWork = 1 << 22;
constexpr int64_t kMaxSeq = 320;

// A non-negative integer from the environment, or `fallback` when unset. A malformed value stops
// the run: a sweep silently run with the default would not reproduce what was asked for.
uint64_t environment_count(const char* name, uint64_t fallback) {
  const char* text = std::getenv(name);
  if (text == nullptr || *text == '\0') return fallback;
  char* end = nullptr;
  const unsigned long long value = std::strtoull(text, &end, 10);
  if (*end != '\0' || text[0] == '-') {
    std::fprintf(stderr, "%s=%s is not a non-negative integer\n", name, text);
    std::exit(2);
  }
  return value;
}

uint64_t fuzz_seed() { return environment_count("SPATTN_FUZZ_SEED", kDefaultSeed); }

// The case indices this run covers: [0, SPATTN_FUZZ_CASES), or SPATTN_FUZZ_CASE alone.
std::pair<int, int> case_range() {
  if (std::getenv("SPATTN_FUZZ_CASE") != nullptr) {
    const int only = static_cast<int>(environment_count("SPATTN_FUZZ_CASE", 0));
    return {only, only + 1};
  }
  return {0, static_cast<int>(environment_count("SPATTN_FUZZ_CASES", kDefaultCases))};
}

// Draws from a generator whose output the standard fixes (mt19937_64 seeded through seed_seq),
// reduced with plain modulo, so that every rank, compiler and standard library draws the same.
class Draw {
 public:
  Draw(uint64_t seed, int case_index, int ranks) {
    std::seed_seq words{static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32),
                        static_cast<uint32_t>(case_index), static_cast<uint32_t>(ranks)};
    generator_.seed(words);
  }

  /// Uniform in [low, high].
  int64_t between(int64_t low, int64_t high) {
    return low + static_cast<int64_t>(generator_() % static_cast<uint64_t>(high - low + 1));
  }
  bool chance(int percent) { return between(0, 99) < percent; }
  template <typename T>
  T pick(const std::vector<T>& choices) {
    return choices[static_cast<std::size_t>(between(0, static_cast<int64_t>(choices.size()) - 1))];
  }
  uint64_t seed() { return generator_(); }

 private:
  std::mt19937_64 generator_;
};

std::vector<int> divisors(int n) {
  std::vector<int> result;
  for (int d = 1; d <= n; ++d)
    if (n % d == 0) result.push_back(d);
  return result;
}

struct FuzzCase {
  Algorithm algorithm = Algorithm::ring;
  AttentionShape shape;
  AttentionOptions options;
  StrategyOptions strategy_options;
  uint64_t data_seed = 0;
  std::string broken_rule;        // empty for a valid configuration
  std::string expected_in_error;  // what the Error of an invalid one must say
};

std::string describe(const FuzzCase& fuzz) {
  const AttentionShape& shape = fuzz.shape;
  std::ostringstream text;
  text << algorithm_name(fuzz.algorithm) << " B=" << shape.batch << " S=" << shape.seq << " H=" << shape.heads
       << " HK=" << shape.kv_heads << " D=" << shape.head_dim << " " << dtype_name(shape.dtype)
       << (fuzz.options.causal ? " causal" : "") << " window=(" << fuzz.options.window_left << ","
       << fuzz.options.window_right << ")";
  if (fuzz.options.softmax_scale) text << " scale=" << *fuzz.options.softmax_scale;
  if (fuzz.algorithm == Algorithm::hamilton2) text << " nodes=" << fuzz.strategy_options.nodes;
  if (fuzz.algorithm == Algorithm::usp)
    text << " inner=" << fuzz.strategy_options.inner << " across=" << algorithm_name(fuzz.strategy_options.across);
  return text.str();
}

// USP's Ulysses degree: inner, or for 0 the largest that divides the ranks and both head counts.
int resolved_inner(const FuzzCase& fuzz, int ranks) {
  if (fuzz.strategy_options.inner != 0) return fuzz.strategy_options.inner;
  int largest = 1;
  for (int inner : divisors(ranks))
    if (fuzz.shape.heads % inner == 0 && fuzz.shape.kv_heads % inner == 0) largest = inner;
  return largest;
}

// What S must be a multiple of (the README's table): the layout's chunks (two per rank for
// zigzag layouts, which causal Hamiltonian schemes use) times the ranks, times the slots each
// chunk is cut into by the Hamiltonian schemes (N - 1 for hamilton, m for hamilton2).
int64_t length_unit(const FuzzCase& fuzz, int ranks) {
  const int64_t causal_chunks = fuzz.options.causal ? 2 : 1;
  switch (fuzz.algorithm) {
    case Algorithm::ring:
    case Algorithm::stripe:
    case Algorithm::ulysses: return ranks;
    case Algorithm::zigzag:
    case Algorithm::allgather: return 2 * ranks;
    case Algorithm::hamilton: return causal_chunks * ranks * std::max(1, ranks - 1);
    case Algorithm::hamilton2: {
      const int ranks_per_node = ranks / std::max(1, fuzz.strategy_options.nodes);
      return causal_chunks * ranks * std::max(1, ranks_per_node);
    }
    case Algorithm::usp: {
      const int groups = ranks / resolved_inner(fuzz, ranks);
      const Algorithm across = fuzz.strategy_options.across;
      const int64_t chunks = across == Algorithm::ring ? 1 : across == Algorithm::zigzag ? 2 : causal_chunks;
      const int64_t slots = across == Algorithm::hamilton ? std::max(1, groups - 1) : 1;
      return std::lcm(chunks * ranks, chunks * groups * slots);
    }
  }
  return ranks;
}

// hamilton2's node counts at `ranks`: m = ranks / nodes ranks per node, m even or 1, and at
// least two nodes when a node has more than one rank.
std::vector<int> valid_node_counts(int ranks) {
  std::vector<int> nodes;
  for (int count : divisors(ranks)) {
    const int per_node = ranks / count;
    if ((per_node == 1 || per_node % 2 == 0) && (count > 1 || per_node == 1)) nodes.push_back(count);
  }
  return nodes;
}

// The strategy and its options; heads and kv heads that fit them; B and D; then S as a random
// multiple of the unit under the work cap; then the mask and the scale.
FuzzCase draw_valid(Draw& draw, int ranks) {
  FuzzCase fuzz;
  fuzz.algorithm = draw.pick(all_algorithms());
  int heads_multiple = 1;  // what both head counts must be multiples of
  if (fuzz.algorithm == Algorithm::hamilton2) fuzz.strategy_options.nodes = draw.pick(valid_node_counts(ranks));
  if (fuzz.algorithm == Algorithm::usp) {
    fuzz.strategy_options.across =
        draw.pick(std::vector<Algorithm>{Algorithm::ring, Algorithm::zigzag, Algorithm::hamilton});
    heads_multiple = draw.pick(divisors(ranks));
    fuzz.strategy_options.inner = draw.chance(25) ? 0 : heads_multiple;
  }
  AttentionShape& shape = fuzz.shape;
  shape.kv_heads = heads_multiple * draw.between(1, 3);
  shape.heads = shape.kv_heads * draw.between(1, 3);
  if (fuzz.algorithm == Algorithm::ulysses) {
    shape.heads = ranks * draw.between(1, 2);
    shape.kv_heads = draw.pick(divisors(static_cast<int>(shape.heads)));
  }
  shape.batch = draw.between(1, 2);
  const int head_dim_band = static_cast<int>(draw.between(0, 9));
  shape.head_dim = head_dim_band < 7   ? draw.between(1, 64)
                   : head_dim_band < 9 ? draw.between(65, 128)
                                       : draw.between(129, 256);
  shape.dtype = draw.pick(std::vector<DType>{DType::f32, DType::f16, DType::bf16});
  fuzz.options.causal = draw.chance(50);

  const int64_t unit = length_unit(fuzz, ranks);
  const double work_per_token_pair = static_cast<double>(shape.batch * shape.heads * shape.head_dim);
  const auto longest = static_cast<int64_t>(std::min<double>(kMaxSeq, std::sqrt(kMaxWork / work_per_token_pair)));
  shape.seq = unit * draw.between(1, std::max<int64_t>(1, longest / unit));
  // stripe takes a causal mask or none (a window is one of its broken rules).
  if (fuzz.algorithm != Algorithm::stripe && draw.chance(60)) {
    fuzz.options.window_left = draw.chance(25) ? -1 : draw.between(0, shape.seq);
    fuzz.options.window_right = draw.chance(25) ? -1 : draw.between(0, shape.seq);
  }
  // Within 1/4 to 2 times the default 1/sqrt(D): far larger scales make logits of ~100, whose
  // fp32 round-off alone can put any two blockings of the sum more than 2x apart.
  if (draw.chance(20)) {
    const double multiple = static_cast<double>(draw.between(25, 200)) / 100.0;
    fuzz.options.softmax_scale = static_cast<float>(multiple / std::sqrt(static_cast<double>(shape.head_dim)));
  }
  fuzz.data_seed = draw.seed();
  return fuzz;
}

// Breaks one rule that applies to `fuzz` at `ranks`, and says what the Error must contain.
void break_one_rule(Draw& draw, int ranks, FuzzCase& fuzz) {
  AttentionShape& shape = fuzz.shape;
  std::vector<std::function<void()>> breaks;
  const int64_t unit = length_unit(fuzz, ranks);
  if (unit > 1) {
    breaks.push_back([&] {
      shape.seq += draw.between(1, unit - 1);
      fuzz.broken_rule = "S off the length unit " + std::to_string(unit);
      fuzz.expected_in_error = "sequence length " + std::to_string(shape.seq);
    });
  }
  // Changing the head counts of usp would break its inner degree's rule instead.
  if (fuzz.algorithm != Algorithm::usp) {
    breaks.push_back([&] {
      shape.kv_heads = shape.heads + 1;
      fuzz.broken_rule = "kv_heads does not divide heads";
      fuzz.expected_in_error = "heads (" + std::to_string(shape.heads) + ") must be divisible by kv_heads (" +
                               std::to_string(shape.kv_heads) + ")";
    });
  }
  breaks.push_back([&] {
    shape.head_dim = draw.chance(20) ? 0 : draw.between(257, 320);
    fuzz.broken_rule = "head_dim outside 1..256";
    fuzz.expected_in_error = "head_dim " + std::to_string(shape.head_dim) + " is not supported; allowed: 1 to 256";
  });
  breaks.push_back([&] {
    shape.batch = 0;
    fuzz.broken_rule = "batch 0";
    fuzz.expected_in_error = "batch must be at least 1, got 0";
  });
  breaks.push_back([&] {
    (draw.chance(50) ? fuzz.options.window_left : fuzz.options.window_right) = -draw.between(2, 1000);
    fuzz.broken_rule = "window side below -1";
    fuzz.expected_in_error = "window (" + std::to_string(fuzz.options.window_left) + ", " +
                             std::to_string(fuzz.options.window_right) + ") is not allowed";
  });
  breaks.push_back([&] {
    fuzz.options.softmax_scale = draw.pick(std::vector<float>{0.0f, -0.5f, std::numeric_limits<float>::infinity(),
                                                              std::numeric_limits<float>::quiet_NaN()});
    fuzz.broken_rule = "softmax scale not finite and > 0";
    fuzz.expected_in_error = "softmax scale";
  });
  if (fuzz.algorithm == Algorithm::ulysses && ranks > 1) {
    breaks.push_back([&] {
      shape.heads = ranks * draw.between(0, 2) + draw.between(1, ranks - 1);
      shape.kv_heads = 1;
      fuzz.broken_rule = "heads not divisible by ranks";
      fuzz.expected_in_error =
          "heads (" + std::to_string(shape.heads) + ") must be divisible by ranks (" + std::to_string(ranks) + ")";
    });
  }
  if (fuzz.algorithm == Algorithm::stripe) {
    breaks.push_back([&] {
      fuzz.options.window_left = draw.between(0, shape.seq);
      fuzz.broken_rule = "a sliding window on stripe";
      fuzz.expected_in_error = "stripe takes a causal mask or none, not a sliding window (window_left " +
                               std::to_string(fuzz.options.window_left);
    });
  }
  if (fuzz.algorithm == Algorithm::usp) {
    breaks.push_back([&] {
      // An inner that does not divide the ranks, or one that does but not the kv heads.
      const std::vector<int> ranks_divisors = divisors(ranks);
      const int inner = ranks > 1 && draw.chance(50) ? ranks_divisors[1] : ranks + static_cast<int>(draw.between(1, 3));
      fuzz.strategy_options.inner = inner;
      shape.kv_heads = inner * draw.between(1, 2) + 1;
      shape.heads = shape.kv_heads * draw.between(1, 2);
      fuzz.broken_rule = "usp inner does not divide ranks, heads and kv_heads";
      fuzz.expected_in_error = "usp: inner (" + std::to_string(inner) + ") must be at least 1";
    });
    breaks.push_back([&] {
      fuzz.strategy_options.across = draw.pick(std::vector<Algorithm>{Algorithm::ulysses, Algorithm::allgather,
                                                                      Algorithm::usp, Algorithm::hamilton2});
      fuzz.broken_rule = "usp across a strategy that is not a rotation";
      fuzz.expected_in_error = "not '" + algorithm_name(fuzz.strategy_options.across) + "'";
    });
  }
  if (fuzz.algorithm == Algorithm::hamilton2) {
    breaks.push_back([&] {
      const int nodes =
          static_cast<int>(draw.chance(30) ? draw.between(-1, 0) : ranks + draw.between(1, 3));
      fuzz.strategy_options.nodes = nodes;
      fuzz.broken_rule = "hamilton2 nodes do not divide the ranks";
      fuzz.expected_in_error = "a multiple of the nodes (" + std::to_string(nodes) + ")";
    });
    std::vector<int> odd_node_sizes;
    for (int nodes : divisors(ranks))
      if (ranks / nodes > 1 && ranks / nodes % 2 == 1) odd_node_sizes.push_back(nodes);
    if (!odd_node_sizes.empty()) {
      breaks.push_back([&, odd_node_sizes] {
        fuzz.strategy_options.nodes = draw.pick(odd_node_sizes);
        fuzz.broken_rule = "hamilton2 nodes of an odd rank count";
        fuzz.expected_in_error = "needs an even number of ranks per node, or 1 (got " +
                                 std::to_string(ranks / fuzz.strategy_options.nodes) + ")";
      });
    }
    if (ranks % 2 == 0) {
      breaks.push_back([&] {
        fuzz.strategy_options.nodes = 1;
        fuzz.broken_rule = "hamilton2 on one node of several ranks";
        fuzz.expected_in_error = "needs at least 2 nodes";
      });
    }
  }
  breaks[static_cast<std::size_t>(draw.between(0, static_cast<int64_t>(breaks.size()) - 1))]();
}

// Hamiltonian cycles do not exist at 4 and 6 ranks (or groups, for usp across hamilton): such a
// draw is invalid by nature.
void mark_missing_decomposition(FuzzCase& fuzz, int ranks) {
  int cycle_ranks = 0;
  if (fuzz.algorithm == Algorithm::hamilton) cycle_ranks = ranks;
  if (fuzz.algorithm == Algorithm::usp && fuzz.strategy_options.across == Algorithm::hamilton)
    cycle_ranks = ranks / resolved_inner(fuzz, ranks);
  if (cycle_ranks != 4 && cycle_ranks != 6) return;
  fuzz.broken_rule = "no Hamiltonian decomposition at " + std::to_string(cycle_ranks) + " ranks";
  fuzz.expected_in_error =
      "no decomposition of the complete directed graph on " + std::to_string(cycle_ranks) + " ranks";
}

FuzzCase draw_case(uint64_t seed, int case_index, int ranks) {
  Draw draw(seed, case_index, ranks);
  FuzzCase fuzz = draw_valid(draw, ranks);
  mark_missing_decomposition(fuzz, ranks);
  if (fuzz.broken_rule.empty() && draw.chance(17)) break_one_rule(draw, ranks, fuzz);
  return fuzz;
}

// Every rank's Error must contain `expected` (rank 0's says what is wrong, the others that rank 0
// rejected the call, and why): each rank learns every rank's verdict, so that all fail together.
void expect_every_rank_reports(const std::string& error, const std::string& expected) {
  const int mine = error.find(expected) != std::string::npos ? 1 : 0;
  std::vector<int> everyone(static_cast<std::size_t>(world().size()));
  world().host_all_gather(&mine, everyone.data(), sizeof mine);
  for (int rank = 0; rank < world().size(); ++rank)
    EXPECT_EQ(everyone[static_cast<std::size_t>(rank)], 1)
        << "rank " << rank << "'s Error lacks \"" << expected << "\"; this rank's Error: \"" << error << "\"";
}

class FuzzSweep : public ::testing::TestWithParam<int> {};

TEST_P(FuzzSweep, MatchesReferenceOrFailsClearly) {
  const uint64_t seed = fuzz_seed();
  const int ranks = world().size();
  const FuzzCase fuzz = draw_case(seed, GetParam(), ranks);
  const std::string config = "seed " + std::to_string(seed) + " case " + std::to_string(GetParam()) + " at " +
                             std::to_string(ranks) + " ranks: " + describe(fuzz);
  if (world().rank() == 0) {
    const std::string verdict = fuzz.broken_rule.empty() ? "valid" : "invalid: " + fuzz.broken_rule;
    std::printf("fuzz %s -> %s\n", config.c_str(), verdict.c_str());
    std::fflush(stdout);
  }
  SCOPED_TRACE(config);
  const AttentionProblem problem = random_problem(fuzz.shape, fuzz.options, fuzz.data_seed, /*backward=*/true);
  if (fuzz.broken_rule.empty()) {
    // An Error here is agreed on by every rank (plans validate collectively), so none hangs.
    EXPECT_EQ(error_of([&] { expect_accurate(fuzz.algorithm, problem, fuzz.strategy_options); }), "");
    return;
  }
  const std::string error =
      error_of([&] { run_strategy(world(), fuzz.algorithm, problem, 0, 1, false, fuzz.strategy_options); });
  expect_every_rank_reports(error, fuzz.expected_in_error);
}

INSTANTIATE_TEST_SUITE_P(Seeded, FuzzSweep, ::testing::Range(case_range().first, case_range().second));

}  // namespace
}  // namespace spattn
