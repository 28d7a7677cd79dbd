// The cost model's verdict on a case (can this strategy run it, and if not, why?) against what
// constructing the plan does on these ranks: the same answer in the same words for every strategy
// over a grid of shapes, node counts, usp schemes and masks, windows included (issue 19, item 6:
// `spattn plan` refuses exactly what `spattn run` refuses), since both decide with
// schedule/strategy_rules.hpp.

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "distributed_checks.hpp"
#include "distributed_world.hpp"
#include "spattn/cost_model.hpp"
#include "spattn/distributed_attention.hpp"

namespace spattn {
namespace {

// Masks of the grid: none, causal, and sliding windows (which change no strategy's verdict: the
// cost model takes none, and run must agree).
struct Mask {
  bool causal;
  int64_t window_left;
  int64_t window_right;
};
constexpr Mask kMasks[] = {{false, -1, -1}, {true, -1, -1}, {false, 5, 0}, {false, 3, 2}, {true, 4, -1}};

// The strategy options worth varying for `algorithm`: hamilton2's node count, usp's degree and
// scheme across its groups.
std::vector<StrategyOptions> option_variants(Algorithm algorithm) {
  const auto options = [](int nodes, int inner, Algorithm across) {
    StrategyOptions variant;
    variant.nodes = nodes;
    variant.inner = inner;
    variant.across = across;
    return variant;
  };
  if (algorithm == Algorithm::hamilton2)
    return {options(1, 0, Algorithm::zigzag), options(2, 0, Algorithm::zigzag), options(3, 0, Algorithm::zigzag)};
  if (algorithm == Algorithm::usp)
    return {options(1, 0, Algorithm::zigzag), options(1, 0, Algorithm::ring), options(1, 0, Algorithm::hamilton),
            options(1, 2, Algorithm::zigzag), options(1, 3, Algorithm::hamilton), options(1, 2, Algorithm::ulysses)};
  return {StrategyOptions{}};
}

TEST(PlannerAgreement, TheModelRefusesExactlyWhatAPlanRefuses) {
  const int ranks = world().size();
  const Cluster cluster = sized_cluster(cluster_preset("cpu"), ranks, 0, 0);
  std::ostringstream disagreements;
  int cases = 0;
  for (const Algorithm algorithm : all_algorithms())
    for (const int64_t seq : {24, 48, 60, 84, 112, 7 * ranks})
      for (const auto& [heads, kv_heads] : {std::pair<int64_t, int64_t>{4, 2}, {6, 3}, {8, 8}, {3, 3}, {16, 4}})
        for (const Mask& mask : kMasks)
          for (const StrategyOptions& strategy_options : option_variants(algorithm)) {
            const AttentionShape shape{1, seq, heads, kv_heads, 8, DType::f32};
            const bool causal = mask.causal;
            AttentionOptions options;
            options.causal = causal;
            options.window_left = mask.window_left;
            options.window_right = mask.window_right;
            // Run's errors carry the library's "spattn: " prefix and, on the ranks that learn the
            // verdict from another, "rank R rejected the call: "; the model's reason is bare.
            std::string run =
                error_of([&] { DistributedAttention plan(world(), algorithm, shape, options, strategy_options); });
            if (run.rfind("spattn: ", 0) == 0) run.erase(0, 8);
            const std::string relayed = " rejected the call: ";
            if (run.rfind("rank ", 0) == 0 && run.find(relayed) != std::string::npos)
              run.erase(0, run.find(relayed) + relayed.size());
            const std::string model =
                strategy_cost(cluster, shape, ranks, options, algorithm, strategy_options).not_applicable;
            ++cases;
            if (run != model)
              disagreements << "\n" << algorithm_name(algorithm) << " S " << seq << " H " << heads << " HK " << kv_heads
                            << (causal ? " causal" : "") << " window " << mask.window_left << ","
                            << mask.window_right << " nodes " << strategy_options.nodes << " inner "
                            << strategy_options.inner << " across " << algorithm_name(strategy_options.across)
                            << ": run '" << run << "', model '" << model << "'";
          }
  EXPECT_EQ(disagreements.str(), "") << "of " << cases << " cases at " << ranks << " ranks";
}

}  // namespace
}  // namespace spattn
