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

namespace spattn::cpu {
namespace {

constexpr int64_t kQueryTileRows = 128;
constexpr int64_t kKeyTileRows = 256;
constexpr float kMinusInfinity = -std::numeric_limits<float>::infinity();

/// One thread's buffers for one query tile.
struct ForwardScratch {
  explicit ForwardScratch(int64_t head_dim)
      : query(kQueryTileRows * head_dim),
        key(kKeyTileRows * head_dim),
        value(kKeyTileRows * head_dim),
        probabilities(kQueryTileRows * kKeyTileRows),
        out(kQueryTileRows * head_dim),
        row_max(kQueryTileRows),
        row_sum(kQueryTileRows) {}

  std::vector<float> query;          // (kQueryTileRows, D) converted q rows
  std::vector<float> key;            // (kKeyTileRows, D) converted k rows
  std::vector<float> value;          // (kKeyTileRows, D) converted v rows
  std::vector<float> probabilities;  // (kQueryTileRows, kKeyTileRows) scores, then exp
  std::vector<float> out;            // (kQueryTileRows, D) unnormalized output
  std::vector<float> row_max;        // (kQueryTileRows) running max m of the scores
  std::vector<float> row_sum;        // (kQueryTileRows) running sum l of exp(score - m)
};

/// Turns a tile of scores into probabilities relative to the updated running max, and rescales
/// the running sum and output of each row to that max.
void online_softmax_update(int64_t rows, int64_t columns, int64_t head_dim, ForwardScratch& scratch) {
  for (int64_t i = 0; i < rows; ++i) {
    float* row = scratch.probabilities.data() + i * kKeyTileRows;
    float tile_max = kMinusInfinity;
#pragma omp simd reduction(max : tile_max)
    for (int64_t j = 0; j < columns; ++j) tile_max = std::max(tile_max, row[j]);
    const float previous_max = scratch.row_max[i];
    const float new_max = std::max(previous_max, tile_max);
    if (new_max == kMinusInfinity) {
      // Nothing visible yet in this row: zero probabilities keep out and l at 0.
      std::fill(row, row + columns, 0.0f);
      continue;
    }
    float tile_sum = 0.0f;
    // p_j = exp(s_j - m')
#pragma omp simd reduction(+ : tile_sum)
    for (int64_t j = 0; j < columns; ++j) {
      row[j] = exp_vectorizable(row[j] - new_max);
      tile_sum += row[j];
    }
    // l' = l exp(m - m') + sum_j p_j ;  o' = o exp(m - m')
    const float correction = exp_vectorizable(previous_max - new_max);
    scratch.row_sum[i] = scratch.row_sum[i] * correction + tile_sum;
    scratch.row_max[i] = new_max;
    if (correction != 1.0f) {
      float* out_row = scratch.out.data() + i * head_dim;
#pragma omp simd
      for (int64_t d = 0; d < head_dim; ++d) out_row[d] *= correction;
    }
  }
}

/// The online softmax state of one query tile before its first key: empty (m = -inf, l = 0,
/// o = 0), or with block.accumulate the running result itself, as m = lse, l = 1, o = out
/// (the state whose result is out and lse); a row whose lse is -inf has none, and its out is not
/// read.
void start_query_tile(const ForwardBlock& block, int64_t batch, int64_t head, int64_t row_begin, int64_t rows,
                      int64_t head_dim, ForwardScratch& scratch) {
  std::fill(scratch.row_max.begin(), scratch.row_max.begin() + rows, kMinusInfinity);
  std::fill(scratch.row_sum.begin(), scratch.row_sum.begin() + rows, 0.0f);
  std::fill(scratch.out.begin(), scratch.out.begin() + rows * head_dim, 0.0f);
  if (!block.accumulate) return;
  const float* lse = static_cast<const float*>(block.lse.element_pointer({batch, head, row_begin, 0}));
  for (int64_t i = 0; i < rows; ++i) {
    const float running_lse = lse[i * block.lse.stride(2)];
    if (running_lse == kMinusInfinity) continue;
    scratch.row_max[i] = running_lse;
    scratch.row_sum[i] = 1.0f;
    const float* out = static_cast<const float*>(block.out.element_pointer({batch, row_begin + i, head, 0}));
    float* out_tile = scratch.out.data() + i * head_dim;
    for (int64_t d = 0; d < head_dim; ++d) out_tile[d] = out[d * block.out.stride(3)];
  }
}

/// out = o / l and lse = m + log(l) for the rows of one query tile; rows that saw no key get
/// out = 0 and lse = -inf.
void write_query_tile(const ForwardBlock& block, int64_t batch, int64_t head, int64_t row_begin,
                      int64_t rows, int64_t head_dim, const ForwardScratch& scratch) {
  float* lse = static_cast<float*>(block.lse.element_pointer({batch, head, row_begin, 0}));
  for (int64_t i = 0; i < rows; ++i) {
    const float row_sum = scratch.row_sum[i];
    const bool empty = row_sum == 0.0f;
    const float inverse_sum = empty ? 0.0f : 1.0f / row_sum;
    float* out = static_cast<float*>(block.out.element_pointer({batch, row_begin + i, head, 0}));
    const int64_t stride = block.out.stride(3);
    const float* out_tile = scratch.out.data() + i * head_dim;
    for (int64_t d = 0; d < head_dim; ++d) out[d * stride] = out_tile[d] * inverse_sum;
    lse[i * block.lse.stride(2)] = empty ? kMinusInfinity : scratch.row_max[i] + std::log(row_sum);
  }
}

void forward_query_tile(const ForwardBlock& block, const BlockShape& shape, int64_t batch,
                        int64_t head, int64_t row_begin, ForwardScratch& scratch) {
  const int64_t head_dim = shape.head_dim;
  const int64_t rows = std::min(kQueryTileRows, shape.query_rows - row_begin);
  const int64_t kv_head = head / shape.heads_per_kv_head();
  const int64_t query_begin = block.q_position + row_begin;
  const int64_t query_end = query_begin + rows;
  const RowTile query = load_row_tile(block.q, batch, row_begin, rows, head, scratch.query.data());
  start_query_tile(block, batch, head, row_begin, rows, head_dim, scratch);

  for (const KvSegment& segment : block.segments) {
    const RowRange keys =
        whole_tiles(visible_keys(block.mask, query_begin, query_end, segment.position, segment.k.size(1)), kKeyTileRows,
                    segment.k.size(1));
    for (int64_t key_begin = keys.begin; key_begin < keys.end; key_begin += kKeyTileRows) {
      const int64_t columns = std::min(kKeyTileRows, keys.end - key_begin);
      const int64_t key_position = segment.position + key_begin;
      if (!block.mask.any_visible(query_begin, query_end, key_position, key_position + columns)) continue;
      const RowTile key = load_row_tile(segment.k, batch, key_begin, columns, kv_head, scratch.key.data());
      const RowTile value = load_row_tile(segment.v, batch, key_begin, columns, kv_head, scratch.value.data());
      // S = scale * Q K^T    (rows, columns)
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, columns, head_dim, block.scale, query.data,
                  query.row_stride, key.data, key.row_stride, 0.0f, scratch.probabilities.data(), kKeyTileRows);
      if (!block.mask.all_visible(query_begin, query_end, key_position, key_position + columns))
        mask_score_tile(block.mask, query_begin, rows, key_position, columns, scratch.probabilities.data(),
                        kKeyTileRows);
      online_softmax_update(rows, columns, head_dim, scratch);
      // O += P V    (rows, D)
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, head_dim, columns, 1.0f,
                  scratch.probabilities.data(), kKeyTileRows, value.data, value.row_stride, 1.0f,
                  scratch.out.data(), head_dim);
    }
  }
  write_query_tile(block, batch, head, row_begin, rows, head_dim, scratch);
}

}  // namespace

void attention_forward(const ForwardBlock& block) {
  const BlockShape shape = check_forward_block(block);
  const int64_t query_tiles = (shape.query_rows + kQueryTileRows - 1) / kQueryTileRows;
  const int64_t work_items = shape.batch * shape.heads * query_tiles;
#pragma omp parallel if (work_items > 1)
  {
    ForwardScratch scratch(shape.head_dim);
    // Dynamic: under causal or window masks query tiles differ greatly in visible keys.
#pragma omp for schedule(dynamic)
    for (int64_t item = 0; item < work_items; ++item) {
      const int64_t tile = item % query_tiles;
      const int64_t head = (item / query_tiles) % shape.heads;
      const int64_t batch = item / (query_tiles * shape.heads);
      forward_query_tile(block, shape, batch, head, tile * kQueryTileRows, scratch);
    }
  }
}

}  // namespace spattn::cpu
