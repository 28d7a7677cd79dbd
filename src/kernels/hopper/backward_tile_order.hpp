#pragma once
// The order of the own backward's CTAs in its one-dimensional grid, which the GPU starts about in
// that order as multiprocessors come free. A CTA is a key tile of a group: one part of the GQA
// query heads of one kv head of one batch entry (backward_head_parts.hpp). Two needs pull apart:
// - the CTAs at work at once should share their query rows in L2 (Q and dO read, dq added by the
//   TMA unit): the key tiles of a few groups side by side, not one key tile of every group
//   (kernel-notes 2026-11-27: with the key tile slowest in the grid, a 54% L2 hit rate and
//   1.9 TB/s of DRAM traffic);
// - under the causal mask a group's first key tiles see the most query tiles: a launch ends
//   evenly only if its heaviest CTAs start first. With the key tile fastest, the last group's
//   heaviest tiles started in the launch's last wave (at 4k and 8k causal, GQA 32/8, about 10%
//   of the multiprocessors' time idle at the tail in a model of the dispatch).
// So, where the key tiles' work differs, the groups go in bands, one band after another, each
// enough key tiles to fill the multiprocessors once; inside a band the key tile varies slowest, the
// band's heaviest tiles first. Where every key tile sees as many query tiles (no mask edge crosses
// the block), the order changes only what shares L2, and one band, the key tile fastest, shares
// the most: on an H100 (2026-12-06) bands made 4k and 8k causal 5% faster, 4k non-causal 4% slower.

#include <cstdint>

#include "kernels/hopper/backward_tiles.hpp"
#include "kernels/hopper/key_tile_plan.hpp"  // SPATTN_HOST_DEVICE, visible_query_tiles

namespace spattn::cuda::hopper {

/// Whether every key tile of `segments` sees as many query tiles of `query_tile` of the `rows` rows
/// from global position `q_position` under the mask i - left <= j <= i + right (key_tile_plan.hpp).
inline bool key_tiles_see_equal_work(int64_t q_position, int64_t rows, int query_tile, const KeyRange* segments,
                                     int segment_count, int64_t left, int64_t right) {
  int work = -1;
  for (int index = 0; index < segment_count; ++index) {
    const KeyRange& keys = segments[index];
    for (int64_t tile = 0; tile * kBackwardKeyTile < keys.length; ++tile) {
      const TileSpan tiles = visible_query_tiles(q_position, rows, keys, static_cast<int>(tile), left, right,
                                                 query_tile, kBackwardKeyTile);
      const int tile_work = tiles.empty() ? 0 : tiles.end - tiles.begin;
      if (work >= 0 && tile_work != work) return false;
      work = tile_work;
    }
  }
  return true;
}

/// The groups of a band for a launch of `key_tiles` key tiles (over its segments) of `groups`
/// groups: one where its key tiles see equal work (key_tiles_see_equal_work); else the fewest
/// whose key tiles fill `multiprocessors` once, among the divisors of `groups` (bands of unequal
/// size end unevenly again), all of them where none does.
constexpr int64_t backward_band_groups(int64_t key_tiles, int64_t groups, int multiprocessors, bool equal_work) {
  if (equal_work) return 1;
  for (int64_t band = 1; band < groups; ++band)
    if (groups % band == 0 && band * key_tiles >= multiprocessors) return band;
  return groups;
}

/// A CTA's work in the grid: its key tile among the launch's and its group.
struct BackwardTileSlot {
  int key_tile;
  int group;
};

/// CTA `cta`'s slot in a grid of bands of `band_groups` groups (a divisor of the launch's groups)
/// of `key_tiles` key tiles each. Every group's key tiles come in ascending order, which the
/// deterministic mode needs: a key tile's CTA waits for the CTA of the tile before it to add its
/// dQ, which the GPU has then already started.
SPATTN_HOST_DEVICE inline BackwardTileSlot backward_tile_slot(int cta, int key_tiles, int band_groups) {
  const int band_ctas = key_tiles * band_groups;  // <= the grid's CTAs, < 2^31
  const int band = cta / band_ctas, within = cta % band_ctas;
  return BackwardTileSlot{within / band_groups, band * band_groups + within % band_groups};
}

}  // namespace spattn::cuda::hopper
