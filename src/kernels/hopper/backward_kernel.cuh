#pragma once
// The own attention backward for sm_90a: fp32 throughout, not yet pipelined like the forward
// (bench/kernel-notes.md tracks its speed).
// - one CTA per (key tile of 128 keys of a segment, kv head, batch), the key tiles that see the
//   most query rows launched first (the causal diagonal's work shrinks along the keys); its two
//   warpgroups own 64 keys each and loop over every query tile (64 rows) of every query head of
//   the GQA group that sees a key of the tile; K and V are loaded once, Q and dO by the tensor memory accelerator
//   (TMA) into two stages, the next tile's while this one's products run;
// - per query tile, with the scores transposed (keys as rows, so that P^T and dS^T come out of
//   the accumulators already as the A operands of the next products): S^T = K Q^T and
//   dP^T = V dO^T by wgmma, P^T = exp(scale S^T - lse), dS^T = P^T (dP^T - delta) in fp32;
//   dV += P^T dO and dK += dS^T Q by wgmma with P^T and dS^T from registers, dK and dV staying in
//   fp32 registers over the whole loop; dS through shared memory (stmatrix) for dQ = dS K, which
//   goes through shared memory in fp32 and is added into the block's fp32 dq by the TMA unit's
//   reduce-add (several key tiles add to each row: one bulk operation per step instead of 32-64
//   scalar atomics per thread, which bounded b1 at about a quarter of cuDNN's speed);
// - at the end dK and dV are added into the segment's fp32 dk and dv, once per key (this CTA owns
//   its keys of its kv head: the GQA group's heads are summed in its registers).
// Only the (query tile, key tile) pairs that cross a mask edge or the end of a segment are masked
// element-wise; rows that see no key (lse -inf) and rows past the query count contribute nothing.

#include <cutlass/arch/barrier.h>
#include <cutlass/barrier.h>
#include <cutlass/cutlass.h>
#include <cutlass/numeric_conversion.h>
#include <cutlass/numeric_types.h>

#include <cstdint>
#include <cute/tensor.hpp>

#include "core/cuda/cuda_check.hpp"
#include "kernels/hopper/backward_problem.hpp"
#include "kernels/hopper/hopper_support.hpp"
#include "kernels/hopper/key_tile_plan.hpp"
#include "kernels/hopper/online_softmax.cuh"
#include "kernels/hopper/shared_storage.cuh"
#include "kernels/hopper/warpgroup_mma.cuh"

namespace spattn::cuda::hopper {

using namespace cute;

/// Tile sizes, layouts and copy types of one instantiation.
template <int kHeadDim_, class Element_>
struct BackwardTraits {
  using Element = Element_;
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr int kBlockN = kBackwardKeyTile;  // keys of the CTA, 64 per warpgroup
  static constexpr int kBlockM = kBackwardQueryTile;  // query rows per step
  static constexpr int kWarpgroups = 2;
  static constexpr int kThreads = 128 * kWarpgroups;
  static constexpr int kStages = 2;  // query tiles (Q, dO, lse, delta) in shared memory
  // dQ = dS K runs on 64 columns of head_dim per warpgroup: both at D = 128, one at D = 64.
  static constexpr int kQueryGradWarpgroups = kHeadDim / 64;

  // S^T = K Q^T and dP^T = V dO^T: (M = keys, N = queries, K = head_dim), keys split between the
  // warpgroups.
  using TileScores = Shape<Int<kBlockN>, Int<kBlockM>, Int<kHeadDim>>;
  // dV += P^T dO and dK += dS^T Q: (M = keys, N = head_dim, K = queries).
  using TileKeyGrads = Shape<Int<kBlockN>, Int<kHeadDim>, Int<kBlockM>>;
  // dQ = dS K, one warpgroup's part: (M = queries, N = 64 of head_dim, K = keys).
  using TileQueryGrad = Shape<Int<kBlockM>, _64, Int<kBlockN>>;
  using WarpgroupsAlongM = Layout<Shape<Int<kWarpgroups>, _1, _1>>;
  using MmaScores =
      decltype(make_tiled_mma(GMMA::ss_op_selector<Element, Element, float, TileScores>(), WarpgroupsAlongM{}));
  using MmaKeyGrads = decltype(make_tiled_mma(
      GMMA::rs_op_selector<Element, Element, float, TileKeyGrads, GMMA::Major::K, GMMA::Major::MN>(),
      WarpgroupsAlongM{}));
  using MmaQueryGrad = decltype(make_tiled_mma(
      GMMA::ss_op_selector<Element, Element, float, TileQueryGrad, GMMA::Major::K, GMMA::Major::MN>(),
      Layout<Shape<_1, Int<kQueryGradWarpgroups>, _1>>{}));

  // K and V as loaded: rows of head_dim contiguous, 128-byte swizzled (K-major for S^T and dP^T).
  using SmemKeys = decltype(tile_to_shape(GMMA::Layout_K_SW128_Atom<Element>{}, Shape<Int<kBlockN>, Int<kHeadDim>>{}));
  // The same bytes of K read as (head_dim, keys): the MN-major B operand of dQ = dS K.
  using SmemKeysTransposed =
      decltype(composition(SmemKeys{}, make_layout(Shape<Int<kHeadDim>, Int<kBlockN>>{}, Stride<Int<kBlockN>, _1>{})));
  // Q and dO as loaded, per stage, and read as (head_dim, rows) for dK += dS^T Q and dV += P^T dO.
  using SmemRows =
      decltype(tile_to_shape(GMMA::Layout_K_SW128_Atom<Element>{}, Shape<Int<kBlockM>, Int<kHeadDim>, Int<kStages>>{}));
  using SmemRowsTransposed =
      decltype(composition(SmemRows{}, make_layout(Shape<Int<kHeadDim>, Int<kBlockM>, Int<kStages>>{},
                                                   Stride<Int<kBlockM>, _1, Int<kBlockM * kHeadDim>>{})));
  // dS as (rows, keys), keys contiguous: the K-major A operand of dQ = dS K.
  using SmemScoreGrads =
      decltype(tile_to_shape(GMMA::Layout_K_SW128_Atom<Element>{}, Shape<Int<kBlockM>, Int<kBlockN>>{}));
  // The same bytes as (keys, rows), the shape of the dS^T accumulator that stores them.
  using SmemScoreGradsTransposed = decltype(composition(
      SmemScoreGrads{}, make_layout(Shape<Int<kBlockN>, Int<kBlockM>>{}, Stride<Int<kBlockM>, _1>{})));
  // dQ of a step in fp32, (rows, head_dim), as the TMA unit reads it to add into dq: 128-byte
  // swizzled, so that a warp's stores of its accumulator rows fall on different banks.
  using SmemQueryGrad =
      decltype(tile_to_shape(GMMA::Layout_K_SW128_Atom<float>{}, Shape<Int<kBlockM>, Int<kHeadDim>>{}));

  // Register-to-shared stores of dS^T and dQ: stmatrix.trans writes each warp's 8x8 blocks of
  // dS^T as rows of eight contiguous keys (four instructions per thread instead of 32 scalar
  // stores); dQ's fp32 column pairs go as 64-bit stores.
  using StoreScoreGrads = decltype(make_tiled_copy_C(Copy_Atom<SM90_U16x8_STSM_T, Element>{}, MmaScores{}));
  using StoreQueryGrad = decltype(make_tiled_copy_C(Copy_Atom<UniversalCopy<uint64_t>, float>{}, MmaQueryGrad{}));

  using GmemShape = Shape<int32_t, int32_t, int32_t, int32_t>;  // (tokens, D, heads, B)
  using GmemStrides = Stride<int64_t, _1, int64_t, int64_t>;    // head_dim contiguous
  using GmemTensor =
      decltype(make_tensor(make_gmem_ptr(static_cast<Element const*>(nullptr)), GmemShape{}, GmemStrides{}));
  using GmemAccumulator =
      decltype(make_tensor(make_gmem_ptr(static_cast<float*>(nullptr)), GmemShape{}, GmemStrides{}));
  using TmaRows = decltype(make_tma_copy(SM90_TMA_LOAD{}, GmemTensor{}, take<0, 2>(SmemRows{}),
                                         Shape<Int<kBlockM>, Int<kHeadDim>>{}, _1{}));
  using TmaKeys =
      decltype(make_tma_copy(SM90_TMA_LOAD{}, GmemTensor{}, SmemKeys{}, Shape<Int<kBlockN>, Int<kHeadDim>>{}, _1{}));
  using TmaQueryGradAdd = decltype(make_tma_copy(SM90_TMA_REDUCE_ADD{}, GmemAccumulator{}, SmemQueryGrad{},
                                                 Shape<Int<kBlockM>, Int<kHeadDim>>{}, _1{}));

  static constexpr uint32_t kRowTileBytes = kBlockM * kHeadDim * sizeof(Element);
  static constexpr uint32_t kKeyTileBytes = kBlockN * kHeadDim * sizeof(Element);

  struct SharedStorage {
    alignas(1024) Element k[cosize_v<SmemKeys>];
    alignas(1024) Element v[cosize_v<SmemKeys>];
    alignas(1024) Element q[cosize_v<SmemRows>];
    alignas(1024) Element dout[cosize_v<SmemRows>];
    alignas(1024) Element score_grads[cosize_v<SmemScoreGrads>];
    alignas(1024) float query_grad[cosize_v<SmemQueryGrad>];
    float lse_log2[kStages][kBlockM];  // lse * log2(e); +inf for rows that add nothing
    float delta[kStages][kBlockM];
    alignas(16) cutlass::arch::ClusterTransactionBarrier keys_full;
    cutlass::arch::ClusterTransactionBarrier rows_full[kStages];
  };
  // The dynamic shared memory's base is only 16-byte aligned: room to align it to 1024.
  static constexpr int kSharedBytes = sizeof(SharedStorage) + 1024;
};

/// Kernel parameters: the launch's problem and the TMA descriptors of its tensors.
template <class Traits>
struct BackwardParams {
  typename Traits::TmaRows tma_q;
  typename Traits::TmaRows tma_dout;
  typename Traits::TmaKeys tma_k[kMaxSegmentsPerLaunch];
  typename Traits::TmaKeys tma_v[kMaxSegmentsPerLaunch];
  typename Traits::TmaQueryGradAdd tma_dq_add;
  BackwardProblem problem;
};

/// The query tile of one step of a CTA's loop: query head and tile number.
struct QueryStep {
  int head;
  int m_block;
};

/// lse (in log2 units) and delta of one query row of a step.
struct RowTerms {
  float lse_log2 = INFINITY;  // +inf for rows that add nothing: P = exp2(s - inf) = 0
  float delta = 0.0f;
};

/// The named barrier of the threads that compute dQ, once each has stored its part (id 0 is
/// __syncthreads').
constexpr uint32_t kQueryGradStoredBarrier = 1;

/// The turn counters of the deterministic mode (BackwardProblem::dq_turns), waited on and moved
/// on by one thread, which synchronizes with the others by the kernel's own barriers.
struct OneThreadSync {
  __device__ static void sync() {}
};
using QueryGradTurnBarrier = cutlass::GenericBarrier<OneThreadSync>;

/// Waits until this thread's bulk operations (the TMA unit's adds into dq) are complete, their
/// writes performed, not only their shared-memory sources read (cute::tma_store_wait's `.read`).
__device__ inline void wait_bulk_operations_complete() { asm volatile("cp.async.bulk.wait_group 0;" ::: "memory"); }

/// Orders this thread's global-memory accesses through the generic proxy (the turn counters)
/// with those through the async proxy (the TMA unit's adds), both ways.
__device__ inline void fence_generic_with_async_global() { asm volatile("fence.proxy.async.global;" ::: "memory"); }

/// The key tiles of the launch before `tile_index` that add into the dQ of the query tile `rows`:
/// the place of this CTA's add in the deterministic order. A CTA visits the query tiles of
/// visible_query_tiles, its mirror visible_key_tiles counts them (key_tile_plan.hpp).
__device__ inline int key_tiles_before(const BackwardProblem& problem, int tile_index, QueryRows rows) {
  int before = 0;
  for (int index = 0; index < problem.num_segments; ++index) {
    const BackwardSegment& segment = problem.segments[index];
    const TileSpan span = visible_key_tiles(rows, KeyRange{segment.position, segment.keys}, problem.mask_left,
                                               problem.mask_right, kBackwardKeyTile);
    const int end = min(span.end, tile_index - segment.first_tile);
    if (end > span.begin) before += end - span.begin;
  }
  return before;
}

template <class Traits>
__global__ void __launch_bounds__(Traits::kThreads, 1)
    backward_kernel(const __grid_constant__ BackwardParams<Traits> params) {
  using Element = typename Traits::Element;
  constexpr int kBlockM = Traits::kBlockM, kBlockN = Traits::kBlockN, kHeadDim = Traits::kHeadDim;
  auto& shared = aligned_shared_storage<typename Traits::SharedStorage>();
  const BackwardProblem& problem = params.problem;
  const int thread = threadIdx.x;
  const int warpgroup = thread / 128;

  // This CTA's key tile, kv head and batch, the key tile varying slowest: every head's tiles that
  // see the most rows start first, the light ones fill the last wave.
  const int tile_index = static_cast<int>(blockIdx.x) / (problem.kv_heads * problem.batch);
  const int kv_head = static_cast<int>(blockIdx.x) / problem.batch % problem.kv_heads;
  const int batch = static_cast<int>(blockIdx.x) % problem.batch;
  int segment_index = 0;
  while (segment_index + 1 < problem.num_segments && problem.segments[segment_index + 1].first_tile <= tile_index)
    ++segment_index;
  const BackwardSegment& segment = problem.segments[segment_index];
  const int key_tile = tile_index - segment.first_tile;
  const int group = problem.heads / problem.kv_heads;
  const KeyRange keys{segment.position, segment.keys};
  const TileSpan visited = visible_query_tiles(problem.q_position, problem.rows, keys, key_tile, problem.mask_left,
                                               problem.mask_right, kBlockM, kBlockN);
  if (visited.empty()) return;  // no row sees these keys: dk and dv gain nothing
  const int first_m_block = visited.begin;
  const int m_blocks = visited.end - visited.begin;
  const int steps = group * m_blocks;
  const auto step_at = [&](int step) {
    return QueryStep{kv_head * group + step / m_blocks, first_m_block + step % m_blocks};
  };

  Tensor sK = make_tensor(make_smem_ptr(shared.k), typename Traits::SmemKeys{});
  Tensor sV = make_tensor(make_smem_ptr(shared.v), typename Traits::SmemKeys{});
  Tensor sKt = make_tensor(make_smem_ptr(shared.k), typename Traits::SmemKeysTransposed{});
  Tensor sQ = make_tensor(make_smem_ptr(shared.q), typename Traits::SmemRows{});
  Tensor sdO = make_tensor(make_smem_ptr(shared.dout), typename Traits::SmemRows{});
  Tensor sQt = make_tensor(make_smem_ptr(shared.q), typename Traits::SmemRowsTransposed{});
  Tensor sdOt = make_tensor(make_smem_ptr(shared.dout), typename Traits::SmemRowsTransposed{});
  Tensor sdS = make_tensor(make_smem_ptr(shared.score_grads), typename Traits::SmemScoreGrads{});
  Tensor sdQ = make_tensor(make_smem_ptr(shared.query_grad), typename Traits::SmemQueryGrad{});
  // The stores' views of dS and dQ: the swizzle applied to element offsets from the storage's
  // shared-memory address (both 1024-byte aligned), not to the generic 64-bit pointer as CuTe's
  // swizzled pointers do. The compiler then knows them for shared memory and holds 32-bit
  // addresses: with generic ones ptxas spilled 640 bytes a thread, its largest stall in b2a.
  Tensor sdSt_stores = as_position_independent_swizzle_tensor(
      make_tensor(make_smem_ptr(shared.score_grads), typename Traits::SmemScoreGradsTransposed{}));
  Tensor sdQ_stores = as_position_independent_swizzle_tensor(sdQ);

  const auto barrier_word = [](cutlass::arch::ClusterTransactionBarrier& barrier) -> uint64_t& {
    return reinterpret_cast<cutlass::arch::ClusterTransactionBarrier::ValueType&>(barrier);
  };
  // One thread issues the loads; each stage's barrier completes when its bytes have arrived.
  const auto load_keys = [&] {
    const auto load = [&](const typename Traits::TmaKeys& tma, auto& destination) {
      Tensor m =
          tma.get_tma_tensor(make_shape(segment.keys, kHeadDim, problem.kv_heads, problem.batch))(_, _, kv_head, batch);
      Tensor g = local_tile(m, Shape<Int<kBlockN>, Int<kHeadDim>>{}, make_coord(_, _0{}));  // (N, D, tiles)
      auto cta = tma.get_slice(_0{});
      copy(tma.with(barrier_word(shared.keys_full), 0), group_modes<0, 3>(cta.partition_S(g))(_, key_tile),
           group_modes<0, 3>(cta.partition_D(destination)));
    };
    shared.keys_full.arrive_and_expect_tx(2 * Traits::kKeyTileBytes);
    load(params.tma_k[segment_index], sK);
    load(params.tma_v[segment_index], sV);
  };
  // The query tiles (M, D, tiles) of query head `head` of this CTA's batch, in the tensor of rows
  // (q, dout or dq) that `tma` reads or adds into.
  const auto query_tiles_of = [&](const auto& tma, int head) {
    Tensor m = tma.get_tma_tensor(make_shape(problem.rows, kHeadDim, problem.heads, problem.batch))(_, _, head, batch);
    return local_tile(m, Shape<Int<kBlockM>, Int<kHeadDim>>{}, make_coord(_, _0{}));
  };
  const auto load_rows = [&](int step, int stage) {
    const QueryStep at = step_at(step);
    const auto load = [&](const typename Traits::TmaRows& tma, auto& destination) {
      auto cta = tma.get_slice(_0{});
      copy(tma.with(barrier_word(shared.rows_full[stage]), 0),
           group_modes<0, 3>(cta.partition_S(query_tiles_of(tma, at.head)))(_, at.m_block),
           group_modes<0, 3>(cta.partition_D(destination))(_, stage));
    };
    shared.rows_full[stage].arrive_and_expect_tx(2 * Traits::kRowTileBytes);
    load(params.tma_q, sQ);
    load(params.tma_dout, sdO);
  };
  // lse and delta of a step's rows, one per thread of the first 64: read from global memory a step
  // ahead into registers (the load's latency hidden behind the current step's products), stored
  // into their stage before the step's dQ.
  const auto fetch_row_terms = [&](int step) {
    RowTerms terms;
    const QueryStep at = step_at(step);
    const int64_t row = int64_t{at.m_block} * kBlockM + thread;
    if (thread >= kBlockM || row >= problem.rows) return terms;
    const float lse =
        problem.lse[batch * problem.lse_strides[0] + at.head * problem.lse_strides[1] + row * problem.lse_strides[2]];
    if (lse == -INFINITY) return terms;  // the row sees no key
    terms.lse_log2 = lse * static_cast<float>(M_LOG2E);
    terms.delta = problem.delta[batch * problem.delta_strides[0] + at.head * problem.delta_strides[1] +
                                row * problem.delta_strides[2]];
    return terms;
  };
  const auto store_row_terms = [&](const RowTerms& terms, int stage) {
    if (thread >= kBlockM) return;
    shared.lse_log2[stage][thread] = terms.lse_log2;
    shared.delta[stage][thread] = terms.delta;
  };
  // A step's dQ, scaled, from shared memory into dq by one thread; the bulk operation reads the
  // shared memory asynchronously (tma_store_wait before the next step's dQ overwrites it).
  const auto add_query_grad = [&](const QueryStep& at) {
    const auto& tma = params.tma_dq_add;
    auto cta = tma.get_slice(_0{});
    copy(tma, group_modes<0, 3>(cta.partition_S(sdQ)),
         group_modes<0, 3>(cta.partition_D(query_tiles_of(tma, at.head)))(_, at.m_block));
    tma_store_arrive();
  };
  // Deterministic mode, thread 0: the turn counter of the query tile whose add is in flight (-1:
  // none). A CTA waits only for key tiles of lower index, whose CTAs started before it (the grid
  // runs in index order) and never wait for it: no cycle, no deadlock.
  const int query_tiles = (problem.rows + kBlockM - 1) / kBlockM;
  int turn_in_flight = -1;
  const auto await_turn = [&](const QueryStep& at, QueryRows rows) {
    const int turn = (batch * problem.heads + at.head) * query_tiles + at.m_block;
    QueryGradTurnBarrier::wait_eq(problem.dq_turns, 0, turn, key_tiles_before(problem, tile_index, rows));
    fence_generic_with_async_global();  // the add below comes after the previous tile's
    turn_in_flight = turn;
  };
  // The previous add read out of shared memory (and, in deterministic mode, complete and its turn
  // passed on to the next key tile) before this step's dQ overwrites its source.
  const auto finish_query_grad_add = [&] {
    if (problem.dq_turns == nullptr) {
      tma_store_wait<0>();
      return;
    }
    if (turn_in_flight < 0) return;
    wait_bulk_operations_complete();
    fence_generic_with_async_global();
    QueryGradTurnBarrier::arrive_inc(problem.dq_turns, 0, turn_in_flight);
    turn_in_flight = -1;
  };

  if (thread == 0) {
    cute::prefetch_tma_descriptor(params.tma_q.get_tma_descriptor());
    cute::prefetch_tma_descriptor(params.tma_dout.get_tma_descriptor());
    shared.keys_full.init(1);
    for (int stage = 0; stage < Traits::kStages; ++stage) shared.rows_full[stage].init(1);
    cutlass::arch::fence_barrier_init();
  }
  __syncthreads();
  if (thread == 0) {
    load_keys();
    load_rows(0, 0);
  }
  store_row_terms(fetch_row_terms(0), 0);

  typename Traits::MmaScores mma_scores;
  typename Traits::MmaKeyGrads mma_key_grads;
  typename Traits::MmaQueryGrad mma_query_grad;
  auto thread_scores = mma_scores.get_thread_slice(thread);
  auto thread_key_grads = mma_key_grads.get_thread_slice(thread);
  // Threads past the dQ product's warpgroups (D = 64: the second) take no part in it.
  auto thread_query_grad = mma_query_grad.get_thread_slice(thread % (128 * Traits::kQueryGradWarpgroups));
  Tensor tSrK = thread_scores.partition_fragment_A(sK);  // descriptors (MMA, MMA_M, MMA_K)
  Tensor tSrV = thread_scores.partition_fragment_A(sV);
  Tensor tSrQ = thread_scores.partition_fragment_B(sQ);  // (MMA, MMA_N, MMA_K, stages)
  Tensor tSrdO = thread_scores.partition_fragment_B(sdO);
  Tensor tKrQt = thread_key_grads.partition_fragment_B(sQt);  // (MMA, MMA_N, MMA_K, stages)
  Tensor tKrdOt = thread_key_grads.partition_fragment_B(sdOt);
  Tensor tQrdS = thread_query_grad.partition_fragment_A(sdS);  // (MMA, MMA_M, MMA_K)
  Tensor tQrKt = thread_query_grad.partition_fragment_B(sKt);  // (MMA, MMA_N, MMA_K)
  typename Traits::StoreScoreGrads store_score_grads;
  typename Traits::StoreQueryGrad store_query_grad;
  auto thread_store_score_grads = store_score_grads.get_thread_slice(thread);
  auto thread_store_query_grad = store_query_grad.get_thread_slice(thread % (128 * Traits::kQueryGradWarpgroups));
  Tensor tSsdSt = thread_store_score_grads.partition_D(sdSt_stores);  // (CPY, CPY_M, CPY_N)
  Tensor tQsdQ = thread_store_query_grad.partition_D(sdQ_stores);     // (CPY, CPY_M, CPY_N) fp32
  // (key, row) of each score this thread holds; (key, d) of each dK, dV element; (row, d) of dQ's
  Tensor score_coordinates = thread_scores.partition_C(make_identity_tensor(Shape<Int<kBlockN>, Int<kBlockM>>{}));
  Tensor key_grad_coordinates =
      thread_key_grads.partition_C(make_identity_tensor(Shape<Int<kBlockN>, Int<kHeadDim>>{}));

  Tensor dK = partition_fragment_C(mma_key_grads, Shape<Int<kBlockN>, Int<kHeadDim>>{});  // fp32
  Tensor dV = partition_fragment_C(mma_key_grads, Shape<Int<kBlockN>, Int<kHeadDim>>{});
  clear(dK);
  clear(dV);
  const float scale_log2 = problem.scale * static_cast<float>(M_LOG2E);

  for (int step = 0; step < steps; ++step) {
    const int stage = step % Traits::kStages;
    // Every thread is done with the previous step: its stage and dS may be written again, and
    // this step's lse and delta are in place.
    __syncthreads();
    const bool has_next = step + 1 < steps;
    if (has_next && thread == 0) load_rows(step + 1, stage ^ 1);
    const RowTerms next_terms = has_next ? fetch_row_terms(step + 1) : RowTerms{};
    if (step == 0) shared.keys_full.wait(0);
    shared.rows_full[stage].wait((step / Traits::kStages) % 2);
    const QueryStep at = step_at(step);
    const int64_t first_row = problem.q_position + int64_t{at.m_block} * kBlockM;
    const QueryRows rows{first_row, first_row + min(kBlockM, problem.rows - at.m_block * kBlockM) - 1};
    const bool masked = key_tile_needs_mask(rows, keys, key_tile, problem.mask_left, problem.mask_right, kBlockN);
    const TileMask mask = tile_mask(first_row, keys, key_tile, problem.mask_left, problem.mask_right, kBlockN);

    Tensor scores = partition_fragment_C(mma_scores, Shape<Int<kBlockN>, Int<kBlockM>>{});       // S^T, then P^T
    Tensor score_grads = partition_fragment_C(mma_scores, Shape<Int<kBlockN>, Int<kBlockM>>{});  // dP^T, then dS^T
    issue_warpgroup_mma<true>(mma_scores, tSrK, tSrQ(_, _, _, stage), scores);
    issue_warpgroup_mma<true>(mma_scores, tSrV, tSrdO(_, _, _, stage), score_grads);
    warpgroup_wait<1>();
    CUTE_UNROLL
    for (int i = 0; i < size(scores); ++i) {
      const int key = get<0>(score_coordinates(i)), row = get<1>(score_coordinates(i));
      const float p = exp2_flush_denormals(scores(i) * scale_log2 - shared.lse_log2[stage][row]);
      scores(i) = masked && !mask.visible(row, key) ? 0.0f : p;
    }
    warpgroup_wait<0>();
    CUTE_UNROLL
    for (int i = 0; i < size(scores); ++i) {
      const int row = get<1>(score_coordinates(i));
      score_grads(i) = scores(i) * (score_grads(i) - shared.delta[stage][row]);
    }
    // P^T and dS^T in 16 bits, in the accumulators' layout.
    const auto rounded = [](auto const& accumulator) {
      Tensor result = make_tensor_like<Element>(accumulator);
      Tensor from = recast<cutlass::Array<float, 2>>(accumulator);
      Tensor to = recast<cutlass::Array<Element, 2>>(result);
      cutlass::NumericArrayConverter<Element, float, 2> convert;
      CUTE_UNROLL
      for (int i = 0; i < size(from); ++i) to(i) = convert(from(i));
      return result;
    };
    Tensor probabilities_rounded = rounded(scores);
    Tensor score_grads_rounded = rounded(score_grads);
    copy(store_score_grads, thread_store_score_grads.retile_S(score_grads_rounded), tSsdSt);
    // The same registers as the A operands of dV += P^T dO and dK += dS^T Q.
    const auto as_operand_a = [](auto& fragment) {
      return make_tensor(fragment.data(), accumulator_as_operand_a(fragment.layout()));
    };
    Tensor probabilities = as_operand_a(probabilities_rounded);
    Tensor score_grads_operand = as_operand_a(score_grads_rounded);
    issue_warpgroup_mma<false>(mma_key_grads, probabilities, tKrdOt(_, _, _, stage), dV);
    issue_warpgroup_mma<false>(mma_key_grads, score_grads_operand, tKrQt(_, _, _, stage), dK);
    // The next step's lse and delta into the other stage, which was last read before this step's
    // first barrier and is next read after its second.
    if (has_next) store_row_terms(next_terms, stage ^ 1);
    // dS written by every thread, seen by the tensor cores' reads (the async proxy); the previous
    // step's dQ read out of shared memory by the TMA unit before this step's overwrites it.
    cutlass::arch::fence_view_async_shared();
    if (thread == 0) finish_query_grad_add();
    __syncthreads();
    if (warpgroup < Traits::kQueryGradWarpgroups) {
      Tensor dQ = partition_fragment_C(mma_query_grad, Shape<Int<kBlockM>, Int<kHeadDim>>{});
      issue_warpgroup_mma<true>(mma_query_grad, tQrdS, tQrKt, dQ);
      warpgroup_wait<0>();
      CUTE_UNROLL
      for (int i = 0; i < size(dQ); ++i) dQ(i) *= problem.scale;
      copy(store_query_grad, thread_store_query_grad.retile_S(dQ), tQsdQ);
      // Every dQ thread's stores seen by the TMA unit before thread 0 issues the add (rows past
      // the query count fall outside dq's TMA tensor and are not added).
      tma_store_fence();
      cutlass::arch::NamedBarrier::sync(128 * Traits::kQueryGradWarpgroups, kQueryGradStoredBarrier);
      if (thread == 0) {
        if (problem.dq_turns != nullptr) await_turn(at, rows);
        add_query_grad(at);
      }
    } else {
      warpgroup_wait<0>();
    }
  }
  if (thread == 0) finish_query_grad_add();  // the last dQ read out before the CTA's shared memory goes

  // dK (times the scale) and dV into the segment's accumulators, keys past its end left out.
  CUTE_UNROLL
  for (int i = 0; i < size(dK); ++i) {
    const int64_t key = int64_t{key_tile} * kBlockN + get<0>(key_grad_coordinates(i));
    if (key >= segment.keys) continue;
    const int d = get<1>(key_grad_coordinates(i));
    segment.dk[batch * segment.dk_strides[0] + key * segment.dk_strides[1] + kv_head * segment.dk_strides[2] + d] +=
        problem.scale * dK(i);
    segment.dv[batch * segment.dv_strides[0] + key * segment.dv_strides[1] + kv_head * segment.dv_strides[2] + d] +=
        dV(i);
  }
}

template <class Traits>
void launch_backward_tiles(const BackwardProblem& problem, cudaStream_t stream) {
  using Element = typename Traits::Element;
  constexpr int kHeadDim = Traits::kHeadDim;
  BackwardParams<Traits> params{};
  params.problem = problem;
  // (tokens, D, heads, B) of `data`, head_dim contiguous: the 16-bit inputs or the fp32 dq.
  const auto rows_tensor = [](auto* data, int32_t tokens, int32_t heads, int32_t batch, const int64_t(&strides)[3]) {
    return make_tensor(make_gmem_ptr(data), make_shape(tokens, int32_t{kHeadDim}, heads, batch),
                       make_stride(strides[1], _1{}, strides[2], strides[0]));
  };
  const auto rows_copy = [&](const void* data, const int64_t(&strides)[3]) {
    return make_tma_copy(SM90_TMA_LOAD{},
                         rows_tensor(static_cast<Element const*>(data), problem.rows, problem.heads, problem.batch,
                                     strides),
                         take<0, 2>(typename Traits::SmemRows{}), Shape<Int<Traits::kBlockM>, Int<kHeadDim>>{}, _1{});
  };
  params.tma_q = rows_copy(problem.q, problem.q_strides);
  params.tma_dout = rows_copy(problem.dout, problem.dout_strides);
  params.tma_dq_add = make_tma_copy(
      SM90_TMA_REDUCE_ADD{}, rows_tensor(problem.dq, problem.rows, problem.heads, problem.batch, problem.dq_strides),
      typename Traits::SmemQueryGrad{}, Shape<Int<Traits::kBlockM>, Int<kHeadDim>>{}, _1{});
  for (int index = 0; index < problem.num_segments; ++index) {
    const BackwardSegment& segment = problem.segments[index];
    const auto keys_copy = [&](const void* data, const int64_t(&strides)[3]) {
      return make_tma_copy(SM90_TMA_LOAD{},
                           rows_tensor(static_cast<Element const*>(data), segment.keys, problem.kv_heads,
                                       problem.batch, strides),
                           typename Traits::SmemKeys{}, Shape<Int<Traits::kBlockN>, Int<kHeadDim>>{}, _1{});
    };
    params.tma_k[index] = keys_copy(segment.k, segment.k_strides);
    params.tma_v[index] = keys_copy(segment.v, segment.v_strides);
  }

  allow_shared_memory<backward_kernel<Traits>>(Traits::kSharedBytes);
  const int64_t ctas = int64_t{problem.key_tiles} * problem.kv_heads * problem.batch;  // < 2^31 (hopper_backward)
  backward_kernel<Traits><<<static_cast<unsigned>(ctas), Traits::kThreads, Traits::kSharedBytes, stream>>>(params);
  SPATTN_CUDA_CHECK_LAUNCH("the own Hopper attention backward");
}

template <int kHeadDim, DType kDType>
void launch_backward(const BackwardProblem& problem, cudaStream_t stream) {
  using Element = std::conditional_t<kDType == DType::bf16, cutlass::bfloat16_t, cutlass::half_t>;
  launch_backward_tiles<BackwardTraits<kHeadDim, Element>>(problem, stream);
}

}  // namespace spattn::cuda::hopper
