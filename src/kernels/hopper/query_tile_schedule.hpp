#pragma once
// The persistent schedule of the own forward: which query tiles each CTA visits, in which order.
// Used by the kernel's producer (which hands each tile to its consumers) and unit-tested on the
// CPU.
//
// Static (no mask, or no counter at hand): CTA c visits tiles in groups of `tiles_per_visit`:
// visit c first, then every grid-th visit. The tiles of one (batch, head) are consecutive, so that
// the CTAs running at once share keys and values in L2, and within a head they go longest first.
// With two tiles per visit a head's tiles go longest, shortest, second longest, second shortest,
// ...: under a causal-like mask the work of a tile grows with its position, so every visit holds
// about the same work.
//
// Dynamic (a mask makes the tiles' work unequal; `counter` set): a counter in device memory hands
// out the tiles in schedule order, each CTA taking the next when it is done with its last. The
// heads go in sections, longest tiles first across the heads of a section: a section is small
// enough that its keys and values stay in L2 (the CTAs at work share them) and holds at least two
// tiles per multiprocessor, so that the last section's short tiles fill the end evenly. The one
// section smaller than the others goes first.

#include <cstdint>

#include "kernels/hopper/key_tile_plan.hpp"  // SPATTN_HOST_DEVICE

namespace spattn::cuda::hopper {

struct QueryTileSchedule {
  int query_tiles;      // per (batch, head)
  int total_tiles;      // query_tiles * heads * batch
  int tiles_per_visit;  // static: 1 or 2
  bool last_tiles_first;  // the last query tiles see the most keys (causal-like masks)
  // Dynamic: [0] the next tile to hand out, [1] the CTAs that found none left (the last of them
  // resets both to 0 for the next launch on the stream); nullptr: static.
  unsigned* counter = nullptr;
  int section_heads = 1;  // dynamic: (batch, head) pairs per section

  /// Two tiles per visit only where every CTA still gets a visit: fewer tiles run one per CTA.
  SPATTN_HOST_DEVICE static int visit_size(int total_tiles, int multiprocessors) {
    return total_tiles >= 2 * multiprocessors ? 2 : 1;
  }
  /// The dynamic order's section: (batch, head) pairs whose keys and values (`kv_bytes_per_head`,
  /// shared by the heads of a GQA group) take at most `l2_budget`, and at least two tiles per
  /// multiprocessor.
  static int section_size(int query_tiles, int heads_total, int multiprocessors, int64_t kv_bytes_per_head,
                          int64_t l2_budget) {
    const int64_t fitting = kv_bytes_per_head > 0 ? l2_budget / kv_bytes_per_head : heads_total;
    const int64_t filling = (2 * int64_t{multiprocessors} + query_tiles - 1) / query_tiles;
    const int64_t size = fitting > filling ? fitting : filling;
    return static_cast<int>(size < heads_total ? size : heads_total);
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

  /// Where schedule position `tile` is: its (batch, head) pair (head fastest) and its m block.
  struct Place {
    int head_and_batch;
    int m_block;
  };
  SPATTN_HOST_DEVICE Place place(int tile) const {
    int rank;  // 0: the tile with the most keys
    int head_and_batch;
    if (counter == nullptr) {
      const int index_in_head = tile % query_tiles;
      rank = tiles_per_visit == 1 ? index_in_head
             : index_in_head % 2 == 0 ? index_in_head / 2
                                      : query_tiles - 1 - index_in_head / 2;
      head_and_batch = tile / query_tiles;
    } else {
      const int heads_total = total_tiles / query_tiles;
      const int sections = (heads_total + section_heads - 1) / section_heads;
      const int first_heads = heads_total - (sections - 1) * section_heads;  // the smaller section
      int section_start = 0, heads = first_heads, within = tile;
      if (tile >= first_heads * query_tiles) {
        const int later = tile - first_heads * query_tiles;
        section_start = first_heads + later / (section_heads * query_tiles) * section_heads;
        heads = section_heads;
        within = later % (section_heads * query_tiles);
      }
      rank = within / heads;
      head_and_batch = section_start + within % heads;
    }
    return {head_and_batch, last_tiles_first ? query_tiles - 1 - rank : rank};
  }
};

}  // namespace spattn::cuda::hopper
