// merge and softmax_delta: the operations that work on whole (b, s, h) rows of a (B, S, H, D)
// tensor with one fp32 statistic per row in a (B, H, S) tensor. One warp per row: its lanes
// stride over head_dim, 4 neighbouring elements per lane and load where head_dim is contiguous
// and rows are aligned (always, for spattn's own buffers), so a row is read in coalesced pieces.

#include <cmath>
#include <cstdint>
#include <limits>

#include "core/cuda/cuda_check.hpp"
#include "kernels/cuda/element_conversion.cuh"
#include "kernels/cuda/kernel_launches.hpp"
#include "kernels/cuda/merge_weights.cuh"

namespace spattn::cuda {
namespace {

constexpr int kWarpSize = 32;
constexpr int kWarpsPerBlock = 4;
constexpr int kThreadsPerBlock = kWarpSize * kWarpsPerBlock;
constexpr unsigned kFullWarp = 0xffffffffu;

/// The (b, s, h) row a warp works on, from the (B, S, H, D) tensor's shape.
struct Row {
  int64_t batch;
  int64_t position;
  int64_t head;
};

/// This warp's row, or false when the warp is past the last row (the whole warp leaves).
__device__ inline bool warp_row(const StridedOperand& rows_tensor, Row& row) {
  const int64_t heads = rows_tensor.shape[2], sequence = rows_tensor.shape[1];
  const int64_t index = int64_t(blockIdx.x) * kWarpsPerBlock + threadIdx.x / kWarpSize;
  if (index >= rows_tensor.shape[0] * sequence * heads) return false;
  row.head = index % heads;
  row.position = (index / heads) % sequence;
  row.batch = index / (heads * sequence);
  return true;
}

/// Offset of element d = 0 of `row` in a (B, S, H, D) tensor.
__device__ inline int64_t row_offset(const StridedOperand& tensor, const Row& row) {
  return row.batch * tensor.strides[0] + row.position * tensor.strides[1] + row.head * tensor.strides[2];
}

/// Offset of `row`'s statistic in a (B, H, S) tensor.
__device__ inline int64_t statistic_offset(const StridedOperand& statistics, const Row& row) {
  return row.batch * statistics.strides[0] + row.head * statistics.strides[1] +
         row.position * statistics.strides[2];
}

/// running = merge(running, partial) (BlockKernels::merge), or, when kRunningIsEmpty, running =
/// partial: the running result holds nothing yet and is written without being read.
template <typename Partial, int Width, bool kRunningIsEmpty>
__global__ void merge_kernel(StridedOperand partial_out,  // (B, S, H, D) Partial
                             StridedOperand partial_lse,  // (B, H, S) fp32
                             StridedOperand running_out,  // (B, S, H, D) fp32
                             StridedOperand running_lse) {  // (B, H, S) fp32
  Row row;
  if (!warp_row(running_out, row)) return;
  const int lane = threadIdx.x % kWarpSize;
  const int64_t head_dim = running_out.shape[3];
  float* lse_pointer = static_cast<float*>(running_lse.data) + statistic_offset(running_lse, row);
  const float lse = kRunningIsEmpty ? -INFINITY : *lse_pointer;
  const float lse_partial = static_cast<const float*>(partial_lse.data)[statistic_offset(partial_lse, row)];
  float* out = static_cast<float*>(running_out.data) + row_offset(running_out, row);
  const Partial* partial = static_cast<const Partial*>(partial_out.data) + row_offset(partial_out, row);
  const int64_t out_stride = running_out.strides[3], partial_stride = partial_out.strides[3];

  const MergeWeights weights = merge_weights(lse, lse_partial);
  for (int64_t d = int64_t(lane) * Width; d < head_dim; d += int64_t(kWarpSize) * Width) {
    float merged_out[Width] = {};
    if (weights.running != 0.0f) {
      float running_values[Width];
      load_row_elements<float, Width>(out, d, out_stride, running_values);
#pragma unroll
      for (int i = 0; i < Width; ++i) merged_out[i] = running_values[i] * weights.running;
    }
    if (weights.partial != 0.0f) {
      float partial_values[Width];
      load_row_elements<Partial, Width>(partial, d, partial_stride, partial_values);
#pragma unroll
      for (int i = 0; i < Width; ++i) merged_out[i] += partial_values[i] * weights.partial;
    }
    store_row_elements<float, Width>(merged_out, out, d, out_stride);
  }
  // Every lane has read lse before lane 0 overwrites it.
  __syncwarp();
  if (lane == 0) *lse_pointer = weights.lse;
}

template <typename Out, typename Dout, int Width>
__global__ void softmax_delta_kernel(StridedOperand out,     // (B, S, H, D) Out
                                     StridedOperand dout,    // (B, S, H, D) Dout
                                     StridedOperand delta) {  // (B, H, S) fp32
  Row row;
  if (!warp_row(out, row)) return;
  const int lane = threadIdx.x % kWarpSize;
  const int64_t head_dim = out.shape[3];
  const Out* out_row = static_cast<const Out*>(out.data) + row_offset(out, row);
  const Dout* dout_row = static_cast<const Dout*>(dout.data) + row_offset(dout, row);
  // delta = sum_d out_d * dout_d: each lane sums its share, then the warp adds them up.
  float sum = 0.0f;
  for (int64_t d = int64_t(lane) * Width; d < head_dim; d += int64_t(kWarpSize) * Width) {
    float out_values[Width], dout_values[Width];
    load_row_elements<Out, Width>(out_row, d, out.strides[3], out_values);
    load_row_elements<Dout, Width>(dout_row, d, dout.strides[3], dout_values);
#pragma unroll
    for (int i = 0; i < Width; ++i) sum += out_values[i] * dout_values[i];
  }
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2) sum += __shfl_xor_sync(kFullWarp, sum, offset);
  if (lane == 0) static_cast<float*>(delta.data)[statistic_offset(delta, row)] = sum;
}

/// Blocks of kWarpsPerBlock warps that give every (b, s, h) row its warp.
unsigned warp_row_blocks(const StridedOperand& rows_tensor) {
  const int64_t rows = rows_tensor.shape[0] * rows_tensor.shape[1] * rows_tensor.shape[2];
  const int64_t blocks = (rows + kWarpsPerBlock - 1) / kWarpsPerBlock;
  SPATTN_CHECK(blocks <= std::numeric_limits<int>::max(),
               rows << " rows are more than one launch of the row kernels can cover");
  return static_cast<unsigned>(blocks);
}

}  // namespace

void launch_merge(const StridedOperand& partial_out, const StridedOperand& partial_lse,
                  const StridedOperand& running_out, const StridedOperand& running_lse, bool running_is_empty,
                  cudaStream_t stream) {
  const unsigned blocks = warp_row_blocks(running_out);
  if (blocks == 0) return;
  const bool packs = rows_take_packs_of_4({&partial_out, &running_out});
  visit_element_type(partial_out.dtype, [&](auto partial_element) {
    using Partial = decltype(partial_element);
    const auto kernel = running_is_empty ? (packs ? merge_kernel<Partial, 4, true> : merge_kernel<Partial, 1, true>)
                                         : (packs ? merge_kernel<Partial, 4, false> : merge_kernel<Partial, 1, false>);
    kernel<<<blocks, kThreadsPerBlock, 0, stream>>>(partial_out, partial_lse, running_out, running_lse);
  });
  SPATTN_CUDA_CHECK_LAUNCH("merge_kernel");
}

void launch_softmax_delta(const StridedOperand& out, const StridedOperand& dout, const StridedOperand& delta,
                          cudaStream_t stream) {
  const unsigned blocks = warp_row_blocks(out);
  if (blocks == 0) return;
  const bool packs = rows_take_packs_of_4({&out, &dout});
  visit_element_type(out.dtype, [&](auto out_element) {
    visit_element_type(dout.dtype, [&](auto dout_element) {
      using Out = decltype(out_element);
      using Dout = decltype(dout_element);
      const auto kernel = packs ? softmax_delta_kernel<Out, Dout, 4> : softmax_delta_kernel<Out, Dout, 1>;
      kernel<<<blocks, kThreadsPerBlock, 0, stream>>>(out, dout, delta);
    });
  });
  SPATTN_CUDA_CHECK_LAUNCH("softmax_delta_kernel");
}

}  // namespace spattn::cuda
