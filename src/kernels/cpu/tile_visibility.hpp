#pragma once
// Which parts of a (query tile x key tile) score matrix the mask leaves visible, in global
// positions, so that tile loops visit only tiles with a visible score.

#include <algorithm>
#include <cstdint>
#include <limits>

#include "spattn/attention_options.hpp"

namespace spattn::cpu {

/// A half-open range [begin, end) of local row indices.
struct RowRange {
  int64_t begin = 0;
  int64_t end = 0;
};

/// The local keys of a segment (key 0 at global `key_position`, `key_count` keys) that some
/// query at global positions [query_begin, query_end) sees.
inline RowRange visible_keys(const AttentionMask& mask, int64_t query_begin, int64_t query_end,
                             int64_t key_position, int64_t key_count) {
  // Query i sees [i - left, i + right]; over the query range: [begin - left, end - 1 + right].
  const int64_t first = mask.first_visible_key(query_begin) - key_position;
  const int64_t last = mask.last_visible_key(query_end - 1) - key_position;
  const RowRange range{std::max<int64_t>(first, 0), std::min<int64_t>(last + 1, key_count)};
  return range.begin < range.end ? range : RowRange{};
}

/// The tiles of `tile_rows` rows, counted from row 0 of `count` rows, that hold any row of `range`:
/// from the first one's start to the last one's end. Forward and backward cut a block's scores
/// into these same tiles, so that each score comes from the same product in both and the
/// backward's exp(s - lse) matches the forward's lse to the bit: at scores of 1e4 an ulp is 1e-3,
/// which a product of another shape (another BLAS path) may add to a score.
inline RowRange whole_tiles(const RowRange& range, int64_t tile_rows, int64_t count) {
  if (range.begin >= range.end) return range;
  const int64_t end = (range.end + tile_rows - 1) / tile_rows * tile_rows;
  return {range.begin / tile_rows * tile_rows, std::min(end, count)};
}

/// The local queries (query 0 at global `query_position`, `query_count` queries) that see some
/// key at global positions [key_begin, key_end).
inline RowRange visible_queries(const AttentionMask& mask, int64_t key_begin, int64_t key_end,
                                int64_t query_position, int64_t query_count) {
  // Key j is seen by queries i with j - right <= i <= j + left.
  const int64_t first = mask.right < 0 ? 0 : key_begin - mask.right - query_position;
  const int64_t last = mask.left < 0 ? query_count - 1 : key_end - 1 + mask.left - query_position;
  const RowRange range{std::max<int64_t>(first, 0), std::min<int64_t>(last + 1, query_count)};
  return range.begin < range.end ? range : RowRange{};
}

/// Sets the masked scores of a tile to -inf: score (i, j) is query query_position + i against
/// key key_position + j.
inline void mask_score_tile(const AttentionMask& mask, int64_t query_position, int64_t rows,
                            int64_t key_position, int64_t columns,
                            float* scores,  // (rows, columns)
                            int64_t score_stride) {
  constexpr float kMinusInfinity = -std::numeric_limits<float>::infinity();
  for (int64_t i = 0; i < rows; ++i) {
    const int64_t query = query_position + i;
    const int64_t first = std::clamp<int64_t>(mask.first_visible_key(query) - key_position, 0, columns);
    const int64_t last = std::clamp<int64_t>(mask.last_visible_key(query) + 1 - key_position, first, columns);
    float* row = scores + i * score_stride;
    std::fill(row, row + first, kMinusInfinity);
    std::fill(row + last, row + columns, kMinusInfinity);
  }
}

}  // namespace spattn::cpu
