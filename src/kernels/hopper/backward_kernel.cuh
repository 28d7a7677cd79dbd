#pragma once
// The own attention backward for sm_90a (FlashAttention-3's shape of warp roles; bench/kernel-notes.md
// tracks its speed), fp32 throughout:
// - one CTA per (key tile of 128 keys of a segment, kv head, batch), in the grid's order of
//   backward_tile_order.hpp (backward_tile); it loops over every query tile (backward_query_tile's
//   rows) of every query head of the GQA group that sees a key of the tile (or of its part of the
//   group, where a short launch splits the group: backward_head_parts.hpp), in
//   backward_step_order.hpp's order;
// - warpgroup 0 produces with two warps: one loads K and V once, then each step's Q, dO (TMA),
//   lse and delta into a two-stage pipeline that the consumers release after their last product
//   that reads a stage; the other adds each step's dQ from shared memory into the block's fp32 dq
//   with the TMA unit's reduce-add (several key tiles add to each row: one bulk operation per
//   step, not scalar atomics), off the consumers' path;
// - two consumer warpgroups own 64 keys each. Per query tile, with the scores transposed (keys as
//   rows, so that P^T and dS^T come out of the accumulators already as the A operands of the next
//   products): S^T = K Q^T and dP^T = V dO^T by wgmma, P^T = exp(scale S^T - lse),
//   dS^T = P^T (dP^T - delta) in fp32; dV += P^T dO and dK += dS^T Q by wgmma with P^T and dS^T
//   from registers, dK and dV staying in fp32 registers over the whole loop; dS through shared
//   memory (stmatrix) for dQ^T = K^T dS^T, whose fp32 result goes to the dQ writer through shared
//   memory;
// - at the end dK and dV are added into the segment's fp32 dk and dv, once per key (this CTA owns
//   its keys of its kv head: the GQA group's heads are summed in its registers), or by atomics
//   where the group is split, once per part.
// Only the (query tile, key tile) pairs that cross a mask edge or the end of a segment are masked
// element-wise; rows that see no key (lse -inf) and rows past the query count contribute nothing.

#include <cutlass/arch/barrier.h>
#include <cutlass/arch/reg_reconfig.h>
#include <cutlass/barrier.h>
#include <cutlass/cutlass.h>
#include <cutlass/numeric_conversion.h>
#include <cutlass/numeric_types.h>

#include <cstdint>
#include <cute/tensor.hpp>

#include "core/cuda/cuda_check.hpp"
#include "kernels/hopper/backward_problem.hpp"
#include "kernels/hopper/backward_step_order.hpp"
#include "kernels/hopper/backward_tile_order.hpp"
#include "kernels/hopper/hopper_support.hpp"
#include "kernels/hopper/key_tile_plan.hpp"
#include "kernels/hopper/online_softmax.cuh"
#include "kernels/hopper/query_grad_buffer.hpp"
#include "kernels/hopper/register_split.hpp"
#include "kernels/hopper/shared_storage.cuh"
#include "kernels/hopper/transposed_layout.hpp"
#include "kernels/hopper/warpgroup_mma.cuh"

namespace spattn::cuda::hopper {

using namespace cute;

/// Tile sizes, layouts and copy types of one instantiation.
template <int kHeadDim_, class Element_>
struct BackwardTraits {
  using Element = Element_;
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr int kBlockN = kBackwardKeyTile;  // keys of the CTA, 64 per warpgroup
  static constexpr int kBlockM = backward_query_tile(kHeadDim);  // query rows per step
  static constexpr int kConsumerWarpgroups = 2;
  static constexpr int kConsumerThreads = 128 * kConsumerWarpgroups;
  static constexpr int kThreads = 128 + kConsumerThreads;  // a producer warpgroup first
  // Registers after setmaxnreg: the producer's two warps need few, the consumers hold dK and dV
  // (128 a thread) through the whole loop.
  static constexpr int kProducerRegisters = 24;
  static constexpr int kConsumerRegisters = 240;
  static_assert(register_split_fits(kProducerRegisters, kConsumerThreads, kConsumerRegisters),
                "the warpgroups' registers exceed what their CTA launches with (register_split.hpp)");
  static constexpr int kStages = 2;  // query tiles (Q, dO, lse, delta) in shared memory
  static constexpr int kScoreGradBuffers = 2;  // dS of this step and of the previous one
  using QueryGrad = QueryGradBuffer<Element, kBlockM, kHeadDim, kBlockN>;
  static constexpr int kQueryGradWarpgroups = QueryGrad::kWarpgroups;
  static constexpr int kQueryGradThreads = 128 * kQueryGradWarpgroups;
  // Each dQ warpgroup's part of the dQ buffer has its barriers, which join it and the writer warp:
  // a warpgroup waits only for its own part's add, not for the other warpgroup's stores.
  static constexpr int kQueryGradPartThreads = 128 + 32;

  // S^T = K Q^T and dP^T = V dO^T: (M = keys, N = queries, K = head_dim), keys split between the
  // warpgroups.
  using TileScores = Shape<Int<kBlockN>, Int<kBlockM>, Int<kHeadDim>>;
  // dV += P^T dO and dK += dS^T Q: (M = keys, N = head_dim, K = queries).
  using TileKeyGrads = Shape<Int<kBlockN>, Int<kHeadDim>, Int<kBlockM>>;
  using WarpgroupsAlongM = Layout<Shape<Int<kConsumerWarpgroups>, _1, _1>>;
  using MmaScores =
      decltype(make_tiled_mma(GMMA::ss_op_selector<Element, Element, float, TileScores>(), WarpgroupsAlongM{}));
  using MmaKeyGrads = decltype(make_tiled_mma(
      GMMA::rs_op_selector<Element, Element, float, TileKeyGrads, GMMA::Major::K, GMMA::Major::MN>(),
      WarpgroupsAlongM{}));
  using MmaQueryGrad = typename QueryGrad::Mma;  // dQ^T = K^T dS^T (query_grad_buffer.hpp)

  // K and V as loaded: rows of head_dim contiguous, 128-byte swizzled (K-major for S^T and dP^T).
  using SmemKeys = decltype(tile_to_shape(GMMA::Layout_K_SW128_Atom<Element>{}, Shape<Int<kBlockN>, Int<kHeadDim>>{}));
  // The same bytes of K read as (head_dim, keys): the MN-major A operand of dQ^T = K^T dS^T.
  using SmemKeysTransposed = Transposed<SmemKeys>;
  // Q and dO as loaded, per stage, and read as (head_dim, rows) for dK += dS^T Q and dV += P^T dO.
  using SmemRows =
      decltype(tile_to_shape(GMMA::Layout_K_SW128_Atom<Element>{}, Shape<Int<kBlockM>, Int<kHeadDim>, Int<kStages>>{}));
  using SmemRowsTransposed = Transposed<SmemRows>;
  // dS as (rows, keys, buffers), keys contiguous: the K-major B operand of dQ^T = K^T dS^T.
  using SmemScoreGrads = decltype(tile_to_shape(GMMA::Layout_K_SW128_Atom<Element>{},
                                                Shape<Int<kBlockM>, Int<kBlockN>, Int<kScoreGradBuffers>>{}));
  // The same bytes as (keys, rows, buffers), the shape of the dS^T accumulator that stores them.
  using SmemScoreGradsTransposed = Transposed<SmemScoreGrads>;
  // dQ of a step in fp32, as the TMA unit reads it to add into dq, a part per dQ warpgroup
  // (query_grad_buffer.hpp).
  using SmemQueryGrad = typename QueryGrad::Smem;
  using SmemQueryGradPart = typename QueryGrad::SmemPart;
  using SmemQueryGradTransposed = typename QueryGrad::SmemTransposed;

  // Register-to-shared stores of dS^T: stmatrix.trans writes each warp's 8x8 blocks of dS^T as
  // rows of eight contiguous keys (four instructions per thread instead of 32 scalar stores).
  using StoreScoreGrads = decltype(make_tiled_copy_C(Copy_Atom<SM90_U16x8_STSM_T, Element>{}, MmaScores{}));

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
  using TmaQueryGradAdd = decltype(make_tma_copy(SM90_TMA_REDUCE_ADD{}, GmemAccumulator{}, SmemQueryGradPart{},
                                                 Shape<Int<kBlockM>, _64>{}, _1{}));

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
    cutlass::arch::ClusterTransactionBarrier rows_full[kStages];  // Q, dO, lse and delta of a stage arrived
    cutlass::arch::ClusterBarrier rows_empty[kStages];            // every consumer done with a stage
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

/// lse (in log2 units) and delta of one query row of a step.
struct RowTerms {
  float lse_log2 = INFINITY;  // +inf for rows that add nothing: P = exp2(s - inf) = 0
  float delta = 0.0f;
};

/// The RowTerms of query row `row` of (batch, head); rows past the query count and rows that see
/// no key (lse -inf) add nothing. delta is read beside lse and chosen by a select: in a branch on
/// lse, its load would wait for lse's (two L2 round trips a row instead of one).
__device__ inline RowTerms row_terms(const BackwardProblem& problem, int batch, int head, int64_t row) {
  RowTerms terms;
  if (row >= problem.rows) return terms;
  const float lse =
      problem.lse[batch * problem.lse_strides[0] + head * problem.lse_strides[1] + row * problem.lse_strides[2]];
  const float delta =
      problem
          .delta[batch * problem.delta_strides[0] + head * problem.delta_strides[1] + row * problem.delta_strides[2]];
  const bool sees_keys = lse != -INFINITY;
  terms.lse_log2 = sees_keys ? lse * static_cast<float>(M_LOG2E) : INFINITY;
  terms.delta = sees_keys ? delta : 0.0f;
  return terms;
}

/// Named barriers (ids past CUTLASS's reserved ones).
enum class BackwardBarrier : uint32_t {
  score_grads_stored = 0,  // consumers: both warpgroups' dS of the step are in shared memory
  query_grad_empty = 1,    // dQ writer -> a dQ warpgroup: the add has read its part out (query_grad_barrier)
  query_grad_full = 2,     // a dQ warpgroup -> dQ writer: its part of the step's dQ is in the buffer
};

/// The id of `barrier` (query_grad_empty or query_grad_full) for the dQ buffer's part `part`.
__device__ inline uint32_t query_grad_barrier(BackwardBarrier barrier, int part) {
  return uint32_t(barrier) + 2 * part;
}

/// The turn counters of the deterministic mode (BackwardProblem::dq_turns), waited on and moved
/// on by the dQ writer's lane 0, which synchronizes with the others by the kernel's own barriers.
struct OneThreadSync {
  __device__ static void sync() {}
};
using QueryGradTurnBarrier = cutlass::GenericBarrier<OneThreadSync>;

/// Waits until all but this thread's `kPending` latest groups of bulk operations (the TMA unit's
/// adds into dq) are complete, their writes performed, not only their shared-memory sources read
/// (cute::tma_store_wait's `.read`).
template <int kPending>
__device__ void wait_bulk_operations_complete() {
  asm volatile("cp.async.bulk.wait_group %0;" ::"n"(kPending) : "memory");
}

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

/// The work of one CTA: a key tile of one segment, for one kv head and batch, and its steps, the
/// query tiles of its query heads (the GQA group's, or its part of them) that see a key of the
/// tile, in backward_step_order.hpp's order.
struct BackwardTile {
  int tile_index;  // among the launch's key tiles
  int segment_index;
  int key_tile;  // within the segment
  int kv_head;
  int batch;
  BackwardSteps steps;
};

/// This CTA's tile, in the grid's order of backward_tile_order.hpp: bands of groups (a part of
/// the GQA group of a kv head of a batch entry), the key tile slowest inside a band; steps of
/// kBlockM query rows.
template <int kBlockM>
__device__ BackwardTile backward_tile(const BackwardProblem& problem) {
  BackwardTile tile;
  const BackwardTileSlot slot =
      backward_tile_slot(static_cast<int>(blockIdx.x), problem.key_tiles, problem.band_groups);
  tile.tile_index = slot.key_tile;
  const int part = slot.group % problem.head_parts;
  tile.kv_head = slot.group / problem.head_parts % problem.kv_heads;
  tile.batch = slot.group / problem.head_parts / problem.kv_heads;
  tile.segment_index = 0;
  while (tile.segment_index + 1 < problem.num_segments &&
         problem.segments[tile.segment_index + 1].first_tile <= tile.tile_index)
    ++tile.segment_index;
  const BackwardSegment& segment = problem.segments[tile.segment_index];
  tile.key_tile = tile.tile_index - segment.first_tile;
  const int heads = problem.heads / problem.kv_heads / problem.head_parts;
  tile.steps = BackwardSteps{
      (tile.kv_head * problem.head_parts + part) * heads, heads,
      visible_query_tiles(problem.q_position, problem.rows, KeyRange{segment.position, segment.keys}, tile.key_tile,
                          problem.mask_left, problem.mask_right, kBlockM, kBackwardKeyTile),
      problem.dq_turns != nullptr ? StepOrder::in_turn : StepOrder::head_by_head};
  return tile;
}

/// The global positions of the first and last valid row of a step's query tile of kBlockM rows.
template <int kBlockM>
__device__ QueryRows step_rows(const BackwardProblem& problem, const QueryStep& at) {
  const int64_t first_row = problem.q_position + int64_t{at.m_block} * kBlockM;
  return QueryRows{first_row, first_row + min(kBlockM, problem.rows - at.m_block * kBlockM) - 1};
}

/// Barrier-word view of a transaction barrier, as the TMA copies take it.
__device__ inline uint64_t& barrier_word(cutlass::arch::ClusterTransactionBarrier& barrier) {
  return reinterpret_cast<cutlass::arch::ClusterTransactionBarrier::ValueType&>(barrier);
}

/// The query tiles of query head `head` of `batch` in the tensor of rows (q, dout or dq) that `tma`
/// reads or adds into, in parts of kColumns columns of head_dim: (M, kColumns, tiles, parts).
template <class Traits, int kColumns, class Tma>
__device__ auto query_tiles_of(const Tma& tma, const BackwardProblem& problem, int head, int batch) {
  Tensor m = tma.get_tma_tensor(make_shape(problem.rows, int32_t{Traits::kHeadDim}, problem.heads, problem.batch))(
      _, _, head, batch);
  return local_tile(m, Shape<Int<Traits::kBlockM>, Int<kColumns>>{}, make_coord(_, _));
}

// ---- producer: K and V once, then each step's Q, dO, lse and delta -----------------------------

/// Warp 0 of the producer warpgroup. Lane 0 issues the TMA loads of K and V, and of each step's Q
/// and dO into the step's stage once the consumers have released it; every lane reads lse and
/// delta of two of the step's rows (not by TMA: their rows need not be 16-byte aligned), stores
/// them into the stage once it is released and arrives on the stage's barrier, which completes
/// when all 32 have and the tiles' bytes have landed.
template <StepOrder kOrder, class Traits>
__device__ void load_tiles(const BackwardParams<Traits>& params, const BackwardTile& tile,
                           typename Traits::SharedStorage& shared) {
  constexpr int kBlockM = Traits::kBlockM, kBlockN = Traits::kBlockN, kHeadDim = Traits::kHeadDim;
  const BackwardProblem& problem = params.problem;
  const BackwardSegment& segment = problem.segments[tile.segment_index];
  const int lane = threadIdx.x % 32;
  const bool issuing = lane == 0;
  Tensor sK = make_tensor(make_smem_ptr(shared.k), typename Traits::SmemKeys{});
  Tensor sV = make_tensor(make_smem_ptr(shared.v), typename Traits::SmemKeys{});
  Tensor sQ = make_tensor(make_smem_ptr(shared.q), typename Traits::SmemRows{});
  Tensor sdO = make_tensor(make_smem_ptr(shared.dout), typename Traits::SmemRows{});

  if (issuing) {
    const auto load_keys = [&](const typename Traits::TmaKeys& tma, auto& destination) {
      Tensor m = tma.get_tma_tensor(make_shape(segment.keys, kHeadDim, problem.kv_heads, problem.batch))(
          _, _, tile.kv_head, tile.batch);
      Tensor g = local_tile(m, Shape<Int<kBlockN>, Int<kHeadDim>>{}, make_coord(_, _0{}));  // (N, D, tiles)
      auto cta = tma.get_slice(_0{});
      copy(tma.with(barrier_word(shared.keys_full), 0), group_modes<0, 3>(cta.partition_S(g))(_, tile.key_tile),
           group_modes<0, 3>(cta.partition_D(destination)));
    };
    cute::prefetch_tma_descriptor(params.tma_q.get_tma_descriptor());
    cute::prefetch_tma_descriptor(params.tma_dout.get_tma_descriptor());
    shared.keys_full.arrive_and_expect_tx(2 * Traits::kKeyTileBytes);
    load_keys(params.tma_k[tile.segment_index], sK);
    load_keys(params.tma_v[tile.segment_index], sV);
  }
  const int steps = tile.steps.count();
  QueryStep at = tile.steps.first<kOrder>();
  constexpr int kRowsPerLane = (kBlockM + 31) / 32;
  for (int step = 0; step < steps; ++step, tile.steps.advance<kOrder>(at)) {
    const int stage = step % Traits::kStages;
    // The step's lse and delta read before waiting for its stage, every load at once: their
    // latency passes while the consumers still work on the stage. Read after the wait, one row
    // after another, they held the stage back (the consumers' wait for it was 5% of the kernel's
    // stall samples with 64 rows a step, 13% with 80; bench/kernel-notes.md, 2026-12-06).
    RowTerms terms[kRowsPerLane];
    CUTE_UNROLL
    for (int i = 0; i < kRowsPerLane; ++i)
      if (lane + 32 * i < kBlockM)
        terms[i] = row_terms(problem, tile.batch, at.head, int64_t{at.m_block} * kBlockM + lane + 32 * i);
    shared.rows_empty[stage].wait((step / Traits::kStages) % 2 ^ 1);  // passes at once on the first round
    if (issuing) {
      const auto load_rows = [&](const typename Traits::TmaRows& tma, auto& destination) {
        auto cta = tma.get_slice(_0{});
        copy(tma.with(barrier_word(shared.rows_full[stage]), 0),
             group_modes<0, 3>(cta.partition_S(query_tiles_of<Traits, kHeadDim>(tma, problem, at.head, tile.batch)))(
                 _, at.m_block, _0{}),
             group_modes<0, 3>(cta.partition_D(destination))(_, stage));
      };
      shared.rows_full[stage].expect_transaction(2 * Traits::kRowTileBytes);
      load_rows(params.tma_q, sQ);
      load_rows(params.tma_dout, sdO);
    }
    CUTE_UNROLL
    for (int i = 0; i < kRowsPerLane; ++i) {
      const int row_in_tile = lane + 32 * i;
      if (row_in_tile < kBlockM) {
        shared.lse_log2[stage][row_in_tile] = terms[i].lse_log2;
        shared.delta[stage][row_in_tile] = terms[i].delta;
      }
    }
    shared.rows_full[stage].arrive();
  }
}

// ---- dQ writer: each step's dQ from shared memory into dq ---------------------------------------

/// Warp 1 of the producer warpgroup. As each dQ warpgroup stores its part of a step's dQ, lane 0
/// adds that part into dq with the TMA unit's reduce-add (several key tiles add to each row: bulk
/// operations, not scalar atomics) and hands each part back when its add has read it, the first
/// part while the second's add still runs. In deterministic mode lane 0 first waits for the query
/// tile's turn (QueryGradTurns): a CTA waits only for key tiles of lower index, whose CTAs started
/// before it (the grid runs in index order) and never wait for it, so there is no cycle; it passes
/// the turn on once both adds are complete, their writes performed, and only after issuing the next
/// step's adds: done before them, the wait for completion, the hand-over and the next turn's wait
/// made a chain between two steps' adds longer than a step (a step later: +4-5% causal at D 128,
/// +8-11% at D 64, bench/results/gpu-device-run-h100-2026-12-07b.md).
template <StepOrder kOrder, class Traits>
__device__ void add_query_grads(const BackwardParams<Traits>& params, const BackwardTile& tile,
                                typename Traits::SharedStorage& shared) {
  using cutlass::arch::NamedBarrier;
  constexpr int kParts = Traits::kQueryGradWarpgroups;
  constexpr int kPartThreads = Traits::kQueryGradPartThreads;
  const BackwardProblem& problem = params.problem;
  const bool issuing = threadIdx.x % 32 == 0;
  const int query_tiles = (problem.rows + Traits::kBlockM - 1) / Traits::kBlockM;
  const auto& tma = params.tma_dq_add;
  auto cta = tma.get_slice(_0{});
  const auto part_of_buffer = [&](int part) {
    return make_tensor(make_smem_ptr(shared.query_grad + part * Traits::QueryGrad::kPartElements),
                       typename Traits::SmemQueryGradPart{});
  };

  CUTE_UNROLL
  for (int part = 0; part < kParts; ++part) {  // the buffer starts free
    NamedBarrier::arrive(kPartThreads, query_grad_barrier(BackwardBarrier::query_grad_empty, part));
  }
  const bool takes_turns = issuing && problem.dq_turns != nullptr;
  int previous_turn = -1;  // the last step's turn, not yet handed on
  // Hands previous_turn on once all but the `pending` latest groups of adds are complete.
  const auto hand_on_previous_turn = [&](auto pending) {
    if (takes_turns && previous_turn >= 0) {
      wait_bulk_operations_complete<decltype(pending)::value>();
      fence_generic_with_async_global();
      QueryGradTurnBarrier::arrive_inc(problem.dq_turns, 0, previous_turn);
    }
  };
  const int steps = tile.steps.count();
  QueryStep at = tile.steps.first<kOrder>();
  for (int step = 0; step < steps; ++step, tile.steps.advance<kOrder>(at)) {
    const int turn = (tile.batch * problem.heads + at.head) * query_tiles + at.m_block;
    if (takes_turns) {
      QueryGradTurnBarrier::wait_eq(
          problem.dq_turns, 0, turn,
          key_tiles_before(problem, tile.tile_index, step_rows<Traits::kBlockM>(problem, at)));
      fence_generic_with_async_global();  // the adds below come after the previous tile's
    }
    Tensor g = query_tiles_of<Traits, Traits::QueryGrad::kPartColumns>(tma, problem, at.head,
                                                                       tile.batch);  // (M, 64, tiles, parts)
    CUTE_UNROLL
    for (int part = 0; part < kParts; ++part) {
      NamedBarrier::sync(kPartThreads, query_grad_barrier(BackwardBarrier::query_grad_full, part));
      if (issuing) {
        copy(tma, group_modes<0, 3>(cta.partition_S(part_of_buffer(part))),
             group_modes<0, 3>(cta.partition_D(g))(_, at.m_block, part));
        tma_store_arrive();
      }
    }
    // The previous step's adds, issued a step ago, are complete by now as a rule: its turn goes on.
    hand_on_previous_turn(Int<kParts>{});
    previous_turn = turn;
    // Each part back as soon as its add has read it (the adds read in the order issued).
    for_each(make_int_sequence<kParts>{}, [&](auto part) {
      if (issuing) tma_store_wait<kParts - 1 - decltype(part)::value>();
      __syncwarp();
      if (step + 1 < steps) {
        NamedBarrier::arrive(kPartThreads, query_grad_barrier(BackwardBarrier::query_grad_empty, part));
      }
    });
  }
  hand_on_previous_turn(Int<0>{});
}

// ---- consumers: the products and the softmax's gradient -----------------------------------------

/// The two consumer warpgroups, 64 keys each. Per step: S^T and dP^T, P^T and dS^T in fp32, dV and
/// dK accumulated in registers, dS^T through shared memory (one of two buffers, alternating, so
/// that one barrier per step orders its writes and reads), dQ^T = K^T dS^T into the dQ buffer; at the
/// end dK and dV into the segment's fp32 accumulators.
template <StepOrder kOrder, class Traits>
__device__ void consume(const BackwardParams<Traits>& params, const BackwardTile& tile,
                        typename Traits::SharedStorage& shared) {
  using Element = typename Traits::Element;
  using cutlass::arch::NamedBarrier;
  constexpr int kBlockM = Traits::kBlockM, kBlockN = Traits::kBlockN, kHeadDim = Traits::kHeadDim;
  const BackwardProblem& problem = params.problem;
  const BackwardSegment& segment = problem.segments[tile.segment_index];
  const KeyRange keys{segment.position, segment.keys};
  const int thread = threadIdx.x - 128;  // among the consumers
  const int warpgroup = thread / 128;    // keys [64 warpgroup, 64 warpgroup + 64) of the tile

  Tensor sK = make_tensor(make_smem_ptr(shared.k), typename Traits::SmemKeys{});
  Tensor sV = make_tensor(make_smem_ptr(shared.v), typename Traits::SmemKeys{});
  Tensor sKt = make_tensor(make_smem_ptr(shared.k), typename Traits::SmemKeysTransposed{});
  Tensor sQ = make_tensor(make_smem_ptr(shared.q), typename Traits::SmemRows{});
  Tensor sdO = make_tensor(make_smem_ptr(shared.dout), typename Traits::SmemRows{});
  Tensor sQt = make_tensor(make_smem_ptr(shared.q), typename Traits::SmemRowsTransposed{});
  Tensor sdOt = make_tensor(make_smem_ptr(shared.dout), typename Traits::SmemRowsTransposed{});
  Tensor sdS = make_tensor(make_smem_ptr(shared.score_grads), typename Traits::SmemScoreGrads{});
  // The stores' views of dS and dQ: the swizzle applied to element offsets from the storage's
  // shared-memory address (both 1024-byte aligned), not to the generic 64-bit pointer as CuTe's
  // swizzled pointers do. The compiler then knows them for shared memory and holds 32-bit
  // addresses: with generic ones ptxas spilled 640 bytes a thread, its largest stall in b2a.
  Tensor sdSt_stores = as_position_independent_swizzle_tensor(
      make_tensor(make_smem_ptr(shared.score_grads), typename Traits::SmemScoreGradsTransposed{}));
  Tensor sdQt_stores = as_position_independent_swizzle_tensor(
      make_tensor(make_smem_ptr(shared.query_grad), typename Traits::SmemQueryGradTransposed{}));

  typename Traits::MmaScores mma_scores;
  typename Traits::MmaKeyGrads mma_key_grads;
  typename Traits::MmaQueryGrad mma_query_grad;
  auto thread_scores = mma_scores.get_thread_slice(thread);
  auto thread_key_grads = mma_key_grads.get_thread_slice(thread);
  // Threads past the dQ product's warpgroups (D = 64: the second) take no part in it.
  auto thread_query_grad = mma_query_grad.get_thread_slice(thread % Traits::kQueryGradThreads);
  Tensor tSrK = thread_scores.partition_fragment_A(sK);  // descriptors (MMA, MMA_M, MMA_K)
  Tensor tSrV = thread_scores.partition_fragment_A(sV);
  Tensor tSrQ = thread_scores.partition_fragment_B(sQ);  // (MMA, MMA_N, MMA_K, stages)
  Tensor tSrdO = thread_scores.partition_fragment_B(sdO);
  Tensor tKrQt = thread_key_grads.partition_fragment_B(sQt);  // (MMA, MMA_N, MMA_K, stages)
  Tensor tKrdOt = thread_key_grads.partition_fragment_B(sdOt);
  Tensor tQrKt = thread_query_grad.partition_fragment_A(sKt);  // (MMA, MMA_M, MMA_K)
  Tensor tQrdS = thread_query_grad.partition_fragment_B(sdS);  // (MMA, MMA_N, MMA_K, buffers)
  typename Traits::StoreScoreGrads store_score_grads;
  auto thread_store_score_grads = store_score_grads.get_thread_slice(thread);
  Tensor tSsdSt = thread_store_score_grads.partition_D(sdSt_stores);  // (CPY, CPY_M, CPY_N, buffers)
  Tensor tQsdQt = thread_query_grad.partition_C(sdQt_stores);         // (MMA, MMA_M, MMA_N) fp32
  // (key, row) of each score this thread holds; (key, d) of each dK, dV element
  Tensor score_coordinates = thread_scores.partition_C(make_identity_tensor(Shape<Int<kBlockN>, Int<kBlockM>>{}));
  Tensor key_grad_coordinates =
      thread_key_grads.partition_C(make_identity_tensor(Shape<Int<kBlockN>, Int<kHeadDim>>{}));

  Tensor dK = partition_fragment_C(mma_key_grads, Shape<Int<kBlockN>, Int<kHeadDim>>{});  // fp32
  Tensor dV = partition_fragment_C(mma_key_grads, Shape<Int<kBlockN>, Int<kHeadDim>>{});
  clear(dK);
  clear(dV);
  const float scale_log2 = problem.scale * static_cast<float>(M_LOG2E);

  shared.keys_full.wait(0);
  const int steps = tile.steps.count();
  QueryStep at = tile.steps.first<kOrder>();
  for (int step = 0; step < steps; ++step, tile.steps.advance<kOrder>(at)) {
    const int stage = step % Traits::kStages;
    const int buffer = step % Traits::kScoreGradBuffers;
    shared.rows_full[stage].wait((step / Traits::kStages) % 2);
    Tensor scores = partition_fragment_C(mma_scores, Shape<Int<kBlockN>, Int<kBlockM>>{});       // S^T, then P^T
    Tensor score_grads = partition_fragment_C(mma_scores, Shape<Int<kBlockN>, Int<kBlockM>>{});  // dP^T, then dS^T
    issue_warpgroup_mma<true>(mma_scores, tSrK, tSrQ(_, _, _, stage), scores);
    issue_warpgroup_mma<true>(mma_scores, tSrV, tSrdO(_, _, _, stage), score_grads);
    const QueryRows rows = step_rows<kBlockM>(problem, at);
    // This thread's rows' lse read while S's product runs: read after the wait (which no load may
    // pass), their latency stood between S and the exponentials (7% of the warps' stall samples at
    // 16k causal, bench/kernel-notes.md, 2026-11-28 twelfth session). Delta likewise before dP's wait.
    float lse_log2[size(scores)];
    CUTE_UNROLL
    for (int i = 0; i < size(scores); ++i) lse_log2[i] = shared.lse_log2[stage][get<1>(score_coordinates(i))];
    warpgroup_wait<1>();
    CUTE_UNROLL
    for (int i = 0; i < size(scores); ++i) scores(i) = exp2_flush_denormals(scores(i) * scale_log2 - lse_log2[i]);
    // Only the few tiles that cross a mask edge or a segment's end are masked, in a branch of
    // their own: as a select in the loop above, the compiler worked out every element's mask bit
    // on every step, before S's product was even issued (220 instructions a step).
    if (key_tile_needs_mask(rows, keys, tile.key_tile, problem.mask_left, problem.mask_right, kBlockN)) {
      const TileMask mask = tile_mask(rows.first, keys, tile.key_tile, problem.mask_left, problem.mask_right, kBlockN);
      CUTE_UNROLL
      for (int i = 0; i < size(scores); ++i)
        if (!mask.visible(get<1>(score_coordinates(i)), get<0>(score_coordinates(i)))) scores(i) = 0.0f;
    }
    float delta[size(scores)];
    CUTE_UNROLL
    for (int i = 0; i < size(scores); ++i) delta[i] = shared.delta[stage][get<1>(score_coordinates(i))];
    warpgroup_wait<0>();
    CUTE_UNROLL
    for (int i = 0; i < size(scores); ++i) score_grads(i) = scores(i) * (score_grads(i) - delta[i]);
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
    copy(store_score_grads, thread_store_score_grads.retile_S(score_grads_rounded), tSsdSt(_, _, _, buffer));
    // The same registers as the A operands of dV += P^T dO and dK += dS^T Q.
    const auto as_operand_a = [](auto& fragment) {
      return make_tensor(fragment.data(), accumulator_as_operand_a(fragment.layout()));
    };
    Tensor probabilities = as_operand_a(probabilities_rounded);
    Tensor score_grads_operand = as_operand_a(score_grads_rounded);
    issue_warpgroup_mma<false>(mma_key_grads, probabilities, tKrdOt(_, _, _, stage), dV);
    // Both warpgroups' dS written and seen by the tensor cores' reads (the async proxy). A
    // warpgroup passes this barrier only after the other has finished the previous step's dQ
    // product, which read the buffer that the next step writes.
    cutlass::arch::fence_view_async_shared();
    NamedBarrier::sync(Traits::kConsumerThreads, uint32_t(BackwardBarrier::score_grads_stored));
    // dQ's product goes before dK's, so that dQ's scaling and stores run while dK's product keeps
    // the tensor cores busy (with dK first they would stand idle through them).
    if (warpgroup < Traits::kQueryGradWarpgroups) {
      Tensor dQt = partition_fragment_C(mma_query_grad, Shape<Int<kHeadDim>, Int<kBlockM>>{});
      issue_warpgroup_mma<true>(mma_query_grad, tQrKt, tQrdS(_, _, _, buffer), dQt);
      issue_warpgroup_mma<false>(mma_key_grads, score_grads_operand, tKrQt(_, _, _, stage), dK);
      warpgroup_wait<1>();  // dV's and dQ's products are done, dK's may still run
      CUTE_UNROLL
      for (int i = 0; i < size(dQt); ++i) dQt(i) *= problem.scale;
      // The writer's add of the previous step has read this warpgroup's part out.
      constexpr int kPartThreads = Traits::kQueryGradPartThreads;
      NamedBarrier::sync(kPartThreads, query_grad_barrier(BackwardBarrier::query_grad_empty, warpgroup));
      // One 32-bit store per element: a warp's lanes hold 8 columns (of head_dim) of 4 rows
      // two apart, which the 128-byte swizzle spreads over all 32 banks.
      copy(dQt, tQsdQt);
      // The warpgroup's stores seen by the TMA unit before the writer adds them (rows past the
      // query count fall outside dq's TMA tensor and are not added).
      tma_store_fence();
      NamedBarrier::arrive(kPartThreads, query_grad_barrier(BackwardBarrier::query_grad_full, warpgroup));
    } else {
      issue_warpgroup_mma<false>(mma_key_grads, score_grads_operand, tKrQt(_, _, _, stage), dK);
    }
    warpgroup_wait<0>();  // dV's and dK's products have read the stage
    shared.rows_empty[stage].arrive();
  }

  // dK (times the scale) and dV into the segment's accumulators, keys past its end left out. Each
  // thread holds column pairs of two rows (keys): a row's loads all go out before its first add,
  // so that their latencies overlap. One element at a time, each behind its own branch, they took
  // 17% of the kernel's time at 8k causal. Where other parts of the GQA group add into the same
  // keys, each pair goes as one atomic add instead (no load to wait for).
  Tensor dK_rows = make_tensor(dK.data(), accumulator_rows_columns(dK.layout()));  // (keys, columns)
  Tensor dV_rows = make_tensor(dV.data(), accumulator_rows_columns(dV.layout()));
  Tensor key_grad_rows =
      make_tensor(key_grad_coordinates.data(), accumulator_rows_columns(key_grad_coordinates.layout()));
  constexpr int kPairs = decltype(size<1>(dK_rows))::value / 2;
  CUTE_UNROLL
  for (int row = 0; row < size<0>(dK_rows); ++row) {
    const int64_t key = int64_t{tile.key_tile} * kBlockN + get<0>(key_grad_rows(row, 0));
    if (key >= segment.keys) continue;
    float* const dk_row = segment.dk + tile.batch * segment.dk_strides[0] + key * segment.dk_strides[1] +
                          tile.kv_head * segment.dk_strides[2];
    float* const dv_row = segment.dv + tile.batch * segment.dv_strides[0] + key * segment.dv_strides[1] +
                          tile.kv_head * segment.dv_strides[2];
    if (problem.head_parts > 1) {
      CUTE_UNROLL
      for (int pair = 0; pair < kPairs; ++pair) {
        const int d = get<1>(key_grad_rows(row, 2 * pair));
        atomicAdd(reinterpret_cast<float2*>(dk_row + d),
                  make_float2(problem.scale * dK_rows(row, 2 * pair), problem.scale * dK_rows(row, 2 * pair + 1)));
        atomicAdd(reinterpret_cast<float2*>(dv_row + d),
                  make_float2(dV_rows(row, 2 * pair), dV_rows(row, 2 * pair + 1)));
      }
      continue;
    }
    float2 dk_old[kPairs], dv_old[kPairs];
    CUTE_UNROLL
    for (int pair = 0; pair < kPairs; ++pair) {
      const int d = get<1>(key_grad_rows(row, 2 * pair));
      dk_old[pair] = *reinterpret_cast<const float2*>(dk_row + d);
      dv_old[pair] = *reinterpret_cast<const float2*>(dv_row + d);
    }
    CUTE_UNROLL
    for (int pair = 0; pair < kPairs; ++pair) {
      const int d = get<1>(key_grad_rows(row, 2 * pair));
      *reinterpret_cast<float2*>(dk_row + d) =
          make_float2(fmaf(problem.scale, dK_rows(row, 2 * pair), dk_old[pair].x),
                      fmaf(problem.scale, dK_rows(row, 2 * pair + 1), dk_old[pair].y));
      *reinterpret_cast<float2*>(dv_row + d) =
          make_float2(dv_old[pair].x + dV_rows(row, 2 * pair), dv_old[pair].y + dV_rows(row, 2 * pair + 1));
    }
  }
}

template <class Traits>
__global__ void __launch_bounds__(Traits::kThreads, 1)
    backward_kernel(const __grid_constant__ BackwardParams<Traits> params) {
  auto& shared = aligned_shared_storage<typename Traits::SharedStorage>();
  const BackwardTile tile = backward_tile<Traits::kBlockM>(params.problem);
  if (tile.steps.count() == 0) return;  // no row sees these keys: dk and dv gain nothing
  const int warpgroup = cutlass::canonical_warp_group_idx();

  if (threadIdx.x == 0) {
    shared.keys_full.init(1);
    for (int stage = 0; stage < Traits::kStages; ++stage) {
      shared.rows_full[stage].init(32);  // the loading warp's lanes, each after its lse and delta
      shared.rows_empty[stage].init(Traits::kConsumerThreads);
    }
    cutlass::arch::fence_barrier_init();
  }
  __syncthreads();  // barriers initialized before anyone waits on them

  with_step_order(tile.steps.order, [&](auto order) {
    constexpr StepOrder kOrder = decltype(order)::value;
    if (warpgroup == 0) {
      // The producer needs few registers: give them to the consumers.
      cutlass::arch::warpgroup_reg_dealloc<Traits::kProducerRegisters>();
      const int warp = threadIdx.x / 32;
      if (warp == 0) load_tiles<kOrder>(params, tile, shared);
      if (warp == 1) add_query_grads<kOrder>(params, tile, shared);
    } else {
      cutlass::arch::warpgroup_reg_alloc<Traits::kConsumerRegisters>();
      consume<kOrder>(params, tile, shared);
    }
  });
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
      typename Traits::SmemQueryGradPart{}, Shape<Int<Traits::kBlockM>, _64>{}, _1{});
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
  // < 2^31: hopper_backward checks the whole groups' CTAs, and splits only launches of a few waves.
  const int64_t ctas = int64_t{problem.key_tiles} * problem.head_parts * problem.kv_heads * problem.batch;
  backward_kernel<Traits><<<static_cast<unsigned>(ctas), Traits::kThreads, Traits::kSharedBytes, stream>>>(params);
  SPATTN_CUDA_CHECK_LAUNCH("the own Hopper attention backward");
}

template <int kHeadDim, DType kDType>
void launch_backward(const BackwardProblem& problem, cudaStream_t stream) {
  using Element = std::conditional_t<kDType == DType::bf16, cutlass::bfloat16_t, cutlass::half_t>;
  launch_backward_tiles<BackwardTraits<kHeadDim, Element>>(problem, stream);
}

}  // namespace spattn::cuda::hopper
