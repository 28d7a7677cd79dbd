// merge and softmax_delta: the operations that work on whole (b, s, h) rows of a (B, S, H, D)
// tensor with one fp32 statistic per row in a (B, H, S) tensor. A group of neighbouring lanes
// (a power of two, at most a warp) per row, each lane moving up to 8 neighbouring elements per
// load where head_dim is contiguous and rows are aligned (always, for spattn's own buffers): a row
// is read in coalesced pieces, 16 bytes a lane for 16-bit types, by as few lanes as cover it. A
// block's rows are consecutive positions of one (batch, head), its blockIdx (z, y), so no lane
// divides to find its row (the 64-bit divisions of a flat row index made the kernels issue-bound).

#include <algorithm>
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
constexpr int kThreadsPerBlockLog2 = 7;
constexpr int kThreadsPerBlock = 1 << kThreadsPerBlockLog2;
constexpr unsigned kFullWarp = 0xffffffffu;

/// The (b, s, h) row of this thread's lane group, and the lane's place in the group. Every lane
/// stays to the end of the kernel, also past the last position (`in_sequence` false), because a
/// group's shuffles and __syncwarp take the whole warp.
struct RowLane {
  int64_t batch;
  int64_t position;
  int64_t head;
  int lane;  // in [0, lanes per row)
  bool in_sequence;
};

/// This thread's row and lane, with 1 << lanes_per_row_log2 lanes per row.
__device__ inline RowLane row_lane(const StridedOperand& rows_tensor, int lanes_per_row_log2) {
  RowLane row;
  row.batch = blockIdx.z;
  row.head = blockIdx.y;
  row.position =
      (int64_t(blockIdx.x) << (kThreadsPerBlockLog2 - lanes_per_row_log2)) + (threadIdx.x >> lanes_per_row_log2);
  row.lane = threadIdx.x & ((1 << lanes_per_row_log2) - 1);
  row.in_sequence = row.position < rows_tensor.shape[1];
  return row;
}

/// Offset of element d = 0 of `row` in a (B, S, H, D) tensor.
__device__ inline int64_t row_offset(const StridedOperand& tensor, const RowLane& row) {
  return row.batch * tensor.strides[0] + row.position * tensor.strides[1] + row.head * tensor.strides[2];
}

/// Offset of `row`'s statistic in a (B, H, S) tensor.
__device__ inline int64_t statistic_offset(const StridedOperand& statistics, const RowLane& row) {
  return row.batch * statistics.strides[0] + row.head * statistics.strides[1] +
         row.position * statistics.strides[2];
}

/// running = merge(running, partial) (BlockKernels::merge), or, when kRunningIsEmpty, running =
/// partial: the running result holds nothing yet and is written without being read.
template <typename Partial, int Width, bool kRunningIsEmpty>
__global__ void merge_kernel(StridedOperand partial_out,  // (B, S, H, D) Partial
                             StridedOperand partial_lse,  // (B, H, S) fp32
                             StridedOperand running_out,  // (B, S, H, D) fp32
                             StridedOperand running_lse,  // (B, H, S) fp32
                             int lanes_per_row_log2) {
  const RowLane row = row_lane(running_out, lanes_per_row_log2);
  float* lse_pointer = nullptr;
  MergeWeights weights{};
  if (row.in_sequence) {
    const int64_t head_dim = running_out.shape[3], lanes_stride = int64_t(Width) << lanes_per_row_log2;
    lse_pointer = static_cast<float*>(running_lse.data) + statistic_offset(running_lse, row);
    const float lse = kRunningIsEmpty ? -INFINITY : *lse_pointer;
    const float lse_partial = static_cast<const float*>(partial_lse.data)[statistic_offset(partial_lse, row)];
    float* out = static_cast<float*>(running_out.data) + row_offset(running_out, row);
    const Partial* partial = static_cast<const Partial*>(partial_out.data) + row_offset(partial_out, row);
    const int64_t out_stride = running_out.strides[3], partial_stride = partial_out.strides[3];
    weights = merge_weights(lse, lse_partial);
    for (int64_t d = int64_t(row.lane) * Width; d < head_dim; d += lanes_stride) {
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
  }
  // Every lane of the row has read lse before its first lane overwrites it.
  __syncwarp();
  if (row.in_sequence && row.lane == 0) *lse_pointer = weights.lse;
}

template <typename Out, typename Dout, int Width>
__global__ void softmax_delta_kernel(StridedOperand out,    // (B, S, H, D) Out
                                     StridedOperand dout,   // (B, S, H, D) Dout
                                     StridedOperand delta,  // (B, H, S) fp32
                                     int lanes_per_row_log2) {
  const RowLane row = row_lane(out, lanes_per_row_log2);
  // delta = sum_d out_d * dout_d: each lane sums its share, then the row's lanes add them up.
  float sum = 0.0f;
  if (row.in_sequence) {
    const int64_t head_dim = out.shape[3], lanes_stride = int64_t(Width) << lanes_per_row_log2;
    const Out* out_row = static_cast<const Out*>(out.data) + row_offset(out, row);
    const Dout* dout_row = static_cast<const Dout*>(dout.data) + row_offset(dout, row);
    for (int64_t d = int64_t(row.lane) * Width; d < head_dim; d += lanes_stride) {
      float out_values[Width], dout_values[Width];
      load_row_elements<Out, Width>(out_row, d, out.strides[3], out_values);
      load_row_elements<Dout, Width>(dout_row, d, dout.strides[3], dout_values);
#pragma unroll
      for (int i = 0; i < Width; ++i) sum += out_values[i] * dout_values[i];
    }
  }
  // Lane groups are aligned powers of two, so xor offsets below the group's size stay inside it.
  for (int offset = (1 << lanes_per_row_log2) / 2; offset > 0; offset /= 2)
    sum += __shfl_xor_sync(kFullWarp, sum, offset);
  if (row.in_sequence && row.lane == 0) static_cast<float*>(delta.data)[statistic_offset(delta, row)] = sum;
}

/// merge_kernel's instance for `running_is_empty`.
template <typename Partial, int Width>
auto merge_kernel_of_width(bool running_is_empty) {
  return running_is_empty ? merge_kernel<Partial, Width, true> : merge_kernel<Partial, Width, false>;
}

/// How a launch of the row kernels covers the rows of a (B, S, H, D) tensor: Width elements per
/// load, 1 << lanes_per_row_log2 lanes per row, and the grid (positions, heads, batches).
struct RowLaunch {
  int width;
  int lanes_per_row_log2;
  dim3 grid;
};

/// The widest pack (8, 4 or 1 elements) that every operand's rows take, the fewest lanes (a power
/// of two up to a warp) whose packs cover head_dim in one pass, and the grid for them.
RowLaunch row_launch(std::initializer_list<const StridedOperand*> operands) {
  const StridedOperand& rows_tensor = **operands.begin();
  const int64_t batches = rows_tensor.shape[0], sequence = rows_tensor.shape[1], heads = rows_tensor.shape[2],
                head_dim = rows_tensor.shape[3];
  RowLaunch launch{1, 0, dim3(0, 0, 0)};
  for (int width : {8, 4})
    if (rows_take_packs(operands, width)) {
      launch.width = width;
      break;
    }
  const int64_t packs_per_row = (head_dim + launch.width - 1) / launch.width;
  while ((int64_t(1) << launch.lanes_per_row_log2) < std::min<int64_t>(packs_per_row, kWarpSize))
    ++launch.lanes_per_row_log2;
  const int64_t rows_per_block = kThreadsPerBlock >> launch.lanes_per_row_log2;
  const int64_t position_blocks = (sequence + rows_per_block - 1) / rows_per_block;
  constexpr int64_t kMaxGridY = 65535, kMaxGridZ = 65535;
  SPATTN_CHECK(heads <= kMaxGridY && batches <= kMaxGridZ && position_blocks <= std::numeric_limits<int>::max(),
               "the row kernels take at most " << kMaxGridY << " heads, " << kMaxGridZ << " batches and "
                                               << std::numeric_limits<int>::max() * rows_per_block << " positions; got "
                                               << heads << " heads, " << batches << " batches, " << sequence
                                               << " positions");
  launch.grid =
      dim3(static_cast<unsigned>(position_blocks), static_cast<unsigned>(heads), static_cast<unsigned>(batches));
  return launch;
}

/// Whether a launch has any row (a dimension of 0 leaves nothing to do).
bool has_rows(const RowLaunch& launch) { return launch.grid.x != 0 && launch.grid.y != 0 && launch.grid.z != 0; }

}  // namespace

void launch_merge(const StridedOperand& partial_out, const StridedOperand& partial_lse,
                  const StridedOperand& running_out, const StridedOperand& running_lse, bool running_is_empty,
                  cudaStream_t stream) {
  const RowLaunch launch = row_launch({&running_out, &partial_out});
  if (!has_rows(launch)) return;
  visit_element_type(partial_out.dtype, [&](auto partial_element) {
    using Partial = decltype(partial_element);
    const auto kernel = launch.width == 8   ? merge_kernel_of_width<Partial, 8>(running_is_empty)
                        : launch.width == 4 ? merge_kernel_of_width<Partial, 4>(running_is_empty)
                                            : merge_kernel_of_width<Partial, 1>(running_is_empty);
    kernel<<<launch.grid, kThreadsPerBlock, 0, stream>>>(partial_out, partial_lse, running_out, running_lse,
                                                         launch.lanes_per_row_log2);
  });
  SPATTN_CUDA_CHECK_LAUNCH("merge_kernel");
}

void launch_softmax_delta(const StridedOperand& out, const StridedOperand& dout, const StridedOperand& delta,
                          cudaStream_t stream) {
  const RowLaunch launch = row_launch({&out, &dout});
  if (!has_rows(launch)) return;
  visit_element_type(out.dtype, [&](auto out_element) {
    visit_element_type(dout.dtype, [&](auto dout_element) {
      using Out = decltype(out_element);
      using Dout = decltype(dout_element);
      const auto kernel = launch.width == 8   ? softmax_delta_kernel<Out, Dout, 8>
                          : launch.width == 4 ? softmax_delta_kernel<Out, Dout, 4>
                                              : softmax_delta_kernel<Out, Dout, 1>;
      kernel<<<launch.grid, kThreadsPerBlock, 0, stream>>>(out, dout, delta, launch.lanes_per_row_log2);
    });
  });
  SPATTN_CUDA_CHECK_LAUNCH("softmax_delta_kernel");
}

}  // namespace spattn::cuda
