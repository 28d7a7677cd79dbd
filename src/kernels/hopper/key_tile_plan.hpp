#pragma once
// Which key tiles a tile of query rows visits, and how each visited tile is masked: the integer
// half of the own forward, shared by its producer (which loads the tiles), its consumers (which
// mask them) and the host (which orders the query tiles longest first), and unit-tested on the
// CPU against AttentionMask::visible. Positions are global and below 2^62 (AttentionMask), so
// the sums of two stay within int64; everything local to one tile fits in int32.

#include <cstdint>

#if defined(__CUDACC__)
#define SPATTN_HOST_DEVICE __host__ __device__
#else
#define SPATTN_HOST_DEVICE
#endif

namespace spattn::cuda::hopper {

/// The global positions of the first and last valid query row of a query tile.
struct QueryRows {
  int64_t first;
  int64_t last;
};

/// A segment of keys: `length` tokens from global position `position`.
struct KeyRange {
  int64_t position;
  int64_t length;
};

/// Tiles [begin, end): key tiles of a segment, numbered from its first key, or query tiles of a
/// block, numbered from its first row.
struct TileSpan {
  int begin = 0;
  int end = 0;
  SPATTN_HOST_DEVICE bool empty() const { return begin >= end; }
};

/// The key tiles of `keys` that hold a key visible to some row of `rows` under the mask
/// i - left <= j <= i + right (a negative bound is unbounded): the tiles between the lowest key
/// the first row sees and the highest key the last row sees. Tiles outside are never loaded.
SPATTN_HOST_DEVICE inline TileSpan visible_key_tiles(QueryRows rows, KeyRange keys, int64_t left, int64_t right,
                                                     int tile) {
  int64_t lowest = keys.position, highest = keys.position + keys.length - 1;
  if (left >= 0 && rows.first - left > lowest) lowest = rows.first - left;
  if (right >= 0 && rows.last + right < highest) highest = rows.last + right;
  if (highest < lowest) return {};
  return {static_cast<int>((lowest - keys.position) / tile), static_cast<int>((highest - keys.position) / tile) + 1};
}

/// The query tiles of `rows` query rows from global position `q_position` (tiles of `query_tile`
/// rows) that hold a row seeing a key of key tile `key_tile` of `keys` (tiles of `key_tile_size`
/// keys) under the same mask: the query tiles that the own backward's CTA of that key tile visits.
/// The mirror of visible_key_tiles: query tile m is among them exactly when `key_tile` is among
/// visible_key_tiles of m's valid rows, which the deterministic order of the dQ adds counts on.
SPATTN_HOST_DEVICE inline TileSpan visible_query_tiles(int64_t q_position, int64_t rows, KeyRange keys, int key_tile,
                                                       int64_t left, int64_t right, int query_tile, int key_tile_size) {
  const int64_t first_key = keys.position + int64_t{key_tile} * key_tile_size;
  const int64_t end_of_keys = keys.position + keys.length;
  const int64_t last_key = (first_key + key_tile_size < end_of_keys ? first_key + key_tile_size : end_of_keys) - 1;
  // The rows that see a key of the tile: i + right >= first_key and i - left <= last_key.
  int64_t lowest = q_position, highest = q_position + rows - 1;
  if (right >= 0 && first_key - right > lowest) lowest = first_key - right;
  if (left >= 0 && last_key + left < highest) highest = last_key + left;
  if (highest < lowest) return {};
  return {static_cast<int>((lowest - q_position) / query_tile),
          static_cast<int>((highest - q_position) / query_tile) + 1};
}

/// The element-wise mask of one (query tile, key tile) pair in tile-local coordinates: row r
/// sees column c when c < key_count and r + low <= c <= r + high. Distances beyond the tile
/// are clamped to +-2^30, far past any r - c of a tile and free of int32 overflow.
struct TileMask {
  int low;
  int high;
  int key_count;  // keys of the segment in this tile (columns past it are zero padding)
  SPATTN_HOST_DEVICE bool visible(int row, int column) const {
    return column < key_count && column >= row + low && column <= row + high;
  }
};

/// The mask of key tile `key_tile` of `keys` seen from the query tile whose row 0 sits at global
/// position `first_row` (rows past the query count may be included: their results are never
/// stored). Query i = first_row + r sees key j = k0 + c when j >= i - left, i.e.
/// c >= r + (first_row - k0) - left, and when j <= i + right, i.e. c <= r + (first_row - k0) + right.
SPATTN_HOST_DEVICE inline TileMask tile_mask(int64_t first_row, KeyRange keys, int key_tile, int64_t left,
                                            int64_t right, int tile) {
  constexpr int64_t kFar = int64_t{1} << 30;
  const int64_t first_key = keys.position + int64_t{key_tile} * tile;
  const int64_t offset = first_row - first_key;
  const auto clamp = [](int64_t value) { return static_cast<int>(value < -kFar ? -kFar : value > kFar ? kFar : value); };
  const int64_t keys_here = keys.length - int64_t{key_tile} * tile;
  return {left < 0 ? static_cast<int>(-kFar) : clamp(offset - left),
          right < 0 ? static_cast<int>(kFar) : clamp(offset + right),
          static_cast<int>(keys_here < tile ? keys_here : tile)};
}

/// Whether key tile `key_tile` of `keys` needs the element-wise mask for `rows`: it does unless
/// it is full (no zero padding past the segment's end) and every valid row sees every key in it.
SPATTN_HOST_DEVICE inline bool key_tile_needs_mask(QueryRows rows, KeyRange keys, int key_tile, int64_t left,
                                                  int64_t right, int tile) {
  const int64_t first_key = keys.position + int64_t{key_tile} * tile;
  const int64_t last_key = first_key + tile - 1;
  if (last_key >= keys.position + keys.length) return true;
  const bool all_see_first = left < 0 || first_key >= rows.last - left;
  const bool all_see_last = right < 0 || last_key <= rows.first + right;
  return !(all_see_first && all_see_last);
}

}  // namespace spattn::cuda::hopper
