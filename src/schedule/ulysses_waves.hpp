#pragma once
// How Ulysses moves heads: the query heads of each rank's head shard, the kv heads they read, and
// the waves in which they move, stated once for the strategy that runs them
// (strategies/ulysses_strategy.cpp) and the cost model that predicts them (cost_model.cpp).
//
// A wave is the same slice of every rank's query heads, moved to head shards, attended and moved
// back on its own, so that one wave's attention overlaps the next wave's inputs and the last
// wave's results. A kv head travels with the first of a rank's waves that reads it, and its
// gradients with the last.

#include <cstdint>
#include <vector>

namespace spattn {

/// Heads [first, first + count), in the call's global head indices.
struct HeadRange {
  int64_t first = 0;
  int64_t count = 0;
};

/// The kv heads that `query_heads` read when every `group_size` consecutive query heads share one
/// kv head.
HeadRange kv_heads_read(const HeadRange& query_heads, int64_t group_size);

/// One wave, per rank of the all-to-all.
struct UlyssesWave {
  std::vector<HeadRange> query_of;        ///< the rank's query heads in this wave
  std::vector<HeadRange> kv_arriving_of;  ///< the kv heads its query heads read first in this wave
  std::vector<HeadRange> kv_leaving_of;   ///< the kv heads its query heads read last in this wave
  /// The most kv heads any rank's block carries: every block of an all-to-all has one size.
  int64_t most_kv_arriving() const;
  int64_t most_kv_leaving() const;
};

/// Waves per call of Ulysses over `ranks` ranks for `heads` query heads and `kv_heads` kv heads:
/// more hide more of the all-to-alls behind attention, but each is a kernel call per head group and
/// block with a grid of fewer heads. The most, up to 4, that divide the heads of a head shard and
/// move no more kv heads than one wave would (where a kv head straddles ranks, waves of different
/// ranks may carry it at different times, and every block has room for the most any rank carries).
int64_t ulysses_wave_count(int64_t heads, int64_t kv_heads, int ranks);

/// The `waves` waves (a divisor of heads / ranks) of Ulysses over `ranks` ranks, in the order they
/// move, for `heads` query heads (a multiple of ranks) and `kv_heads` kv heads (a divisor of heads):
/// rank r's head shard holds query heads [r H/N, (r+1) H/N).
std::vector<UlyssesWave> plan_ulysses_waves(int64_t heads, int64_t kv_heads, int ranks, int64_t waves);

}  // namespace spattn
