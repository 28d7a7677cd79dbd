#pragma once
// USP's Ulysses degree (StrategyOptions::inner): the rule of which degrees can run and which one
// 0 chooses, stated once for the strategy that runs it (strategies/usp_strategy.cpp) and the
// cost model that predicts it (cost_model.cpp), so that `spattn plan` models exactly what
// `spattn run` runs and refuses what it refuses, with the same message.

#include <string>

#include "spattn/attention_shape.hpp"

namespace spattn {

/// Whether groups of `inner` consecutive ranks can run USP: they split the ranks, the query heads
/// and the kv heads (a kv head split over a group's ranks would need its gradient summed in the
/// input dtype).
bool valid_ulysses_degree(int ranks, int inner, const AttentionShape& shape);

/// The degree USP runs for StrategyOptions::inner: `inner` itself, or for 0 the largest valid
/// degree (1 at least). It knows no nodes: on several nodes a group may span them (pass inner to
/// keep the all-to-all within a node).
int resolved_ulysses_degree(int ranks, int inner, const AttentionShape& shape);

/// "" when `inner` is valid; otherwise the message naming the valid degrees.
std::string ulysses_degree_error(int ranks, int inner, const AttentionShape& shape);

}  // namespace spattn
