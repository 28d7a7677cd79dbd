// The order of the own Hopper backward's CTAs (src/kernels/hopper/backward_tile_order.hpp): every
// (key tile, group) once, each group's key tiles in ascending order (the deterministic mode's
// waits), bands that fill the multiprocessors once, and, in a model of the GPU starting CTAs in
// grid order as multiprocessors come free, a causal launch that ends evenly.

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <queue>
#include <utility>
#include <vector>

#include "kernels/hopper/backward_head_parts.hpp"
#include "kernels/hopper/backward_tile_order.hpp"
#include "kernels/hopper/backward_tiles.hpp"
#include "kernels/hopper/key_tile_plan.hpp"

namespace spattn::cuda::hopper {
namespace {

constexpr int kH100Multiprocessors = 132;
constexpr int kQueryTile = backward_query_tile(128);  // the models' head dim

TEST(HopperBackwardTileOrder, ABandIsTheFewestGroupsThatFillTheMultiprocessorsOnce) {
  // 32k causal, GQA 32/8 on one GPU: 256 key tiles a group fill them alone.
  EXPECT_EQ(backward_band_groups(256, 8, kH100Multiprocessors, false), 1);
  // 16k: 128 key tiles of a group fall 4 short.
  EXPECT_EQ(backward_band_groups(128, 8, kH100Multiprocessors, false), 2);
  // 2x 8k zigzag's 4k blocks: 32 key tiles, 8 kv heads in 4 parts; 5 groups would fill them, 8 is
  // the first divisor that does.
  EXPECT_EQ(backward_band_groups(32, 32, kH100Multiprocessors, false), 8);
  // No divisor fills them: one band of all.
  EXPECT_EQ(backward_band_groups(16, 7, kH100Multiprocessors, false), 7);
  EXPECT_EQ(backward_band_groups(1, 1, kH100Multiprocessors, false), 1);
}

TEST(HopperBackwardTileOrder, KeyTilesOfEqualWorkKeepOneBand) {
  EXPECT_EQ(backward_band_groups(32, 32, kH100Multiprocessors, true), 1);
  constexpr int64_t kUnbounded = -1;
  const KeyRange block{0, 4096};
  // Non-causal: every key tile sees every query tile.
  EXPECT_TRUE(key_tiles_see_equal_work(0, 4096, kQueryTile, &block, 1, kUnbounded, kUnbounded));
  // Causal on the diagonal: the first key tile sees all 64 query tiles, the last one.
  EXPECT_FALSE(key_tiles_see_equal_work(0, 4096, kQueryTile, &block, 1, kUnbounded, 0));
  // Causal with every query after every key (a zigzag rank's later chunk against an earlier one),
  // also where the keys end inside a tile.
  EXPECT_TRUE(key_tiles_see_equal_work(8192, 4096, kQueryTile, &block, 1, kUnbounded, 0));
  const KeyRange short_tail{0, 4000};
  EXPECT_TRUE(key_tiles_see_equal_work(8192, 4096, kQueryTile, &short_tail, 1, kUnbounded, 0));
  // Two segments, the second after the queries: its tiles see none.
  const KeyRange segments[] = {{0, 1024}, {16384, 1024}};
  EXPECT_FALSE(key_tiles_see_equal_work(8192, 4096, kQueryTile, segments, 2, kUnbounded, 0));
  // A sliding window of 1024 keys back: the block's last key tiles see fewer query tiles.
  EXPECT_FALSE(key_tiles_see_equal_work(0, 4096, kQueryTile, &block, 1, 1024, 0));
}

TEST(HopperBackwardTileOrder, EveryTileOfEveryGroupOnceAndEachGroupsTilesInAscendingOrder) {
  for (const int key_tiles : {1, 3, 32, 43})
    for (const int groups : {1, 2, 6, 12})
      for (int band = 1; band <= groups; ++band) {
        if (groups % band != 0) continue;
        SCOPED_TRACE(::testing::Message() << key_tiles << " key tiles, " << groups << " groups, bands of " << band);
        std::vector<int> seen(static_cast<std::size_t>(key_tiles * groups), 0);
        std::vector<int> last_tile(static_cast<std::size_t>(groups), -1);
        for (int cta = 0; cta < key_tiles * groups; ++cta) {
          const BackwardTileSlot slot = backward_tile_slot(cta, key_tiles, band);
          ASSERT_GE(slot.key_tile, 0);
          ASSERT_LT(slot.key_tile, key_tiles);
          ASSERT_GE(slot.group, 0);
          ASSERT_LT(slot.group, groups);
          ++seen[static_cast<std::size_t>(slot.group * key_tiles + slot.key_tile)];
          EXPECT_EQ(slot.key_tile, last_tile[static_cast<std::size_t>(slot.group)] + 1) << "cta " << cta;
          last_tile[static_cast<std::size_t>(slot.group)] = slot.key_tile;
        }
        EXPECT_TRUE(std::all_of(seen.begin(), seen.end(), [](int n) { return n == 1; }));
      }
}

TEST(HopperBackwardTileOrder, InsideABandTheKeyTileIsSlowestAndOneGroupABandIsKeyTileFastest) {
  // Bands of 3 groups of 4 key tiles: key tile 0 of groups 0, 1, 2, then key tile 1 of them, ...
  const std::vector<std::pair<int, int>> first_band = {{0, 0}, {0, 1}, {0, 2}, {1, 0}, {1, 1}, {1, 2},
                                                       {2, 0}, {2, 1}, {2, 2}, {3, 0}, {3, 1}, {3, 2}};
  for (int cta = 0; cta < 12; ++cta) {
    const BackwardTileSlot slot = backward_tile_slot(cta, 4, 3);
    EXPECT_EQ(slot.key_tile, first_band[static_cast<std::size_t>(cta)].first) << "cta " << cta;
    EXPECT_EQ(slot.group, first_band[static_cast<std::size_t>(cta)].second) << "cta " << cta;
  }
  EXPECT_EQ(backward_tile_slot(12, 4, 3).group, 3);  // the second band
  for (int cta = 0; cta < 4 * 5; ++cta) {
    const BackwardTileSlot slot = backward_tile_slot(cta, 4, 1);
    EXPECT_EQ(slot.key_tile, cta % 4);
    EXPECT_EQ(slot.group, cta / 4);
  }
}

/// When the last CTA ends if each multiprocessor takes the next CTA of the grid as it comes free,
/// in units of steps (one query tile of one head), each CTA costing its steps and `overhead` more.
int64_t dispatch_end(const std::vector<int64_t>& steps_in_grid_order, int multiprocessors, int64_t overhead) {
  std::priority_queue<int64_t, std::vector<int64_t>, std::greater<>> free_at;
  for (int m = 0; m < multiprocessors; ++m) free_at.push(0);
  int64_t end = 0;
  for (const int64_t steps : steps_in_grid_order) {
    const int64_t start = free_at.top();
    free_at.pop();
    free_at.push(start + steps + overhead);
    end = std::max(end, start + steps + overhead);
  }
  return end;
}

/// The multiprocessors' idle share up to the end of a causal square block of `tokens` (GQA 32/8,
/// batch 1) in bands of `band_groups`, with the head parts the host picks.
double causal_idle_share(int64_t tokens, int64_t band_groups_or_zero) {
  const int key_tiles = static_cast<int>((tokens + kBackwardKeyTile - 1) / kBackwardKeyTile);
  const int kv_heads = 8, group = 4;
  const int parts = backward_head_parts(int64_t{key_tiles} * kv_heads, group, kH100Multiprocessors, false);
  const int groups = kv_heads * parts;
  const int band = band_groups_or_zero > 0
                       ? static_cast<int>(band_groups_or_zero)
                       : static_cast<int>(backward_band_groups(key_tiles, groups, kH100Multiprocessors, false));
  std::vector<int64_t> steps;
  int64_t total = 0;
  constexpr int64_t kOverhead = 3;  // a CTA's K and V load and dK, dV adds, about three steps
  for (int cta = 0; cta < key_tiles * groups; ++cta) {
    const BackwardTileSlot slot = backward_tile_slot(cta, key_tiles, band);
    const TileSpan tiles =
        visible_query_tiles(0, tokens, KeyRange{0, tokens}, slot.key_tile, -1, 0, kQueryTile, kBackwardKeyTile);
    steps.push_back(int64_t{tiles.end - tiles.begin} * (group / parts));
    total += steps.back() + kOverhead;
  }
  const int64_t end = dispatch_end(steps, kH100Multiprocessors, kOverhead);
  return 1.0 - static_cast<double>(total) / (static_cast<double>(end) * kH100Multiprocessors);
}

TEST(HopperBackwardTileOrder, ACausalLaunchEndsEvenlyInAModelOfTheDispatch) {
  for (const int64_t tokens : {4096, 8192, 16384}) {
    SCOPED_TRACE(::testing::Message() << tokens << " tokens, causal, GQA 32/8");
    const double key_tile_fastest = causal_idle_share(tokens, 1), banded = causal_idle_share(tokens, 0);
    EXPECT_LT(banded, 0.012);  // 80-row tiles: 1.1% at 4k
    EXPECT_LE(banded, key_tile_fastest);
    if (tokens <= 8192) {
      EXPECT_GT(key_tile_fastest, 0.08);  // what the bands are for
    }
  }
}

}  // namespace
}  // namespace spattn::cuda::hopper
