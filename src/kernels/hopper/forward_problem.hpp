#pragma once
// One launch of the own forward as plain data: what the host (hopper_forward.cpp, compiled by the
// host compiler) hands the CuTe kernel (forward_kernel.cuh, one instantiation per head dim and
// dtype). Strides are in elements; every tensor's last dimension is contiguous.

#include <cuda_runtime_api.h>

#include <cstdint>

#include "spattn/dtype.hpp"

namespace spattn::cuda::hopper {

/// Key segments one launch takes: their tensor maps travel in the kernel's parameters (128 bytes
/// each, two per segment). A block of more segments runs as several launches.
constexpr int kMaxSegmentsPerLaunch = 8;

/// Query rows per tile at head dim 128 (64 for each of two consumer warpgroups), the fewest of any
/// instantiation (head dim 64 takes 192): what bounds the number of tiles of a launch.
constexpr int kQueryTileRows = 128;

struct ForwardSegment {
  const void* k = nullptr;  // (B, keys, HK, D)
  const void* v = nullptr;  // (B, keys, HK, D)
  int64_t k_strides[3] = {};  // batch, token, head
  int64_t v_strides[3] = {};
  int32_t keys = 0;
  int64_t position = 0;  // global position of key 0
};

struct ForwardProblem {
  const void* q = nullptr;  // (B, Sq, H, D)
  int64_t q_strides[3] = {};  // batch, token, head
  int32_t batch = 0;
  int32_t rows = 0;  // Sq
  int32_t heads = 0;
  int32_t kv_heads = 0;
  int64_t q_position = 0;  // global position of query row 0
  ForwardSegment segments[kMaxSegmentsPerLaunch];
  int num_segments = 0;
  int64_t mask_left = -1;  // AttentionMask: query i sees key j when i - left <= j <= i + right
  int64_t mask_right = -1;
  float scale = 1.0f;
  float* out = nullptr;  // (B, Sq, H, D) fp32
  int64_t out_strides[3] = {};  // batch, token, head
  float* lse = nullptr;  // (B, H, Sq) fp32
  int64_t lse_strides[3] = {};  // batch, head, token
  bool accumulate = false;  // merge into (out, lse) instead of writing them
  void* final_out = nullptr;  // (B, Sq, H, D) in the inputs' dtype: written instead of out when set
  int64_t final_out_strides[3] = {};  // batch, token, head
  unsigned* tile_counter = nullptr;  // QueryTileCounter::data(): masked launches schedule by it
};

/// Enqueues `problem` on `stream` (persistent: at most `multiprocessors` CTAs). Defined for
/// kHeadDim 64 and 128, kDType bf16 and f16, one instantiation file each.
template <int kHeadDim, DType kDType>
void launch_forward(const ForwardProblem& problem, int multiprocessors, cudaStream_t stream);

}  // namespace spattn::cuda::hopper
