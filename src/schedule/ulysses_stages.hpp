#pragma once
// How many stages plain Ulysses cuts each rank's head shard into: the rule stated once for the
// strategy that runs the stages (strategies/ulysses_strategy.cpp) and the cost model that
// predicts their overlap (cost_model.cpp).
//
// A stage is a slice of every rank's query heads with the kv heads they read, moved to head
// shards, attended and moved back on its own: its all-to-alls run while the other stages attend,
// so that only the first stage's inputs and the last stage's results wait for the network.

#include <cstdint>

namespace spattn {

/// The most stages a head shard is cut into. More stages expose less of the all-to-alls but give
/// the block kernels smaller launches, which fill a GPU less well.
constexpr int kMaxUlyssesStages = 2;

/// The stages for `heads_per_rank` query heads per rank, `group_size` query heads per kv head,
/// over `ranks` ranks: the most, up to kMaxUlyssesStages, that cut every rank's query heads into
/// equal slices of whole kv-head groups (so that no kv head travels in two stages); 1 on one rank
/// (nothing travels) and where no such cut exists.
int ulysses_stages(int64_t heads_per_rank, int64_t group_size, int ranks);

}  // namespace spattn
