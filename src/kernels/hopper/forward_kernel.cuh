#pragma once
// The own attention forward for sm_90a (FlashAttention-3's design, written for spattn's blocks):
// - one CTA per multiprocessor, persistent over query tiles (ordered so that the longest start
//   first; under a mask a counter in device memory hands them out, query_tile_schedule.hpp); the
//   producer publishes each tile to the consumers;
// - warpgroup 0 produces: one thread issues tensor-memory-accelerator (TMA) loads of Q once per
//   query tile, a 64-row slice per consumer warpgroup, and of K and V tiles through a two-stage
//   pipeline of shared memory, for every key tile of every segment that some row of the query
//   tile sees (key_tile_plan.hpp);
// - the other warpgroups consume, 64 query rows each (two at head dim 128, three at 64: tiles of
//   128 or 192 rows): S = Q K^T by wgmma from shared memory, online softmax in fp32 registers,
//   O += P V by wgmma with P from registers; the product of the next key tile is issued before
//   the softmax of the current one, and the warpgroups take turns at issuing products so that
//   one's softmax overlaps the others' matrix work; each warpgroup releases its own slice of Q and
//   takes its next one, so that the turns go on across the edges of query tiles;
// - only key tiles that cross a mask edge or the end of a segment are masked element-wise;
// - the epilogue writes fp32 out and lse, or merges them into the running result (accumulate)
//   with merge_weights, straight from registers: no partial result is ever rounded or stored.

#include <cutlass/arch/barrier.h>
#include <cutlass/arch/reg_reconfig.h>
#include <cutlass/cutlass.h>
#include <cutlass/numeric_conversion.h>
#include <cutlass/numeric_types.h>

#include <algorithm>
#include <cstdint>
#include <cute/tensor.hpp>
#include <cutlass/pipeline/pipeline.hpp>

#include "core/cuda/cuda_check.hpp"
#include "kernels/cuda/merge_weights.cuh"
#include "kernels/hopper/forward_problem.hpp"
#include "kernels/hopper/hopper_support.hpp"
#include "kernels/hopper/key_tile_plan.hpp"
#include "kernels/hopper/online_softmax.cuh"
#include "kernels/hopper/query_tile_schedule.hpp"
#include "kernels/hopper/register_split.hpp"
#include "kernels/hopper/warpgroup_mma.cuh"

namespace spattn::cuda::hopper {

using namespace cute;

template <DType kDType>
using ElementOf = std::conditional_t<kDType == DType::bf16, cutlass::bfloat16_t, cutlass::half_t>;

/// Named barriers (ids past CUTLASS's reserved ones, eight left), one of each kind per consumer warpgroup.
constexpr int kMaxConsumerWarpgroups = 3;
enum class ForwardBarrier : uint32_t {
  // consumer warpgroup -> producer: its slice of Q (and the tile's number) are no longer read
  query_empty_of_first_consumer = 0,
  // its turn to issue matrix products
  turn_of_first_consumer = kMaxConsumerWarpgroups,
};
__host__ __device__ constexpr uint32_t named_barrier(ForwardBarrier kind, int consumer_warpgroup) {
  return uint32_t(kind) + consumer_warpgroup;
}

/// Tile sizes, layouts and copy types of one instantiation.
template <int kHeadDim_, class Element_, int kBlockN_, int kConsumerWarpgroups_ = 2>
struct ForwardTraits {
  using Element = Element_;
  static constexpr int kHeadDim = kHeadDim_;
  // 64 query rows per consumer warpgroup. Three of them (FlashAttention-3's choice at D = 64)
  // keep the tensor cores busy with two warpgroups' products while the third one's softmax runs.
  static constexpr int kConsumerWarpgroups = kConsumerWarpgroups_;
  static constexpr int kSliceRows = 64;  // of Q, per consumer warpgroup
  static constexpr int kBlockM = kSliceRows * kConsumerWarpgroups;
  static constexpr int kBlockN = kBlockN_;  // keys per tile
  static constexpr int kStages = 2;    // K and V tiles in flight
  static constexpr int kConsumerThreads = 128 * kConsumerWarpgroups;
  static constexpr int kThreads = 128 + kConsumerThreads;
  static constexpr int kRowsPerThread = 2;  // of a wgmma accumulator: rows r and r + 8
  // Registers after setmaxnreg: the producer needs few, the consumers take the rest of the 64K.
  static constexpr int kProducerRegisters = kConsumerWarpgroups == 2 ? 24 : 32;
  static constexpr int kConsumerRegisters = kConsumerWarpgroups == 2 ? 240 : 160;
  static_assert(register_split_fits(kProducerRegisters, kConsumerThreads, kConsumerRegisters),
                "the warpgroups' registers exceed what their CTA launches with (register_split.hpp)");
  static_assert(kConsumerWarpgroups <= kMaxConsumerWarpgroups, "named barriers of one kind");

  using TileQK = Shape<Int<kBlockM>, Int<kBlockN>, Int<kHeadDim>>;  // S = Q K^T: (M, N, K = D)
  using TilePV = Shape<Int<kBlockM>, Int<kHeadDim>, Int<kBlockN>>;  // O = P V: (M, N = D, K = keys)
  using ConsumersAlongM = Layout<Shape<Int<kConsumerWarpgroups>, _1, _1>>;
  using MmaQK = decltype(make_tiled_mma(GMMA::ss_op_selector<Element, Element, float, TileQK>(), ConsumersAlongM{}));
  using MmaPV = decltype(make_tiled_mma(
      GMMA::rs_op_selector<Element, Element, float, TilePV, GMMA::Major::K, GMMA::Major::MN>(), ConsumersAlongM{}));

  // Q and K as loaded: rows with head_dim contiguous, 128-byte swizzled (K-major for S = Q K^T).
  // Q is one slice of 64 rows per consumer warpgroup, each slice contiguous: a warpgroup done with
  // its rows of a query tile takes its rows of the next one while the others finish theirs,
  // instead of all of them waiting at the tile's edge for the whole of the next Q.
  using SmemQSlice = decltype(tile_to_shape(GMMA::Layout_K_SW128_Atom<Element>{}, Shape<Int<kSliceRows>, Int<kHeadDim>>{}));
  using SmemQ = decltype(tile_to_shape(SmemQSlice{}, Shape<Int<kBlockM>, Int<kHeadDim>>{}));
  static_assert(SmemQ{}(Int<kSliceRows>{}, _0{}) == cosize_v<SmemQSlice>, "slice w of Q starts at w slices' size");
  using SmemK = decltype(tile_to_shape(GMMA::Layout_K_SW128_Atom<Element>{},
                                       Shape<Int<kBlockN>, Int<kHeadDim>, Int<kStages>>{}));
  // V as loaded too, but read as (head_dim, keys) with head_dim contiguous: MN-major for O = P V.
  // Keys vary fastest between swizzle atoms so that each 64-column half of head_dim is one TMA box.
  using SmemVt = decltype(tile_to_shape(GMMA::Layout_MN_SW128_Atom<Element>{},
                                        Shape<Int<kHeadDim>, Int<kBlockN>, Int<kStages>>{}, Step<_2, _1, _3>{}));

  using GmemShape = Shape<int32_t, int32_t, int32_t, int32_t>;      // (tokens, D, heads, B)
  using GmemStrides = Stride<int64_t, _1, int64_t, int64_t>;        // head_dim contiguous
  using GmemShapeVt = Shape<int32_t, int32_t, int32_t, int32_t>;    // (D, tokens, heads, B)
  using GmemStridesVt = Stride<_1, int64_t, int64_t, int64_t>;
  using GmemTensor = decltype(make_tensor(make_gmem_ptr(static_cast<Element const*>(nullptr)), GmemShape{}, GmemStrides{}));
  using GmemTensorVt =
      decltype(make_tensor(make_gmem_ptr(static_cast<Element const*>(nullptr)), GmemShapeVt{}, GmemStridesVt{}));
  using TmaQ =
      decltype(make_tma_copy(SM90_TMA_LOAD{}, GmemTensor{}, SmemQSlice{}, Shape<Int<kSliceRows>, Int<kHeadDim>>{}, _1{}));
  using TmaK = decltype(make_tma_copy(SM90_TMA_LOAD{}, GmemTensor{}, take<0, 2>(SmemK{}),
                                      Shape<Int<kBlockN>, Int<kHeadDim>>{}, _1{}));
  using TmaV = decltype(make_tma_copy(SM90_TMA_LOAD{}, GmemTensorVt{}, take<0, 2>(SmemVt{}),
                                      Shape<Int<kHeadDim>, Int<kBlockN>>{}, _1{}));

  static constexpr uint32_t kQuerySliceBytes = kSliceRows * kHeadDim * sizeof(Element);
  static constexpr uint32_t kKeyTileBytes = kBlockN * kHeadDim * sizeof(Element);

  using Pipeline = cutlass::PipelineTmaAsync<kStages>;
  using PipelineState = typename Pipeline::PipelineState;

  struct SharedStorage {
    // 1024-byte alignment: the 128-byte swizzle repeats every 8 rows of 128 bytes.
    alignas(1024) Element q[cosize_v<SmemQ>];
    alignas(1024) Element k[cosize_v<SmemK>];
    alignas(1024) Element v[cosize_v<SmemVt>];
    // Per consumer warpgroup: its slice of Q has arrived, and query_tile is published.
    alignas(16) cutlass::arch::ClusterTransactionBarrier query_full[kConsumerWarpgroups];
    int query_tile[kConsumerWarpgroups];  // schedule position of the tile in the slice (total_tiles or more: none left)
    typename Pipeline::SharedStorage k_pipeline;
    typename Pipeline::SharedStorage v_pipeline;
  };
  // The dynamic shared memory's base is only 16-byte aligned: room to align it to 1024.
  static constexpr int kSharedBytes = sizeof(SharedStorage) + 1024;
};

/// Kernel parameters: the launch's problem and the TMA descriptors of its tensors.
template <class Traits>
struct ForwardParams {
  typename Traits::TmaQ tma_q;
  typename Traits::TmaK tma_k[kMaxSegmentsPerLaunch];
  typename Traits::TmaV tma_v[kMaxSegmentsPerLaunch];
  ForwardProblem problem;
  QueryTileSchedule schedule;
};

/// One query tile of the schedule: its rows, head and batch.
struct QueryTile {
  int m_block;
  int head;
  int batch;
  QueryRows rows;  // global positions of its first and last valid row
};

template <class Traits>
__device__ QueryTile query_tile(const ForwardParams<Traits>& params, int linear) {
  const ForwardProblem& problem = params.problem;
  const QueryTileSchedule::Place place = params.schedule.place(linear);
  QueryTile tile;
  tile.m_block = place.m_block;
  tile.head = place.head_and_batch % problem.heads;
  tile.batch = place.head_and_batch / problem.heads;
  const int first_row = tile.m_block * Traits::kBlockM;
  const int valid_rows = min(Traits::kBlockM, problem.rows - first_row);
  tile.rows = {problem.q_position + first_row, problem.q_position + first_row + valid_rows - 1};
  return tile;
}

/// The producer's next schedule position (total_tiles or more: none left), the same in every
/// lane of its warp: the static schedule's, or the counter's next tile (lane 0 takes it).
template <class Traits>
__device__ int next_query_tile(const ForwardParams<Traits>& params, int current) {
  const QueryTileSchedule& schedule = params.schedule;
  if (schedule.counter == nullptr)
    return current < 0 ? schedule.first_tile(blockIdx.x) : schedule.next_tile(current, gridDim.x);
  int next = 0;
  if (threadIdx.x % 32 == 0) {
    next = static_cast<int>(atomicAdd(&schedule.counter[0], 1u));
    // Each CTA takes tiles until it finds none left, then counts itself out; the last one out
    // resets the counters, when no CTA of this launch reads them any more.
    if (next >= schedule.total_tiles && atomicAdd(&schedule.counter[1], 1u) == gridDim.x - 1) {
      atomicExch(&schedule.counter[0], 0u);
      atomicExch(&schedule.counter[1], 0u);
    }
  }
  return __shfl_sync(0xffffffffu, next, 0);
}

/// Walks the key tiles one query tile visits: every visible tile of segment 0, then of segment 1,
/// and so on; the producer and the consumers walk the same sequence.
struct KeyTileCursor {
  int segment = -1;
  int tile = 0;
  int end = 0;

  __device__ KeyRange keys(const ForwardProblem& problem) const {
    return {problem.segments[segment].position, problem.segments[segment].keys};
  }
  /// Moves to the first tile of the next segment that has one; false when none is left.
  template <int kBlockN>
  __device__ bool next_segment(const ForwardProblem& problem, QueryRows rows) {
    while (++segment < problem.num_segments) {
      const TileSpan span = visible_key_tiles(rows, keys(problem), problem.mask_left, problem.mask_right, kBlockN);
      if (!span.empty()) {
        tile = span.begin;
        end = span.end;
        return true;
      }
    }
    return false;
  }
  /// Moves to the next key tile; false when none is left.
  template <int kBlockN>
  __device__ bool advance(const ForwardProblem& problem, QueryRows rows) {
    return ++tile < end || next_segment<kBlockN>(problem, rows);
  }
};

// ---- producer ----------------------------------------------------------------------------------------

template <class Traits>
__device__ void produce(const ForwardParams<Traits>& params, typename Traits::SharedStorage& shared,
                        typename Traits::Pipeline& k_pipeline, typename Traits::Pipeline& v_pipeline) {
  using Pipeline = typename Traits::Pipeline;
  constexpr int kSliceRows = Traits::kSliceRows, kBlockN = Traits::kBlockN, kHeadDim = Traits::kHeadDim;
  const ForwardProblem& problem = params.problem;
  // The whole warp takes part in the named barriers; one thread issues the copies.
  const bool issuing = threadIdx.x == 0;

  Tensor sK = make_tensor(make_smem_ptr(shared.k), typename Traits::SmemK{});
  Tensor sVt = make_tensor(make_smem_ptr(shared.v), typename Traits::SmemVt{});

  const auto load_key_tile = [&](int segment, int tile, int batch, int kv_head, typename Traits::PipelineState state) {
    const ForwardSegment& keys = problem.segments[segment];
    const auto& tma_k = params.tma_k[segment];
    Tensor mK = tma_k.get_tma_tensor(make_shape(keys.keys, kHeadDim, problem.kv_heads, problem.batch))(_, _, kv_head, batch);
    Tensor gK = local_tile(mK, Shape<Int<kBlockN>, Int<kHeadDim>>{}, make_coord(_, _0{}));  // (N, D, tiles)
    auto cta_k = tma_k.get_slice(_0{});
    Tensor tKgK = group_modes<0, 3>(cta_k.partition_S(gK));  // (TMA, tiles)
    Tensor tKsK = group_modes<0, 3>(cta_k.partition_D(sK));  // (TMA, stages)
    k_pipeline.producer_acquire(state);
    // Keys and values are read again by the query tiles of their head that run beside this one:
    // they stay in L2 longer than the queries, which are read once.
    copy(tma_k.with(*k_pipeline.producer_get_barrier(state), 0, TMA::CacheHintSm90::EVICT_LAST), tKgK(_, tile),
         tKsK(_, state.index()));
  };
  const auto load_value_tile = [&](int segment, int tile, int batch, int kv_head, typename Traits::PipelineState state) {
    const ForwardSegment& keys = problem.segments[segment];
    const auto& tma_v = params.tma_v[segment];
    Tensor mVt = tma_v.get_tma_tensor(make_shape(kHeadDim, keys.keys, problem.kv_heads, problem.batch))(_, _, kv_head, batch);
    Tensor gVt = local_tile(mVt, Shape<Int<kHeadDim>, Int<kBlockN>>{}, make_coord(_0{}, _));  // (D, N, tiles)
    auto cta_v = tma_v.get_slice(_0{});
    Tensor tVgV = group_modes<0, 3>(cta_v.partition_S(gVt));  // (TMA, tiles)
    Tensor tVsV = group_modes<0, 3>(cta_v.partition_D(sVt));  // (TMA, stages)
    v_pipeline.producer_acquire(state);
    copy(tma_v.with(*v_pipeline.producer_get_barrier(state), 0, TMA::CacheHintSm90::EVICT_LAST), tVgV(_, tile),
         tVsV(_, state.index()));
  };

  auto cta_q = params.tma_q.get_slice(_0{});
  const auto query_slice_source = [&](const QueryTile& query, int slice) {  // (TMA) of a (64, D) tile in global memory
    Tensor mQ = params.tma_q.get_tma_tensor(make_shape(problem.rows, kHeadDim, problem.heads, problem.batch))(
        _, _, query.head, query.batch);
    return group_modes<0, 3>(cta_q.partition_S(local_tile(
        mQ, Shape<Int<kSliceRows>, Int<kHeadDim>>{}, make_coord(query.m_block * Traits::kConsumerWarpgroups + slice, _0{}))));
  };

  typename Traits::PipelineState write = cutlass::make_producer_start_state<Pipeline>();
  const int total_tiles = params.schedule.total_tiles;
  // Each query tile, and at the end "none left", is published to each consumer warpgroup in
  // shared memory once it is done with its slice of the previous tile's Q: its query_full
  // completes when its slice has arrived (at once for a tile without keys, or for none left).
  for (int linear = next_query_tile(params, -1);;) {
    const bool none_left = linear >= total_tiles;
    // Taken now, so that the counter's latency hides behind this tile.
    const int next = none_left ? linear : next_query_tile(params, linear);
    QueryTile query{};
    KeyTileCursor cursor;
    bool has_keys = false;
    if (!none_left) {
      query = query_tile(params, linear);
      has_keys = cursor.next_segment<kBlockN>(problem, query.rows);
    }
    const int kv_head = query.head / (problem.heads / problem.kv_heads);

    if (has_keys && issuing) load_key_tile(cursor.segment, cursor.tile, query.batch, kv_head, write);
    for (int slice = 0; slice < Traits::kConsumerWarpgroups; ++slice) {
      cutlass::arch::NamedBarrier::sync(128 + 32, named_barrier(ForwardBarrier::query_empty_of_first_consumer, slice));
      if (!issuing) continue;
      shared.query_tile[slice] = linear;  // visible to the consumers through query_full's release
      if (!has_keys) {
        shared.query_full[slice].arrive();
        continue;
      }
      Tensor sQ_slice = make_tensor(make_smem_ptr(shared.q + slice * cosize_v<typename Traits::SmemQSlice>),
                                    typename Traits::SmemQSlice{});
      shared.query_full[slice].arrive_and_expect_tx(Traits::kQuerySliceBytes);
      copy(params.tma_q.with(reinterpret_cast<cutlass::arch::ClusterTransactionBarrier::ValueType&>(shared.query_full[slice]),
                             0, TMA::CacheHintSm90::EVICT_FIRST),
           query_slice_source(query, slice), group_modes<0, 3>(cta_q.partition_D(sQ_slice)));
    }
    // The next query tile's rows into L2 now: its loads, which wait until this tile's last
    // S = Q K^T of each slice, then take an L2 hit instead of a trip to memory.
    if (issuing && has_keys && next < total_tiles) {
      const QueryTile upcoming = query_tile(params, next);
      for (int slice = 0; slice < Traits::kConsumerWarpgroups; ++slice)
        prefetch(params.tma_q, query_slice_source(upcoming, slice));
    }
    if (none_left) break;
    linear = next;
    if (!has_keys) continue;  // the consumers write it empty
    // V of a key tile goes one step after its K: the consumers multiply by V after the softmax
    // of the tile, while the next tile's S = Q K^T runs.
    KeyTileCursor previous = cursor;
    typename Traits::PipelineState previous_stage = write;
    while (cursor.advance<kBlockN>(problem, query.rows)) {
      ++write;
      if (issuing) {
        load_key_tile(cursor.segment, cursor.tile, query.batch, kv_head, write);
        load_value_tile(previous.segment, previous.tile, query.batch, kv_head, previous_stage);
      }
      previous = cursor;
      previous_stage = write;
    }
    if (issuing) load_value_tile(previous.segment, previous.tile, query.batch, kv_head, previous_stage);
    ++write;
  }
}

// ---- consumers ---------------------------------------------------------------------------------------

/// Scores of columns that the mask hides (or that lie past the segment's end) become -inf.
template <class Scores, class Coordinates>
__device__ void apply_tile_mask(Scores& s, const Coordinates& coordinates, TileMask mask) {
  CUTE_UNROLL
  for (int row = 0; row < size<0>(s); ++row) {
    const int r = get<0>(coordinates(row, 0));
    const int lowest = r + mask.low;
    const int highest = min(r + mask.high, mask.key_count - 1);
    CUTE_UNROLL
    for (int column = 0; column < size<1>(s); ++column) {
      const int c = get<1>(coordinates(row, column));
      if (c < lowest || c > highest) s(row, column) = -INFINITY;
    }
  }
}

/// Writes this thread's rows of the tile's result (out = o / sum, lse), or merges them into the
/// running result with accumulate. Rows past the query count are not stored.
template <class Traits, class Output, class Coordinates>
__device__ void store_rows(const ForwardProblem& problem, const QueryTile& query, Output& o,
                           const Coordinates& coordinates, const float (&lse)[Traits::kRowsPerThread],
                           const float (&normalizer)[Traits::kRowsPerThread]) {
  constexpr int kRows = Traits::kRowsPerThread;
  int64_t row_index[kRows];
  bool valid[kRows];
  MergeWeights weights[kRows];
  CUTE_UNROLL
  for (int row = 0; row < kRows; ++row) {
    row_index[row] = int64_t{query.m_block} * Traits::kBlockM + get<0>(coordinates(row, 0));
    valid[row] = row_index[row] < problem.rows;
    weights[row] = {lse[row], 0.0f, normalizer[row]};
    if (problem.accumulate && valid[row]) {
      const float running_lse = problem.lse[query.batch * problem.lse_strides[0] + query.head * problem.lse_strides[1] +
                                            row_index[row] * problem.lse_strides[2]];
      weights[row] = merge_weights(running_lse, lse[row]);
      weights[row].partial *= normalizer[row];
    }
  }
  // The four lanes of a row have read its running lse before one of them overwrites it.
  if (problem.accumulate) __syncwarp();
  const bool writes_lse = threadIdx.x % 4 == 0;
  using Element = typename Traits::Element;
  Element* const final_out = static_cast<Element*>(problem.final_out);
  CUTE_UNROLL
  for (int row = 0; row < kRows; ++row) {
    if (!valid[row]) continue;
    float* out_row = problem.out + query.batch * problem.out_strides[0] + row_index[row] * problem.out_strides[1] +
                     query.head * problem.out_strides[2];
    Element* final_row = final_out + query.batch * problem.final_out_strides[0] +
                         row_index[row] * problem.final_out_strides[1] + query.head * problem.final_out_strides[2];
    // out' = out * running + o * partial (partial includes 1 / sum); a running weight of 0 is
    // not read, so whatever the running output holds (nothing yet, or a row without keys) stays out.
    CUTE_UNROLL
    for (int column = 0; column < size<1>(o); column += 2) {
      const int d = get<1>(coordinates(row, column));
      float2* pair = reinterpret_cast<float2*>(out_row + d);
      float2 value = make_float2(o(row, column) * weights[row].partial, o(row, column + 1) * weights[row].partial);
      if (weights[row].running != 0.0f) {
        const float2 running = *pair;
        value.x = fmaf(running.x, weights[row].running, value.x);
        value.y = fmaf(running.y, weights[row].running, value.y);
      }
      if (final_out == nullptr) {
        *pair = value;
      } else {  // the last block of these rows: rounded once, to the inputs' dtype
        cutlass::NumericArrayConverter<Element, float, 2> round;
        *reinterpret_cast<cutlass::Array<Element, 2>*>(final_row + d) = round(cutlass::Array<float, 2>{value.x, value.y});
      }
    }
    if (writes_lse)
      problem.lse[query.batch * problem.lse_strides[0] + query.head * problem.lse_strides[1] +
                  row_index[row] * problem.lse_strides[2]] = weights[row].lse;
  }
}

template <class Traits>
__device__ void consume(const ForwardParams<Traits>& params, typename Traits::SharedStorage& shared,
                        typename Traits::Pipeline& k_pipeline, typename Traits::Pipeline& v_pipeline) {
  using Element = typename Traits::Element;
  constexpr int kBlockM = Traits::kBlockM, kBlockN = Traits::kBlockN, kHeadDim = Traits::kHeadDim;
  constexpr int kRows = Traits::kRowsPerThread;
  const ForwardProblem& problem = params.problem;
  const int thread = threadIdx.x - 128;  // among the consumers
  const int warpgroup = thread / 128;     // query rows [64 warpgroup, 64 warpgroup + 64)
  using cutlass::arch::NamedBarrier;
  // Turns go round the consumer warpgroups; a turn's barrier joins the one whose turn it is and
  // the one that hands it on.
  const auto turn_barrier = [](int consumer) { return named_barrier(ForwardBarrier::turn_of_first_consumer, consumer); };
  constexpr int kTurnThreads = 2 * 128;
  const int next_warpgroup = (warpgroup + 1) % Traits::kConsumerWarpgroups;

  Tensor sQ = make_tensor(make_smem_ptr(shared.q), typename Traits::SmemQ{});
  Tensor sK = make_tensor(make_smem_ptr(shared.k), typename Traits::SmemK{});
  Tensor sVt = make_tensor(make_smem_ptr(shared.v), typename Traits::SmemVt{});
  typename Traits::MmaQK mma_qk;
  typename Traits::MmaPV mma_pv;
  auto thread_qk = mma_qk.get_thread_slice(thread);
  auto thread_pv = mma_pv.get_thread_slice(thread);
  Tensor tSrQ = thread_qk.partition_fragment_A(sQ);   // descriptors (MMA, MMA_M, MMA_K)
  Tensor tSrK = thread_qk.partition_fragment_B(sK);   // (MMA, MMA_N, MMA_K, stages)
  Tensor tOrV = thread_pv.partition_fragment_B(sVt);  // (MMA, MMA_N, MMA_K, stages)
  // (row, column) in the tile of each accumulator element this thread holds
  Tensor score_coordinates = thread_qk.partition_C(make_identity_tensor(Shape<Int<kBlockM>, Int<kBlockN>>{}));
  Tensor out_coordinates = thread_pv.partition_C(make_identity_tensor(Shape<Int<kBlockM>, Int<kHeadDim>>{}));
  const auto score_rows_columns = make_tensor(score_coordinates.data(), accumulator_rows_columns(score_coordinates.layout()));
  const auto out_rows_columns = make_tensor(out_coordinates.data(), accumulator_rows_columns(out_coordinates.layout()));

  // Its slice of Q is no longer read: the producer may load the next one into it.
  const auto release_query_slice = [&] {
    NamedBarrier::arrive(128 + 32, named_barrier(ForwardBarrier::query_empty_of_first_consumer, warpgroup));
  };
  // The producer may load the first query tile; the first consumer warpgroup takes the first turn.
  release_query_slice();
  if (warpgroup == 0) NamedBarrier::arrive(kTurnThreads, turn_barrier(0));

  typename Traits::PipelineState read;
  for (int published = 0;; ++published) {
    shared.query_full[warpgroup].wait(published % 2);
    // The same in every lane: a shuffle from lane 0 tells the compiler so, and the tile's
    // coordinates stay in uniform registers instead of the 240 that the products need.
    const int linear = __shfl_sync(0xffffffffu, shared.query_tile[warpgroup], 0);
    if (linear >= params.schedule.total_tiles) break;
    const QueryTile query = query_tile(params, linear);
    OnlineSoftmax<kRows> softmax(problem.scale);
    Tensor tOrO = partition_fragment_C(mma_pv, Shape<Int<kBlockM>, Int<kHeadDim>>{});  // (MMA, MMA_M, MMA_N) fp32
    Tensor out = make_tensor(tOrO.data(), accumulator_rows_columns(tOrO.layout()));
    clear(tOrO);
    KeyTileCursor cursor;
    if (!cursor.next_segment<kBlockN>(problem, query.rows)) {
      // No row sees a key here: out 0, lse -inf, or the running result unchanged (converted to
      // final_out when there is one).
      if (!problem.accumulate || problem.final_out != nullptr) {
        float lse[kRows], normalizer[kRows];
        softmax.finish(lse, normalizer);
        store_rows<Traits>(problem, query, out, out_rows_columns, lse, normalizer);
      }
      release_query_slice();
      continue;
    }
    const auto mask_if_needed = [&](auto& scores) {
      const KeyRange keys = cursor.keys(problem);
      if (!key_tile_needs_mask(query.rows, keys, cursor.tile, problem.mask_left, problem.mask_right, kBlockN)) return;
      const TileMask mask = tile_mask(problem.q_position + int64_t{query.m_block} * kBlockM, keys, cursor.tile,
                                      problem.mask_left, problem.mask_right, kBlockN);
      apply_tile_mask(scores, score_rows_columns, mask);
    };

    // The first key tile: S = Q K^T, its softmax, P in registers as the next product's operand.
    Tensor tSrS = partition_fragment_C(mma_qk, Shape<Int<kBlockM>, Int<kBlockN>>{});
    Tensor scores = make_tensor(tSrS.data(), accumulator_rows_columns(tSrS.layout()));
    k_pipeline.consumer_wait(read);
    issue_warpgroup_mma<true>(mma_qk, tSrQ, tSrK(_, _, _, read.index()), tSrS);
    warpgroup_wait<0>();
    k_pipeline.consumer_release(read);
    mask_if_needed(scores);
    softmax.update(scores);
    Tensor tOrP = make_tensor_like<Element>(make_tensor(tSrS.data(), accumulator_as_operand_a(tSrS.layout())));
    const auto probabilities_to_operand = [&]() {
      // fp32 -> 16 bits, two at a time (one conversion instruction per pair)
      Tensor from = recast<cutlass::Array<float, 2>>(tSrS);
      Tensor to = recast<cutlass::Array<Element, 2>>(tOrP);
      cutlass::NumericArrayConverter<Element, float, 2> convert;
      CUTE_UNROLL
      for (int i = 0; i < size(from); ++i) to(i) = convert(from(i));
    };
    probabilities_to_operand();

    // Every further key tile: S of this tile and O += P V of the previous one are issued
    // together; the softmax of this tile runs while O's product finishes.
    typename Traits::PipelineState value_stage = read;
    while (cursor.advance<kBlockN>(problem, query.rows)) {
      ++read;
      NamedBarrier::sync(kTurnThreads, turn_barrier(warpgroup));
      k_pipeline.consumer_wait(read);
      issue_warpgroup_mma<true>(mma_qk, tSrQ, tSrK(_, _, _, read.index()), tSrS);
      softmax.rescale(out);  // by the last update's correction, while S's product runs
      v_pipeline.consumer_wait(value_stage);
      issue_warpgroup_mma<false>(mma_pv, tOrP, tOrV(_, _, _, value_stage.index()), tOrO);
      NamedBarrier::arrive(kTurnThreads, turn_barrier(next_warpgroup));
      warpgroup_wait<1>();  // S is ready; O's product may still run
      k_pipeline.consumer_release(read);
      mask_if_needed(scores);
      softmax.update(scores);
      softmax.end_block_after_update();  // so that the softmax above runs beside O's product
      warpgroup_wait<0>();  // O's product has read P: P's registers may change
      v_pipeline.consumer_release(value_stage);
      probabilities_to_operand();
      value_stage = read;
    }
    release_query_slice();
    softmax.rescale(out);
    v_pipeline.consumer_wait(value_stage);
    issue_warpgroup_mma<false>(mma_pv, tOrP, tOrV(_, _, _, value_stage.index()), tOrO);
    warpgroup_wait<0>();
    v_pipeline.consumer_release(value_stage);
    ++read;

    float lse[kRows], normalizer[kRows];
    softmax.finish(lse, normalizer);
    store_rows<Traits>(problem, query, out, out_rows_columns, lse, normalizer);
  }
}

template <class Traits>
__global__ void __launch_bounds__(Traits::kThreads, 1) forward_kernel(const __grid_constant__ ForwardParams<Traits> params) {
  extern __shared__ char shared_bytes[];
  auto& shared = *reinterpret_cast<typename Traits::SharedStorage*>(
      (reinterpret_cast<uintptr_t>(shared_bytes) + 1023) & ~uintptr_t{1023});
  const int warpgroup = cutlass::canonical_warp_group_idx();

  if (threadIdx.x == 0) {
    cute::prefetch_tma_descriptor(params.tma_q.get_tma_descriptor());
    for (int segment = 0; segment < params.problem.num_segments; ++segment) {
      cute::prefetch_tma_descriptor(params.tma_k[segment].get_tma_descriptor());
      cute::prefetch_tma_descriptor(params.tma_v[segment].get_tma_descriptor());
    }
    for (int slice = 0; slice < Traits::kConsumerWarpgroups; ++slice) shared.query_full[slice].init(1);
  }
  typename Traits::Pipeline::Params pipeline_params;
  pipeline_params.role = warpgroup == 0 ? Traits::Pipeline::ThreadCategory::Producer
                                        : Traits::Pipeline::ThreadCategory::Consumer;
  pipeline_params.is_leader = threadIdx.x == 0;  // the producer's issuing thread
  pipeline_params.num_consumers = Traits::kConsumerThreads;
  pipeline_params.transaction_bytes = Traits::kKeyTileBytes;
  typename Traits::Pipeline k_pipeline(shared.k_pipeline, pipeline_params, Shape<_1, _1, _1>{});
  typename Traits::Pipeline v_pipeline(shared.v_pipeline, pipeline_params, Shape<_1, _1, _1>{});
  __syncthreads();  // barriers initialized before anyone waits on them

  if (warpgroup == 0) {
    // The producer needs few registers: give them to the consumers.
    cutlass::arch::warpgroup_reg_dealloc<Traits::kProducerRegisters>();
    if (threadIdx.x < 32) produce(params, shared, k_pipeline, v_pipeline);
  } else {
    cutlass::arch::warpgroup_reg_alloc<Traits::kConsumerRegisters>();
    consume(params, shared, k_pipeline, v_pipeline);
  }
}

/// The key tiles of `tile_keys` keys that query tile `m_block` of `tile_rows` rows visits, over
/// every segment (with `tile_keys` 1: the keys between the lowest its first row sees and the
/// highest its last row sees).
inline int64_t key_tiles_visited(const ForwardProblem& problem, int m_block, int tile_rows, int tile_keys) {
  const int64_t first_row = int64_t{m_block} * tile_rows;
  const QueryRows rows{problem.q_position + first_row,
                       problem.q_position + first_row + std::min<int64_t>(tile_rows, problem.rows - first_row) - 1};
  int64_t tiles = 0;
  for (int segment = 0; segment < problem.num_segments; ++segment) {
    const TileSpan span = visible_key_tiles(rows, {problem.segments[segment].position, problem.segments[segment].keys},
                                               problem.mask_left, problem.mask_right, tile_keys);
    tiles += span.end - span.begin;
  }
  return tiles;
}

/// Whether the last query tiles see more keys than the first (causal-like masks): they start first.
inline bool last_query_tiles_first(const ForwardProblem& problem, int query_tiles, int tile_rows, int tile_keys) {
  return key_tiles_visited(problem, query_tiles - 1, tile_rows, tile_keys) >
         key_tiles_visited(problem, 0, tile_rows, tile_keys);
}

template <class Traits>
void launch_forward_tiles(const ForwardProblem& problem, int multiprocessors, cudaStream_t stream) {
  using Element = typename Traits::Element;
  constexpr int kHeadDim = Traits::kHeadDim;
  ForwardParams<Traits> params{};
  params.problem = problem;
  const auto rows_tensor = [](const void* data, int32_t tokens, int32_t heads, int32_t batch, const int64_t (&strides)[3]) {
    return make_tensor(make_gmem_ptr(static_cast<Element const*>(data)), make_shape(tokens, int32_t{kHeadDim}, heads, batch),
                       make_stride(strides[1], _1{}, strides[2], strides[0]));
  };
  params.tma_q = make_tma_copy(SM90_TMA_LOAD{}, rows_tensor(problem.q, problem.rows, problem.heads, problem.batch, problem.q_strides),
                               typename Traits::SmemQSlice{}, Shape<Int<Traits::kSliceRows>, Int<kHeadDim>>{}, _1{});
  for (int segment = 0; segment < problem.num_segments; ++segment) {
    const ForwardSegment& keys = problem.segments[segment];
    params.tma_k[segment] =
        make_tma_copy(SM90_TMA_LOAD{}, rows_tensor(keys.k, keys.keys, problem.kv_heads, problem.batch, keys.k_strides),
                      take<0, 2>(typename Traits::SmemK{}), Shape<Int<Traits::kBlockN>, Int<kHeadDim>>{}, _1{});
    const auto values_transposed =
        make_tensor(make_gmem_ptr(static_cast<Element const*>(keys.v)),
                    make_shape(int32_t{kHeadDim}, keys.keys, problem.kv_heads, problem.batch),
                    make_stride(_1{}, keys.v_strides[1], keys.v_strides[2], keys.v_strides[0]));
    params.tma_v[segment] = make_tma_copy(SM90_TMA_LOAD{}, values_transposed, take<0, 2>(typename Traits::SmemVt{}),
                                          Shape<Int<kHeadDim>, Int<Traits::kBlockN>>{}, _1{});
  }
  QueryTileSchedule& schedule = params.schedule;
  schedule.query_tiles = (problem.rows + Traits::kBlockM - 1) / Traits::kBlockM;
  schedule.total_tiles = schedule.query_tiles * problem.heads * problem.batch;
  // A mask makes the tiles' work unequal: a counter hands them out (FlashAttention-3's choice too).
  const bool masked = problem.mask_left >= 0 || problem.mask_right >= 0;
  schedule.counter = masked ? problem.tile_counter : nullptr;
  schedule.tiles_per_visit =
      schedule.counter != nullptr ? 1 : QueryTileSchedule::visit_size(schedule.total_tiles, multiprocessors);
  int64_t keys = 0;
  for (int segment = 0; segment < problem.num_segments; ++segment) keys += problem.segments[segment].keys;
  // K and V of a head, shared by the heads of its GQA group; half of an H100's or H200's 50 MB L2.
  const int64_t kv_bytes_per_head = keys * kHeadDim * 2 * int64_t{sizeof(Element)} / (problem.heads / problem.kv_heads);
  schedule.section_heads = QueryTileSchedule::section_size(schedule.query_tiles, problem.heads * problem.batch,
                                                           multiprocessors, kv_bytes_per_head, int64_t{24} << 20);
  schedule.last_tiles_first = last_query_tiles_first(problem, schedule.query_tiles, Traits::kBlockM, Traits::kBlockN);

  allow_shared_memory<forward_kernel<Traits>>(Traits::kSharedBytes);
  const int grid = schedule.grid(multiprocessors);
  forward_kernel<Traits><<<grid, Traits::kThreads, Traits::kSharedBytes, stream>>>(params);
  SPATTN_CUDA_CHECK_LAUNCH("the own Hopper attention forward");
}

/// Whether a launch at D = 128 takes the long key tiles (176 keys: fewer per row, so less of the
/// softmax's reductions and the pipeline's barriers per key) rather than 128-key tiles (less of
/// each tile that a mask's diagonal cuts is wasted; D = 64 always takes those, launch_forward).
/// Measured on an H100 (bench/kernel-notes.md, v7): long tiles win without a mask at every length
/// and under the causal mask from S = 4k on (16k: 0.95 -> 1.00 of cuDNN); at S = 2k, where a
/// query tile sees 1k keys on average, 128-key tiles win (0.88 against 0.81). Query tiles see a number
/// of keys that grows or falls linearly under a band mask: the mean of the first and last tiles'.
inline bool long_key_tiles(const ForwardProblem& problem) {
  constexpr int64_t kLongTilesFromKeys = 2048;
  if (problem.mask_left < 0 && problem.mask_right < 0) return true;
  const int query_tiles = (problem.rows + kQueryTileRows - 1) / kQueryTileRows;
  const int64_t keys_of_edges =
      key_tiles_visited(problem, 0, kQueryTileRows, 1) + key_tiles_visited(problem, query_tiles - 1, kQueryTileRows, 1);
  return keys_of_edges >= 2 * kLongTilesFromKeys;
}

template <int kHeadDim, DType kDType>
void launch_forward(const ForwardProblem& problem, int multiprocessors, cudaStream_t stream) {
  using Element = ElementOf<kDType>;
  if constexpr (kHeadDim == 64) {
    // Three consumer warpgroups (192 query rows) on 128-key tiles: at 160 registers a thread, the
    // scores, probabilities and output of longer tiles would not fit.
    launch_forward_tiles<ForwardTraits<64, Element, 128, 3>>(problem, multiprocessors, stream);
  } else {
    if (long_key_tiles(problem))
      launch_forward_tiles<ForwardTraits<kHeadDim, Element, 176>>(problem, multiprocessors, stream);
    else
      launch_forward_tiles<ForwardTraits<kHeadDim, Element, 128>>(problem, multiprocessors, stream);
  }
}

}  // namespace spattn::cuda::hopper
