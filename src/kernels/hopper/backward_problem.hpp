#pragma once
// One launch of the own backward as plain data: what the host (hopper_backward.cpp, compiled by
// the host compiler) hands the CuTe kernel (backward_kernel.cuh, one instantiation per head dim
// and dtype). Strides are in elements; every tensor's last dimension is contiguous.

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/hopper/backward_tiles.hpp"
#include "kernels/hopper/forward_problem.hpp"
#include "spattn/dtype.hpp"

namespace spattn::cuda::hopper {

struct BackwardSegment {
  const void* k = nullptr;    // (B, keys, HK, D)
  const void* v = nullptr;    // (B, keys, HK, D)
  float* dk = nullptr;        // (B, keys, HK, D) fp32, accumulated
  float* dv = nullptr;        // (B, keys, HK, D) fp32, accumulated
  int64_t k_strides[3] = {};  // batch, token, head
  int64_t v_strides[3] = {};
  int64_t dk_strides[3] = {};
  int64_t dv_strides[3] = {};
  int32_t keys = 0;
  int64_t position = 0;    // global position of key 0
  int32_t first_tile = 0;  // of the launch's key tiles, numbered over its segments in turn
};

struct BackwardProblem {
  const void* q = nullptr;     // (B, Sq, H, D)
  const void* dout = nullptr;  // (B, Sq, H, D)
  int64_t q_strides[3] = {};   // batch, token, head
  int64_t dout_strides[3] = {};
  const float* lse = nullptr;    // (B, H, Sq) fp32, of the whole attention
  const float* delta = nullptr;  // (B, H, Sq) fp32, rowsum(dout * out) of the whole attention
  int64_t lse_strides[3] = {};   // batch, head, token
  int64_t delta_strides[3] = {};
  float* dq = nullptr;  // (B, Sq, H, D) fp32, accumulated
  int64_t dq_strides[3] = {};
  // (B, H, query tiles of backward_query_tile(D) rows) zeroed turn counters: dQ added into dq in the
  // order of the key tiles (QueryGradTurns, deterministic mode); null: in any order.
  int* dq_turns = nullptr;
  int32_t batch = 0;
  int32_t rows = 0;  // Sq
  int32_t heads = 0;
  int32_t kv_heads = 0;
  // CTAs per (key tile, kv head), each visiting its own part of the GQA group's query heads
  // (backward_head_parts.hpp); past one they add dK and dV into the segments' fp32 by atomics.
  int32_t head_parts = 1;
  // Groups (parts of a kv head's GQA group of a batch entry) per band of the grid's order
  // (backward_tile_order.hpp): a divisor of head_parts * kv_heads * batch.
  int32_t band_groups = 1;
  int64_t q_position = 0;  // global position of query row 0
  BackwardSegment segments[kMaxSegmentsPerLaunch];
  int num_segments = 0;
  int32_t key_tiles = 0;   // over all segments: the grid's first dimension
  int64_t mask_left = -1;  // AttentionMask: query i sees key j when i - left <= j <= i + right
  int64_t mask_right = -1;
  float scale = 1.0f;
};

/// Enqueues `problem` on `stream`: one CTA per (key tile, part of a GQA group, kv head, batch), in
/// the order of backward_tile_order.hpp. Defined for kHeadDim 64 and 128, kDType bf16 and f16, one
/// instantiation file each.
template <int kHeadDim, DType kDType>
void launch_backward(const BackwardProblem& problem, cudaStream_t stream);

}  // namespace spattn::cuda::hopper
