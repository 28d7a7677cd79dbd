// copy, fill and add. Operands that fold into rows of contiguous elements (row_layout.hpp: whole
// tensors and their slices along any dimension but the last) take typed kernels that move four
// elements per load and compute no per-element index; anything else (a transposed view) takes
// the general kernels, one thread per element in row-major order.

#include <algorithm>

#include "core/cuda/cuda_check.hpp"
#include "kernels/cuda/element_conversion.cuh"
#include "kernels/cuda/kernel_launches.hpp"
#include "kernels/cuda/row_layout.hpp"

namespace spattn::cuda {
namespace {

constexpr int kThreadsPerBlock = 256;
// Beyond this many blocks each thread loops (grid-stride): enough to fill any current GPU.
constexpr int64_t kMaxBlocks = 1 << 16;
constexpr int64_t kMaxRowBlocks = 65535;  // CUDA's limit on gridDim.y

unsigned block_count(int64_t numel) {
  return static_cast<unsigned>(std::min((numel + kThreadsPerBlock - 1) / kThreadsPerBlock, kMaxBlocks));
}

// ---- Row kernels: blockIdx.y strides over rows, blockIdx.x over packs of Width elements in a row.

template <typename Source, typename Destination>
struct CopyPack {
  static constexpr std::size_t kSourceBytes = sizeof(Source), kDestinationBytes = sizeof(Destination);
  template <int Width>
  __device__ void operator()(const char* source, char* destination) const {
    float values[Width];
    load_pack<Source, Width>(source, values);
    store_pack<Destination, Width>(values, destination);
  }
};

template <typename Source>
struct AddPack {
  static constexpr std::size_t kSourceBytes = sizeof(Source), kDestinationBytes = sizeof(float);
  template <int Width>
  __device__ void operator()(const char* source, char* destination) const {
    float values[Width], sums[Width];
    load_pack<Source, Width>(source, values);
    load_pack<float, Width>(destination, sums);
#pragma unroll
    for (int i = 0; i < Width; ++i) sums[i] += values[i];
    store_pack<float, Width>(sums, destination);
  }
};

template <typename Destination>
struct FillPack {
  static constexpr std::size_t kSourceBytes = 0, kDestinationBytes = sizeof(Destination);
  float value;
  template <int Width>
  __device__ void operator()(const char*, char* destination) const {
    float values[Width];
#pragma unroll
    for (int i = 0; i < Width; ++i) values[i] = value;
    store_pack<Destination, Width>(values, destination);
  }
};

/// pack(source + e, destination + e) for every pack of Width elements of every row (a fill reads
/// no source: its kSourceBytes is 0).
template <int Width, typename Pack>
__global__ void rows_kernel(RowLayout layout, RowOperand source, RowOperand destination, Pack pack) {
  const int64_t packs_per_row = layout.row_length / Width;
  constexpr std::size_t source_size = Pack::kSourceBytes, destination_size = Pack::kDestinationBytes;
  for (int64_t row = blockIdx.y; row < layout.rows; row += gridDim.y) {
    const char* source_row = static_cast<const char*>(source.data) + row * source.row_stride * source_size;
    char* destination_row = static_cast<char*>(destination.data) + row * destination.row_stride * destination_size;
    for (int64_t index = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; index < packs_per_row;
         index += int64_t(gridDim.x) * blockDim.x) {
      const int64_t element = index * Width;
      pack.template operator()<Width>(source_row + element * source_size, destination_row + element * destination_size);
    }
  }
}

template <typename Pack>
void launch_rows(const RowLayout& layout, const RowOperand& source, const RowOperand& destination, const Pack& pack,
                 cudaStream_t stream, const char* name) {
  const unsigned row_blocks = static_cast<unsigned>(std::min(layout.rows, kMaxRowBlocks));
  const int64_t packs_per_row = layout.row_length / layout.vector_width;
  const unsigned blocks_per_row = static_cast<unsigned>(std::max<int64_t>(
      1, std::min<int64_t>((packs_per_row + kThreadsPerBlock - 1) / kThreadsPerBlock, kMaxBlocks / row_blocks)));
  const dim3 grid(blocks_per_row, row_blocks);
  if (layout.vector_width == 4)
    rows_kernel<4><<<grid, kThreadsPerBlock, 0, stream>>>(layout, source, destination, pack);
  else
    rows_kernel<1><<<grid, kThreadsPerBlock, 0, stream>>>(layout, source, destination, pack);
  SPATTN_CUDA_CHECK_LAUNCH(name);
}

// ---- General kernels, for operands that do not fold into rows.

__global__ void strided_copy_kernel(StridedOperand source, StridedOperand destination, int64_t numel) {
  for (int64_t flat = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; flat < numel;
       flat += int64_t(gridDim.x) * blockDim.x) {
    const float value = load_as_float(source.data, source.dtype, element_offset(source, flat));
    store_from_float(value, destination.data, destination.dtype, element_offset(destination, flat));
  }
}

__global__ void strided_fill_kernel(StridedOperand destination, int64_t numel, float value) {
  for (int64_t flat = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; flat < numel;
       flat += int64_t(gridDim.x) * blockDim.x) {
    store_from_float(value, destination.data, destination.dtype, element_offset(destination, flat));
  }
}

__global__ void strided_add_kernel(StridedOperand source, StridedOperand destination, int64_t numel) {
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
  const StridedOperand operands[] = {source, destination};
  RowLayout layout;
  RowOperand rows[2];
  if (fold_into_rows(operands, 2, layout, rows)) {
    visit_element_type(source.dtype, [&](auto source_element) {
      visit_element_type(destination.dtype, [&](auto destination_element) {
        launch_rows(layout, rows[0], rows[1], CopyPack<decltype(source_element), decltype(destination_element)>{},
                    stream, "copy rows_kernel");
      });
    });
    return;
  }
  strided_copy_kernel<<<block_count(numel), kThreadsPerBlock, 0, stream>>>(source, destination, numel);
  SPATTN_CUDA_CHECK_LAUNCH("strided_copy_kernel");
}

void launch_fill(const StridedOperand& destination, int64_t numel, float value, cudaStream_t stream) {
  if (numel == 0) return;
  RowLayout layout;
  RowOperand rows[1];
  if (fold_into_rows(&destination, 1, layout, rows)) {
    visit_element_type(destination.dtype, [&](auto destination_element) {
      launch_rows(layout, rows[0], rows[0], FillPack<decltype(destination_element)>{value}, stream,
                  "fill rows_kernel");
    });
    return;
  }
  strided_fill_kernel<<<block_count(numel), kThreadsPerBlock, 0, stream>>>(destination, numel, value);
  SPATTN_CUDA_CHECK_LAUNCH("strided_fill_kernel");
}

void launch_add(const StridedOperand& source, const StridedOperand& destination, int64_t numel,
                cudaStream_t stream) {
  if (numel == 0) return;
  const StridedOperand operands[] = {source, destination};
  RowLayout layout;
  RowOperand rows[2];
  if (fold_into_rows(operands, 2, layout, rows)) {
    visit_element_type(source.dtype, [&](auto source_element) {
      launch_rows(layout, rows[0], rows[1], AddPack<decltype(source_element)>{}, stream, "add rows_kernel");
    });
    return;
  }
  strided_add_kernel<<<block_count(numel), kThreadsPerBlock, 0, stream>>>(source, destination, numel);
  SPATTN_CUDA_CHECK_LAUNCH("strided_add_kernel");
}

}  // namespace spattn::cuda
