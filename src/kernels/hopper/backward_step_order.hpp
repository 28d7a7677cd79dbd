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
//   itself (model: 0.98-1.00 causal, 0.96-0.98 without a mask in either order).

#include "kernels/hopper/key_tile_plan.hpp"  // SPATTN_HOST_DEVICE, TileSpan

namespace spattn::cuda::hopper {

/// One step of a CTA's loop: a query head and a query tile of the block.
struct QueryStep {
  int head;
  int m_block;
};

/// The steps of one CTA: every query tile of a span of the query heads [first_head, first_head +
/// heads), in the order of the file's comment. It keeps only what its loops need from step to step
/// (the loading warp runs them in 24 registers): the coordinate that moves every step wraps over
/// [inner_first, inner_end), and the other then moves by one.
struct BackwardSteps {
  QueryStep first{0, 0};
  int count = 0;
  int inner_first = 0;
  int inner_end = 0;
  bool heads_inner = false;  // deterministic mode: query tiles descending, heads inner

  SPATTN_HOST_DEVICE static BackwardSteps of(int first_head, int heads, TileSpan query_tiles, bool in_turn_order) {
    BackwardSteps steps;
    steps.count = query_tiles.empty() ? 0 : heads * (query_tiles.end - query_tiles.begin);
    steps.heads_inner = in_turn_order;
    if (in_turn_order) {
      steps.first = QueryStep{first_head, query_tiles.end - 1};
      steps.inner_first = first_head;
      steps.inner_end = first_head + heads;
    } else {
      steps.first = QueryStep{first_head, query_tiles.begin};
      steps.inner_first = query_tiles.begin;
      steps.inner_end = query_tiles.end;
    }
    return steps;
  }
  /// The step after `at`.
  SPATTN_HOST_DEVICE void advance(QueryStep& at) const {
    if (heads_inner) {
      if (++at.head < inner_end) return;
      at.head = inner_first;
      --at.m_block;
      return;
    }
    if (++at.m_block < inner_end) return;
    at.m_block = inner_first;
    ++at.head;
  }
};

}  // namespace spattn::cuda::hopper
