#include "spattn/device_memory.hpp"

#include <cstdlib>
#include <cstring>
#include <utility>

#include "spattn/error.hpp"

#ifdef SPATTN_WITH_CUDA
#include "core/cuda/cuda_check.hpp"
#include "core/cuda/current_device_guard.hpp"
#endif

namespace spattn {

namespace {

void check_backend(const Device& device) {
#ifndef SPATTN_WITH_CUDA
  SPATTN_CHECK(device.kind == DeviceKind::cpu,
               "no device memory on " << device_name(device) << " in this build; built in: cpu");
#else
  (void)device;
#endif
}

}  // namespace

DeviceMemory::DeviceMemory(const Device& device, std::size_t bytes) : device_(device), bytes_(bytes) {
  check_backend(device);
  if (bytes == 0) return;
  if (device.kind == DeviceKind::cpu) {
    data_ = std::malloc(bytes);
    SPATTN_CHECK(data_ != nullptr, "out of host memory allocating " << bytes << " bytes");
    return;
  }
#ifdef SPATTN_WITH_CUDA
  cuda::CurrentDeviceGuard guard(device.index);
  SPATTN_CUDA_CHECK(cudaMalloc(&data_, bytes));
#endif
}

DeviceMemory::~DeviceMemory() {
  if (data_ == nullptr) return;
  if (device_.kind == DeviceKind::cpu) {
    std::free(data_);
    return;
  }
#ifdef SPATTN_WITH_CUDA
  // A destructor must not throw; cudaFree waits for work that still reads the memory.
  try {
    cuda::CurrentDeviceGuard guard(device_.index);
    cudaFree(data_);
  } catch (...) {  // no device to switch to: nothing left to release on it
  }
#endif
}

DeviceMemory::DeviceMemory(DeviceMemory&& other) noexcept
    : device_(other.device_), data_(std::exchange(other.data_, nullptr)), bytes_(std::exchange(other.bytes_, 0)) {}

DeviceMemory& DeviceMemory::operator=(DeviceMemory&& other) noexcept {
  std::swap(device_, other.device_);
  std::swap(data_, other.data_);
  std::swap(bytes_, other.bytes_);
  return *this;
}

void copy_bytes(const void* source, const Device& source_device, void* destination, const Device& destination_device,
                std::size_t bytes) {
  check_backend(source_device);
  check_backend(destination_device);
  if (bytes == 0) return;
  if (source_device.kind == DeviceKind::cpu && destination_device.kind == DeviceKind::cpu) {
    std::memcpy(destination, source, bytes);
    return;
  }
#ifdef SPATTN_WITH_CUDA
  // Work queued on the non-blocking streams of plans is not ordered by cudaMemcpy (which follows
  // the legacy default stream only): wait for the whole device first.
  const Device& gpu = source_device.kind == DeviceKind::cuda ? source_device : destination_device;
  cuda::CurrentDeviceGuard guard(gpu.index);
  SPATTN_CUDA_CHECK(cudaDeviceSynchronize());
  SPATTN_CUDA_CHECK(cudaMemcpy(destination, source, bytes, cudaMemcpyDefault));
#endif
}

void synchronize_device(const Device& device) {
  check_backend(device);
#ifdef SPATTN_WITH_CUDA
  if (device.kind != DeviceKind::cuda) return;
  cuda::CurrentDeviceGuard guard(device.index);
  SPATTN_CUDA_CHECK(cudaDeviceSynchronize());
#endif
}

int visible_device_count(DeviceKind kind) {
  if (kind == DeviceKind::cpu) return 1;
#ifdef SPATTN_WITH_CUDA
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no device" error of a machine without GPUs
    return 0;
  }
  return count;
#else
  return 0;
#endif
}

}  // namespace spattn
