// copy, fill and add over tensors of any strides: one thread per element, row-major order,
// so that neighbouring threads touch neighbouring elements of contiguous tensors.

#include <algorithm>

#include "kernels/cuda/cuda_check.hpp"
#include "kernels/cuda/element_conversion.cuh"
#include "kernels/cuda/kernel_launches.hpp"

namespace spattn::cuda {
namespace {

constexpr int kThreadsPerBlock = 256;
// Beyond this many blocks each thread loops (grid-stride): enough to fill any current GPU.
constexpr int64_t kMaxBlocks = 1 << 16;

unsigned block_count(int64_t numel) {
  return static_cast<unsigned>(std::min((numel + kThreadsPerBlock - 1) / kThreadsPerBlock, kMaxBlocks));
}

__global__ void copy_kernel(StridedOperand source, StridedOperand destination, int64_t numel) {
  for (int64_t flat = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; flat < numel;
       flat += int64_t(gridDim.x) * blockDim.x) {
    const float value = load_as_float(source.data, source.dtype, element_offset(source, flat));
    store_from_float(value, destination.data, destination.dtype, element_offset(destination, flat));
  }
}

__global__ void fill_kernel(StridedOperand destination, int64_t numel, float value) {
  for (int64_t flat = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; flat < numel;
       flat += int64_t(gridDim.x) * blockDim.x) {
    store_from_float(value, destination.data, destination.dtype, element_offset(destination, flat));
  }
}

__global__ void add_kernel(StridedOperand source, StridedOperand destination, int64_t numel) {
  float* sums = static_cast<float*>(destination.data);
  for (int64_t flat = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; flat < numel;
       flat += int64_t(gridDim.x) * blockDim.x) {
    sums[element_offset(destination, flat)] +=
        load_as_float(source.data, source.dtype, element_offset(source, flat));
  }
}

}  // namespace

void launch_copy(const StridedOperand& source, const StridedOperand& destination, int64_t numel,
                 cudaStream_t stream) {
  if (numel == 0) return;
  copy_kernel<<<block_count(numel), kThreadsPerBlock, 0, stream>>>(source, destination, numel);
  SPATTN_CUDA_CHECK_LAUNCH("copy_kernel");
}

void launch_fill(const StridedOperand& destination, int64_t numel, float value, cudaStream_t stream) {
  if (numel == 0) return;
  fill_kernel<<<block_count(numel), kThreadsPerBlock, 0, stream>>>(destination, numel, value);
  SPATTN_CUDA_CHECK_LAUNCH("fill_kernel");
}

void launch_add(const StridedOperand& source, const StridedOperand& destination, int64_t numel,
                cudaStream_t stream) {
  if (numel == 0) return;
  add_kernel<<<block_count(numel), kThreadsPerBlock, 0, stream>>>(source, destination, numel);
  SPATTN_CUDA_CHECK_LAUNCH("add_kernel");
}

}  // namespace spattn::cuda
