// The cost model's verdict on a case (can this strategy run it?) against what constructing the
// plan does on these ranks: the same answer for every strategy over a grid of shapes, node counts
// and masks (issue 19, item 6: `spattn plan` refuses exactly what `spattn run` refuses). The
// verdicts agree; the messages agree where the model calls run's own rule (usp's degree,
// all-gather's layout), and elsewhere still say the same thing in other words.

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <sstream>
#include <string>
#include <utility>

#include "distributed_checks.hpp"
#include "distributed_world.hpp"
#include "schedule/cost_model.hpp"
#include "spattn/distributed_attention.hpp"

namespace spattn {
namespace {

TEST(PlannerAgreement, TheModelRefusesExactlyWhatAPlanRefuses) {
  const int ranks = world().size();
  if (ranks < 2) GTEST_SKIP() << "the cost model compares 2 or more ranks";
  const Cluster cluster = sized_cluster(cluster_preset("cpu"), ranks, 0, 0);
  std::ostringstream disagreements;
  int cases = 0;
  for (const Algorithm algorithm : all_algorithms())
    for (const int64_t seq : {24, 48, 60, 84, 112, 7 * ranks})
      for (const auto& [heads, kv_heads] : {std::pair<int64_t, int64_t>{4, 2}, {6, 3}, {8, 8}, {3, 3}, {16, 4}})
        for (const bool causal : {false, true})
          for (const int nodes : {1, 2}) {
            const AttentionShape shape{1, seq, heads, kv_heads, 8, DType::f32};
            StrategyOptions strategy_options;
            strategy_options.nodes = nodes;
            AttentionOptions options;
            options.causal = causal;
            const std::string run =
                error_of([&] { DistributedAttention plan(world(), algorithm, shape, options, strategy_options); });
            const std::string model =
                strategy_cost(cluster, shape, ranks, causal, algorithm, strategy_options).not_applicable;
            ++cases;
            if (run.empty() != model.empty())
              disagreements << "\n" << algorithm_name(algorithm) << " S " << seq << " H " << heads << " HK " << kv_heads
                            << (causal ? " causal" : "") << " nodes " << nodes << ": run '" << run << "', model '"
                            << model << "'";
          }
  EXPECT_EQ(disagreements.str(), "") << "of " << cases << " cases at " << ranks << " ranks";
}

}  // namespace
}  // namespace spattn
