#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "kernels/cpu/block_checks.hpp"
#include "kernels/cpu/cpu_kernels.hpp"
#include "kernels/cpu/row_tile.hpp"
#include "kernels/cpu/tile_visibility.hpp"
#include "kernels/cpu/vector_exp.hpp"

// Two passes, each owning what it writes so that no two threads add into the same rows:
//   pass 1 over (batch, kv head, key tile) accumulates dk and dv over every query of the group,
//   pass 2 over (batch, head, query tile) accumulates dq over every key.
// Both recompute P and dS tile by tile (no (Sq, Sk) matrix exists), so the backward costs 14
// tile-products of FLOP instead of 10; in exchange it scales to any thread count without
// per-thread copies of dk, dv or atomics.

namespace spattn::cpu {
namespace {

constexpr int64_t kQueryTileRows = 128;
constexpr int64_t kKeyTileRows = 256;
constexpr float kMinusInfinity = -std::numeric_limits<float>::infinity();

/// One thread's buffers for one (query tile, key tile) pair and the tile accumulators.
struct BackwardScratch {
  explicit BackwardScratch(int64_t head_dim)
      : query(kQueryTileRows * head_dim),
        out_gradient(kQueryTileRows * head_dim),
        key(kKeyTileRows * head_dim),
        value(kKeyTileRows * head_dim),
        lse(kQueryTileRows),
        delta(kQueryTileRows),
        probabilities(kQueryTileRows * kKeyTileRows),
        score_gradient(kQueryTileRows * kKeyTileRows),
        first_gradient(std::max(kQueryTileRows, kKeyTileRows) * head_dim),
        second_gradient(kKeyTileRows * head_dim) {}

  std::vector<float> query;           // (kQueryTileRows, D) converted q rows
  std::vector<float> out_gradient;    // (kQueryTileRows, D) converted dout rows
  std::vector<float> key;             // (kKeyTileRows, D) converted k rows
  std::vector<float> value;           // (kKeyTileRows, D) converted v rows
  std::vector<float> lse;             // (kQueryTileRows)
  std::vector<float> delta;           // (kQueryTileRows)
  std::vector<float> probabilities;   // (kQueryTileRows, kKeyTileRows) P
  std::vector<float> score_gradient;  // (kQueryTileRows, kKeyTileRows) dP, then dS
  std::vector<float> first_gradient;  // (rows, D): dk of a key tile in pass 1, dq in pass 2
  std::vector<float> second_gradient; // (kKeyTileRows, D): dv of a key tile in pass 1
};

/// A query tile's rows of q and dout with their lse and delta, ready for tile products.
struct QueryTile {
  int64_t row_begin = 0;
  int64_t rows = 0;
  int64_t position = 0;  // global position of the tile's first row
  RowTile query{};
  RowTile out_gradient{};
};

QueryTile load_query_tile(const BackwardBlock& block, int64_t batch, int64_t head, int64_t row_begin,
                          int64_t rows, BackwardScratch& scratch) {
  QueryTile tile;
  tile.row_begin = row_begin;
  tile.rows = rows;
  tile.position = block.q_position + row_begin;
  tile.query = load_row_tile(block.q, batch, row_begin, rows, head, scratch.query.data());
  tile.out_gradient = load_row_tile(block.dout, batch, row_begin, rows, head, scratch.out_gradient.data());
  load_row_statistics(block.lse, batch, head, row_begin, rows, scratch.lse.data());
  load_row_statistics(block.delta, batch, head, row_begin, rows, scratch.delta.data());
  return tile;
}

/// P and dS of one (query tile, key tile) pair into scratch.probabilities and
/// scratch.score_gradient (row stride kKeyTileRows). Rows whose final lse is -inf saw no key
/// anywhere: their P and dS are 0.
void probabilities_and_score_gradient(const BackwardBlock& block, const QueryTile& queries, const RowTile& key,
                                      const RowTile& value, int64_t key_position, int64_t columns,
                                      int64_t head_dim, BackwardScratch& scratch) {
  const int64_t rows = queries.rows;
  float* probabilities = scratch.probabilities.data();
  float* score_gradient = scratch.score_gradient.data();
  // S = scale * Q K^T    (rows, columns)
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, columns, head_dim, block.scale, queries.query.data,
              queries.query.row_stride, key.data, key.row_stride, 0.0f, probabilities, kKeyTileRows);
  if (!block.mask.all_visible(queries.position, queries.position + rows, key_position, key_position + columns))
    mask_score_tile(block.mask, queries.position, rows, key_position, columns, probabilities, kKeyTileRows);
  // dP = dO V^T    (rows, columns)
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, columns, head_dim, 1.0f, queries.out_gradient.data,
              queries.out_gradient.row_stride, value.data, value.row_stride, 0.0f, score_gradient, kKeyTileRows);
  for (int64_t i = 0; i < rows; ++i) {
    float* probability_row = probabilities + i * kKeyTileRows;
    float* gradient_row = score_gradient + i * kKeyTileRows;
    const float lse = scratch.lse[i];
    const float delta = scratch.delta[i];
    if (lse == kMinusInfinity) {
      std::fill(probability_row, probability_row + columns, 0.0f);
      std::fill(gradient_row, gradient_row + columns, 0.0f);
      continue;
    }
    // P = exp(S - lse) ;  dS = P * (dP - delta)
#pragma omp simd
    for (int64_t j = 0; j < columns; ++j) {
      probability_row[j] = exp_vectorizable(probability_row[j] - lse);
      gradient_row[j] = probability_row[j] * (gradient_row[j] - delta);
    }
  }
}

/// A key tile of one segment: its global position and size.
struct KeyTile {
  const KvGradSegment* segment;
  int64_t key_begin;
  int64_t columns;
};

std::vector<KeyTile> key_tiles(const BackwardBlock& block) {
  std::vector<KeyTile> tiles;
  for (const KvGradSegment& segment : block.segments)
    for (int64_t key_begin = 0; key_begin < segment.kv.k.size(1); key_begin += kKeyTileRows)
      tiles.push_back({&segment, key_begin, std::min(kKeyTileRows, segment.kv.k.size(1) - key_begin)});
  return tiles;
}

/// Pass 1: dk += scale dS^T Q and dv += P^T dO of one key tile over every query head of its
/// kv head and every query that sees it.
void key_tile_gradients(const BackwardBlock& block, const BlockShape& shape, int64_t batch, int64_t kv_head,
                        const KeyTile& tile, BackwardScratch& scratch) {
  const int64_t head_dim = shape.head_dim;
  const KvSegment& segment = tile.segment->kv;
  const int64_t key_position = segment.position + tile.key_begin;
  const RowRange queries = whole_tiles(
      visible_queries(block.mask, key_position, key_position + tile.columns, block.q_position, shape.query_rows),
      kQueryTileRows, shape.query_rows);
  if (queries.begin >= queries.end) return;
  const RowTile key = load_row_tile(segment.k, batch, tile.key_begin, tile.columns, kv_head, scratch.key.data());
  const RowTile value = load_row_tile(segment.v, batch, tile.key_begin, tile.columns, kv_head, scratch.value.data());
  float* key_gradient = scratch.first_gradient.data();    // (columns, D)
  float* value_gradient = scratch.second_gradient.data();  // (columns, D)
  std::fill(key_gradient, key_gradient + tile.columns * head_dim, 0.0f);
  std::fill(value_gradient, value_gradient + tile.columns * head_dim, 0.0f);

  const int64_t group = shape.heads_per_kv_head();
  for (int64_t head = kv_head * group; head < (kv_head + 1) * group; ++head) {
    for (int64_t row_begin = queries.begin; row_begin < queries.end; row_begin += kQueryTileRows) {
      const int64_t rows = std::min(kQueryTileRows, queries.end - row_begin);
      const int64_t query_position = block.q_position + row_begin;
      if (!block.mask.any_visible(query_position, query_position + rows, key_position, key_position + tile.columns))
        continue;
      const QueryTile query_tile = load_query_tile(block, batch, head, row_begin, rows, scratch);
      probabilities_and_score_gradient(block, query_tile, key, value, key_position, tile.columns, head_dim, scratch);
      // dV += P^T dO    (columns, D)
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, tile.columns, head_dim, rows, 1.0f,
                  scratch.probabilities.data(), kKeyTileRows, query_tile.out_gradient.data,
                  query_tile.out_gradient.row_stride, 1.0f, value_gradient, head_dim);
      // dK += scale * dS^T Q    (columns, D)
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, tile.columns, head_dim, rows, block.scale,
                  scratch.score_gradient.data(), kKeyTileRows, query_tile.query.data, query_tile.query.row_stride,
                  1.0f, key_gradient, head_dim);
    }
  }
  accumulate_row_tile(key_gradient, tile.columns, tile.segment->dk, batch, tile.key_begin, kv_head);
  accumulate_row_tile(value_gradient, tile.columns, tile.segment->dv, batch, tile.key_begin, kv_head);
}

/// Pass 2: dq += scale dS K of one query tile over every key it sees.
void query_tile_gradient(const BackwardBlock& block, const BlockShape& shape, int64_t batch, int64_t head,
                         int64_t row_begin, BackwardScratch& scratch) {
  const int64_t head_dim = shape.head_dim;
  const int64_t rows = std::min(kQueryTileRows, shape.query_rows - row_begin);
  const int64_t kv_head = head / shape.heads_per_kv_head();
  const QueryTile query_tile = load_query_tile(block, batch, head, row_begin, rows, scratch);
  float* query_gradient = scratch.first_gradient.data();  // (rows, D)
  std::fill(query_gradient, query_gradient + rows * head_dim, 0.0f);
  bool any_key = false;
  for (const KvGradSegment& gradient_segment : block.segments) {
    const KvSegment& segment = gradient_segment.kv;
    const RowRange keys = whole_tiles(
        visible_keys(block.mask, query_tile.position, query_tile.position + rows, segment.position, segment.k.size(1)),
        kKeyTileRows, segment.k.size(1));
    for (int64_t key_begin = keys.begin; key_begin < keys.end; key_begin += kKeyTileRows) {
      const int64_t columns = std::min(kKeyTileRows, keys.end - key_begin);
      const int64_t key_position = segment.position + key_begin;
      if (!block.mask.any_visible(query_tile.position, query_tile.position + rows, key_position,
                                  key_position + columns))
        continue;
      const RowTile key = load_row_tile(segment.k, batch, key_begin, columns, kv_head, scratch.key.data());
      const RowTile value = load_row_tile(segment.v, batch, key_begin, columns, kv_head, scratch.value.data());
      probabilities_and_score_gradient(block, query_tile, key, value, key_position, columns, head_dim, scratch);
      // dQ += scale * dS K    (rows, D)
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, head_dim, columns, block.scale,
                  scratch.score_gradient.data(), kKeyTileRows, key.data, key.row_stride, 1.0f, query_gradient,
                  head_dim);
      any_key = true;
    }
  }
  if (any_key) accumulate_row_tile(query_gradient, rows, block.dq, batch, row_begin, head);
}

}  // namespace

void attention_backward(const BackwardBlock& block) {
  const BlockShape shape = check_backward_block(block);
  const std::vector<KeyTile> tiles = key_tiles(block);
  const int64_t key_items = shape.batch * shape.kv_heads * static_cast<int64_t>(tiles.size());
  const int64_t query_tiles = (shape.query_rows + kQueryTileRows - 1) / kQueryTileRows;
  const int64_t query_items = shape.batch * shape.heads * query_tiles;
#pragma omp parallel
  {
    BackwardScratch scratch(shape.head_dim);
    // Dynamic: under causal or window masks tiles differ greatly in visible scores. The passes
    // write disjoint tensors, so threads done with pass 1 start pass 2 without a barrier.
#pragma omp for schedule(dynamic) nowait
    for (int64_t item = 0; item < key_items; ++item) {
      const KeyTile& tile = tiles[static_cast<std::size_t>(item % static_cast<int64_t>(tiles.size()))];
      const int64_t kv_head = (item / static_cast<int64_t>(tiles.size())) % shape.kv_heads;
      const int64_t batch = item / (static_cast<int64_t>(tiles.size()) * shape.kv_heads);
      key_tile_gradients(block, shape, batch, kv_head, tile, scratch);
    }
#pragma omp for schedule(dynamic)
    for (int64_t item = 0; item < query_items; ++item) {
      const int64_t tile = item % query_tiles;
      const int64_t head = (item / query_tiles) % shape.heads;
      const int64_t batch = item / (query_tiles * shape.heads);
      query_tile_gradient(block, shape, batch, head, tile * kQueryTileRows, scratch);
    }
  }
}

}  // namespace spattn::cpu
