#pragma once
// The order of one backward CTA's steps, the (query head, query tile) pairs that its key tile
// meets, for the host and the kernel alike (and the CPU tests, which have no CUDA headers). Every
// order computes the same dK and dV; the order matters to the adds of dQ, which several key tiles
// make into each query tile's rows.
// - Racing adds (the default): head by head, query tiles ascending. The CTAs of a group at work
//   at once then add into different query tiles (under the causal mask key tile t is at query
//   tile 2t + s at its step s).
// - Deterministic mode: each query tile's adds go in ascending key tile order (QueryGradTurns).
//   Head by head, key tile t of a causal block would reach query tile m of head h 2(h + 1) steps
//   before key tile t - 1 (which meets two more query tiles of every head up to h): each key tile
//   waits for the one before it, the waits add up along the group's key tiles, and a causal
//   launch takes about as long as a non-causal one (a model: 0.66-0.68 of the racing adds' speed
//   at 4k and 8k causal, GQA 32/8; measured 0.73-0.75 on an H100, 2026-12-06). From the last query
//   tile down, every head of a tile in turn, key tile t meets each (head, tile) at the same step
//   as key tile t - 1 or later, since the query tiles that key tiles see end alike under the
//   causal mask and later for later key tiles under a window: a key tile waits only for the add
//   itself (model: 0.98-1.00 causal, 0.96-0.98 without a mask in either order; measured 0.89-0.92
//   causal and 0.92-0.99 without a mask at 4k-16k, H100, 2026-12-06, bench/results/
//   gpu-device-run-2026-12-06d.md).

#include <type_traits>

#include "kernels/hopper/key_tile_plan.hpp"  // SPATTN_HOST_DEVICE, TileSpan

namespace spattn::cuda::hopper {

/// One step of a CTA's loop: a query head and a query tile of the block.
struct QueryStep {
  int head;
  int m_block;
};

/// The two orders of the file's comment.
enum class StepOrder { head_by_head, in_turn };

/// The steps of one CTA: every query tile of a span of the query heads [first_head, first_head +
/// heads), in `order`. The loops take the order as a template argument (with_step_order).
struct BackwardSteps {
  int first_head = 0;
  int heads = 0;
  TileSpan query_tiles{0, 0};
  StepOrder order = StepOrder::head_by_head;

  SPATTN_HOST_DEVICE int count() const {
    return query_tiles.empty() ? 0 : heads * (query_tiles.end - query_tiles.begin);
  }
  template <StepOrder kOrder>
  SPATTN_HOST_DEVICE QueryStep first() const {
    if constexpr (kOrder == StepOrder::in_turn) return QueryStep{first_head, query_tiles.end - 1};
    return QueryStep{first_head, query_tiles.begin};
  }
  /// The step after `at`.
  template <StepOrder kOrder>
  SPATTN_HOST_DEVICE void advance(QueryStep& at) const {
    if constexpr (kOrder == StepOrder::in_turn) {
      if (++at.head < first_head + heads) return;
      at.head = first_head;
      --at.m_block;
    } else {
      if (++at.m_block < query_tiles.end) return;
      at.m_block = query_tiles.begin;
      ++at.head;
    }
  }
};

/// Calls `body` with `order` as a compile-time constant (a std::integral_constant). The kernel
/// compiles its roles once per order: with the order chosen at every step, the producer warps,
/// which run in 24 registers, spilled and re-read their shared memory addresses every step, and the
/// racing backward without a mask was 3-6% slower (H100, 2026-12-06).
template <class Body>
SPATTN_HOST_DEVICE void with_step_order(StepOrder order, Body&& body) {
  if (order == StepOrder::in_turn) {
    body(std::integral_constant<StepOrder, StepOrder::in_turn>{});
  } else {
    body(std::integral_constant<StepOrder, StepOrder::head_by_head>{});
  }
}

}  // namespace spattn::cuda::hopper
