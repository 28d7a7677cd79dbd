// The integer plan of the own Hopper kernels (src/kernels/hopper/key_tile_plan.hpp), checked on the
// CPU against AttentionMask::visible: which key tiles a query tile visits (every visible pair in
// one, no tile without one), which of them skip the element-wise mask (only full tiles that every
// valid row sees whole), the element-wise mask itself, and the backward's mirror, which query
// tiles a key tile visits, for random positions, lengths, masks and tile sizes, and for bounds
// near 2^62.

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <string>

#include "kernels/hopper/key_tile_plan.hpp"
#include "spattn/attention_options.hpp"

namespace spattn::cuda::hopper {
namespace {

struct PlanCase {
  int64_t q_position;  // of the query tile's row 0
  int valid_rows;      // rows of the query tile that exist (the rest are padding)
  int tile_rows;
  KeyRange keys;
  AttentionMask mask;
  int tile;  // keys per key tile

  std::string describe() const {
    return "query tile at " + std::to_string(q_position) + " (" + std::to_string(valid_rows) + " of " +
           std::to_string(tile_rows) + " rows), keys " + std::to_string(keys.length) + " at " +
           std::to_string(keys.position) + ", mask (" + std::to_string(mask.left) + ", " + std::to_string(mask.right) +
           "), key tiles of " + std::to_string(tile);
  }
};

void check_plan(const PlanCase& c) {
  SCOPED_TRACE(c.describe());
  const QueryRows rows{c.q_position, c.q_position + c.valid_rows - 1};
  const TileSpan span = visible_key_tiles(rows, c.keys, c.mask.left, c.mask.right, c.tile);
  const int tiles = static_cast<int>((c.keys.length + c.tile - 1) / c.tile);
  ASSERT_GE(span.begin, 0);
  ASSERT_LE(span.end, tiles);
  for (int key_tile = 0; key_tile < tiles; ++key_tile) {
    const int64_t first_key = c.keys.position + int64_t{key_tile} * c.tile;
    bool any_visible = false, all_visible = true;
    for (int r = 0; r < c.valid_rows; ++r)
      for (int column = 0; column < c.tile; ++column) {
        const bool in_segment = first_key + column < c.keys.position + c.keys.length;
        const bool visible = in_segment && c.mask.visible(c.q_position + r, first_key + column);
        any_visible |= visible;
        all_visible &= visible;
      }
    const bool visited = key_tile >= span.begin && key_tile < span.end;
    ASSERT_EQ(visited, any_visible) << "key tile " << key_tile;
    if (!visited) continue;
    if (!key_tile_needs_mask(rows, c.keys, key_tile, c.mask.left, c.mask.right, c.tile)) {
      ASSERT_TRUE(all_visible) << "key tile " << key_tile << " is left unmasked but some pair in it is hidden";
    }
    const TileMask mask = tile_mask(c.q_position, c.keys, key_tile, c.mask.left, c.mask.right, c.tile);
    for (int r = 0; r < c.tile_rows; ++r)  // padding rows too: they must never read past the segment
      for (int column = 0; column < c.tile; ++column) {
        const bool in_segment = first_key + column < c.keys.position + c.keys.length;
        ASSERT_EQ(mask.visible(r, column), in_segment && c.mask.visible(c.q_position + r, first_key + column))
            << "key tile " << key_tile << ", row " << r << ", column " << column;
      }
  }
}

TEST(HopperKeyTilePlan, MatchesTheMaskOnRandomBlocks) {
  std::mt19937_64 generator(17);
  std::uniform_int_distribution<int64_t> position(0, 300), length(1, 90), bound(-1, 60);
  std::uniform_int_distribution<int> tile_choice(0, 2);
  constexpr int kTiles[] = {4, 8, 16};
  for (int trial = 0; trial < 3000; ++trial) {
    const int tile = kTiles[tile_choice(generator)];
    PlanCase c;
    c.tile_rows = tile;
    c.valid_rows = 1 + static_cast<int>(generator() % tile);
    c.q_position = position(generator);
    c.keys = {position(generator), length(generator)};
    c.mask.left = bound(generator);
    c.mask.right = trial % 3 == 0 ? 0 : bound(generator);  // causal-like often
    c.tile = tile;
    check_plan(c);
    if (HasFatalFailure()) return;
  }
}

TEST(HopperKeyTilePlan, BoundsAndPositionsNear2To62) {
  const int64_t far = (int64_t{1} << 62) - 1;
  const int64_t near_end = far - 1000;
  for (const AttentionMask mask : {AttentionMask{far, far}, AttentionMask{far, 0}, AttentionMask{0, far},
                                   AttentionMask{-1, far}, AttentionMask{far, -1}, AttentionMask{3, 5}}) {
    check_plan({near_end, 7, 8, {near_end - 20, 40}, mask, 8});
    check_plan({0, 8, 8, {near_end, 30}, mask, 8});
    check_plan({near_end, 5, 8, {0, 30}, mask, 8});
  }
}

// The backward's side: the query tiles a key tile's CTA visits are exactly those whose valid rows
// see a key of it (AttentionMask::visible), and exactly those whose visible_key_tiles hold the key
// tile, so that the deterministic dQ order (key_tiles_before) counts every add it waits for.
TEST(HopperKeyTilePlan, QueryTilesOfAKeyTileMirrorTheKeyTilesOfAQueryTile) {
  std::mt19937_64 generator(29);
  std::uniform_int_distribution<int64_t> position(0, 300), length(1, 90), bound(-1, 60);
  constexpr int kTiles[] = {4, 8, 16};
  for (int trial = 0; trial < 2000; ++trial) {
    const int query_tile = kTiles[generator() % 3], key_tile_size = kTiles[generator() % 3];
    const int64_t q_position = position(generator), rows = length(generator);
    const KeyRange keys{position(generator), length(generator)};
    const AttentionMask mask{bound(generator), trial % 3 == 0 ? 0 : bound(generator)};
    SCOPED_TRACE("rows " + std::to_string(rows) + " at " + std::to_string(q_position) + " in tiles of " +
                 std::to_string(query_tile) + ", keys " + std::to_string(keys.length) + " at " +
                 std::to_string(keys.position) + " in tiles of " + std::to_string(key_tile_size) + ", mask (" +
                 std::to_string(mask.left) + ", " + std::to_string(mask.right) + ")");
    const int query_tiles = static_cast<int>((rows + query_tile - 1) / query_tile);
    const int key_tiles = static_cast<int>((keys.length + key_tile_size - 1) / key_tile_size);
    for (int key_tile = 0; key_tile < key_tiles; ++key_tile) {
      const TileSpan visited =
          visible_query_tiles(q_position, rows, keys, key_tile, mask.left, mask.right, query_tile, key_tile_size);
      ASSERT_GE(visited.begin, 0);
      ASSERT_LE(visited.end, query_tiles);
      const int64_t first_key = keys.position + int64_t{key_tile} * key_tile_size;
      const int64_t end_key = std::min(first_key + key_tile_size, keys.position + keys.length);
      for (int m = 0; m < query_tiles; ++m) {
        const QueryRows tile_rows{q_position + int64_t{m} * query_tile,
                                  std::min(q_position + int64_t{m + 1} * query_tile, q_position + rows) - 1};
        bool any_visible = false;
        for (int64_t i = tile_rows.first; i <= tile_rows.last; ++i)
          for (int64_t j = first_key; j < end_key; ++j) any_visible |= mask.visible(i, j);
        const bool is_visited = m >= visited.begin && m < visited.end;
        ASSERT_EQ(is_visited, any_visible) << "query tile " << m << ", key tile " << key_tile;
        const TileSpan seen = visible_key_tiles(tile_rows, keys, mask.left, mask.right, key_tile_size);
        ASSERT_EQ(is_visited, key_tile >= seen.begin && key_tile < seen.end)
            << "query tile " << m << ", key tile " << key_tile;
      }
    }
    if (HasFatalFailure()) return;
  }
}

TEST(HopperKeyTilePlan, NoTileWhenNoRowSeesTheSegment) {
  const QueryRows rows{100, 227};
  EXPECT_TRUE(visible_key_tiles(rows, {228, 64}, -1, 0, 128).empty()) << "causal: keys after the last row";
  EXPECT_TRUE(visible_key_tiles(rows, {0, 50}, 49, 0, 128).empty()) << "window 49: keys before the first row's window";
  EXPECT_FALSE(visible_key_tiles(rows, {0, 51}, 50, 0, 128).empty()) << "window 50: key 50 is row 100's first";
}

}  // namespace
}  // namespace spattn::cuda::hopper
