#pragma once
// The static persistent schedule of the own forward: which query tiles each CTA visits, in which
// order. Shared by the kernel's producer and consumers (which must walk the same sequence) and
// unit-tested on the CPU.
//
// CTA c visits tiles in groups of `tiles_per_visit`: visit c first, then every grid-th visit.
// The tiles of one (batch, head) are consecutive, so that the CTAs running at once share keys
// and values in L2, and within a head they go longest first. With two tiles per visit a head's
// tiles go longest, shortest, second longest, second shortest, ...: under a causal-like mask the
// work of a tile grows with its position, so every visit holds about the same work and the
// schedule stays balanced without a tile counter in device memory.

#include "kernels/hopper/key_tile_plan.hpp"  // SPATTN_HOST_DEVICE

namespace spattn::cuda::hopper {

struct QueryTileSchedule {
  int query_tiles;      // per (batch, head)
  int total_tiles;      // query_tiles * heads * batch
  int tiles_per_visit;  // 1 or 2
  bool last_tiles_first;  // the last query tiles see the most keys (causal-like masks)

  /// Two tiles per visit only where every CTA still gets a visit: fewer tiles run one per CTA.
  SPATTN_HOST_DEVICE static int visit_size(int total_tiles, int multiprocessors) {
    return total_tiles >= 2 * multiprocessors ? 2 : 1;
  }
  /// CTAs of the launch: one per multiprocessor at most, none without a visit.
  SPATTN_HOST_DEVICE int grid(int multiprocessors) const {
    const int visits = (total_tiles + tiles_per_visit - 1) / tiles_per_visit;
    return visits < multiprocessors ? visits : multiprocessors;
  }
  SPATTN_HOST_DEVICE int first_tile(int cta) const { return cta * tiles_per_visit; }
  SPATTN_HOST_DEVICE int next_tile(int tile, int grid) const {
    const int visit = tile / tiles_per_visit;
    return tile + 1 < (visit + 1) * tiles_per_visit ? tile + 1 : (visit + grid) * tiles_per_visit;
  }
  /// The query tile (m block) of schedule position `tile` within its (batch, head).
  SPATTN_HOST_DEVICE int m_block(int tile) const {
    const int index_in_head = tile % query_tiles;
    const int rank = tiles_per_visit == 1     ? index_in_head  // rank 0: the tile with the most keys
                     : index_in_head % 2 == 0 ? index_in_head / 2
                                              : query_tiles - 1 - index_in_head / 2;
    return last_tiles_first ? query_tiles - 1 - rank : rank;
  }
  /// head * batch index (head fastest) of schedule position `tile`.
  SPATTN_HOST_DEVICE int head_and_batch(int tile) const { return tile / query_tiles; }
};

}  // namespace spattn::cuda::hopper
