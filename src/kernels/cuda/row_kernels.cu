// merge and softmax_delta: the operations that work on whole (b, s, h) rows of a (B, S, H, D)
// tensor with one fp32 statistic per row in a (B, H, S) tensor. One warp per row: its lanes
// stride over head_dim, so a row of a contiguous tensor is read in coalesced pieces.

#include <cmath>
#include <cstdint>
#include <limits>

#include "kernels/cuda/cuda_check.hpp"
#include "kernels/cuda/element_conversion.cuh"
#include "kernels/cuda/kernel_launches.hpp"

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

__global__ void merge_kernel(StridedOperand partial_out,  // (B, S, H, D) any dtype
                             StridedOperand partial_lse,  // (B, H, S) fp32
                             StridedOperand running_out,  // (B, S, H, D) fp32
                             StridedOperand running_lse) {  // (B, H, S) fp32
  Row row;
  if (!warp_row(running_out, row)) return;
  const int lane = threadIdx.x % kWarpSize;
  const int64_t head_dim = running_out.shape[3];
  float* lse_pointer = static_cast<float*>(running_lse.data) + statistic_offset(running_lse, row);
  const float lse = *lse_pointer;
  const float lse_partial = static_cast<const float*>(partial_lse.data)[statistic_offset(partial_lse, row)];
  float* out = static_cast<float*>(running_out.data) + row_offset(running_out, row);
  const int64_t out_stride = running_out.strides[3];

  const float high = fmaxf(lse, lse_partial);
  if (high == -INFINITY) {
    // Neither side saw a key: out = 0, lse stays -inf.
    for (int64_t d = lane; d < head_dim; d += kWarpSize) out[d * out_stride] = 0.0f;
    return;
  }
  const float low = fminf(lse, lse_partial);
  // lse' = max + log1p(exp(min - max))
  const float merged = high + log1pf(expf(low - high));
  // out' = out exp(lse - lse') + out_b exp(lse_b - lse'); a side of weight 0 (lse = -inf, or
  // too far below) is not read, so whatever it holds never reaches the result.
  const float running_weight = expf(lse - merged);
  const float partial_weight = expf(lse_partial - merged);
  const int64_t partial_base = row_offset(partial_out, row);
  const int64_t partial_stride = partial_out.strides[3];
  for (int64_t d = lane; d < head_dim; d += kWarpSize) {
    float merged_out = running_weight == 0.0f ? 0.0f : out[d * out_stride] * running_weight;
    if (partial_weight != 0.0f)
      merged_out += load_as_float(partial_out.data, partial_out.dtype, partial_base + d * partial_stride) *
                    partial_weight;
    out[d * out_stride] = merged_out;
  }
  // Every lane has read lse before lane 0 overwrites it.
  __syncwarp();
  if (lane == 0) *lse_pointer = merged;
}

__global__ void softmax_delta_kernel(StridedOperand out,     // (B, S, H, D) any dtype
                                     StridedOperand dout,    // (B, S, H, D) any dtype
                                     StridedOperand delta) {  // (B, H, S) fp32
  Row row;
  if (!warp_row(out, row)) return;
  const int lane = threadIdx.x % kWarpSize;
  const int64_t head_dim = out.shape[3];
  const int64_t out_base = row_offset(out, row), dout_base = row_offset(dout, row);
  // delta = sum_d out_d * dout_d: each lane sums its strided share, then the warp adds them up.
  float sum = 0.0f;
  for (int64_t d = lane; d < head_dim; d += kWarpSize) {
    sum += load_as_float(out.data, out.dtype, out_base + d * out.strides[3]) *
           load_as_float(dout.data, dout.dtype, dout_base + d * dout.strides[3]);
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
                  const StridedOperand& running_out, const StridedOperand& running_lse, cudaStream_t stream) {
  const unsigned blocks = warp_row_blocks(running_out);
  if (blocks == 0) return;
  merge_kernel<<<blocks, kThreadsPerBlock, 0, stream>>>(partial_out, partial_lse, running_out, running_lse);
  SPATTN_CUDA_CHECK_LAUNCH("merge_kernel");
}

void launch_softmax_delta(const StridedOperand& out, const StridedOperand& dout, const StridedOperand& delta,
                          cudaStream_t stream) {
  const unsigned blocks = warp_row_blocks(out);
  if (blocks == 0) return;
  softmax_delta_kernel<<<blocks, kThreadsPerBlock, 0, stream>>>(out, dout, delta);
  SPATTN_CUDA_CHECK_LAUNCH("softmax_delta_kernel");
}

}  // namespace spattn::cuda
