#pragma once
// What the own Hopper kernels' host code asks of a GPU and of the tensors handed to it, shared by
// the forward (hopper_forward.cpp) and the backward (hopper_backward.cpp). `kernel` names the
// kernel in the reasons given ("the own forward").

#include <cuda_runtime_api.h>

#include <atomic>
#include <cstdint>
#include <string>

#include "core/cuda/cuda_check.hpp"
#include "kernels/block_kernels.hpp"
#include "spattn/device.hpp"
#include "spattn/dtype.hpp"
#include "spattn/tensor.hpp"

namespace spattn::cuda::hopper {

/// What the kernels need to know of a GPU, asked once per device.
struct GpuFacts {
  std::string name;
  int major = 0;
  int minor = 0;
  int multiprocessors = 0;
};
const GpuFacts& gpu_facts(int device_index);

/// "" when `kernel` runs on `device` for `dtype` inputs at `head_dim`; otherwise why not. `built`:
/// whether this build has the instantiation; `built_head_dims`: those it has, in words.
std::string device_unsupported(const char* kernel, const Device& device, DType dtype, int64_t head_dim, bool built,
                               const std::string& built_head_dims);

/// The head dims this build has a kernel for (`built(head_dim)`), in words: "64, 128".
std::string built_head_dims(bool (*built)(int64_t head_dim));

/// "" when the tensor memory accelerator can read `tensor` (B, tokens, heads, D) or add into it:
/// head_dim contiguous, 16-byte aligned base and strides, sizes within int32.
std::string tma_addressable(const char* kernel, const TensorView& tensor, const char* name);

/// "" when `segment`'s k and v are readable by the tensor memory accelerator and fit `q`: (B, Sk,
/// HK, D) with q's B, D, dtype and device, HK dividing q's heads, k and v alike; otherwise why not.
std::string key_values_unsupported(const char* kernel, const KvSegment& segment, const TensorView& q);

/// "" for a finite positive softmax scale; otherwise why not.
std::string scale_unsupported(float scale);

/// The batch, token and head strides of a (B, S, H, D) or (B, H, S) tensor, in elements.
void copy_strides(const TensorView& tensor, int64_t (&strides)[3]);

/// Lets `kKernel` launch with `bytes` of dynamic shared memory (past the default 48 KB): once per
/// device of the calling thread's current one (a process may drive several; past 64, every time).
template <auto kKernel>
void allow_shared_memory(int bytes) {
  static std::atomic<uint64_t> devices_allowed{0};
  int device = 0;
  SPATTN_CUDA_CHECK(cudaGetDevice(&device));
  const uint64_t device_bit = device < 64 ? uint64_t{1} << device : 0;
  if (devices_allowed.load(std::memory_order_relaxed) & device_bit) return;
  SPATTN_CUDA_CHECK(cudaFuncSetAttribute(kKernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
  devices_allowed.fetch_or(device_bit, std::memory_order_relaxed);
}

}  // namespace spattn::cuda::hopper
