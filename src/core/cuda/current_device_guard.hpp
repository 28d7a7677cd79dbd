#pragma once
// Makes one GPU current for a scope and restores the caller's afterwards: a process that drives
// several GPUs (or PyTorch with another current device) must not find its device changed.

#include <cuda_runtime_api.h>

#include "core/cuda/cuda_check.hpp"

namespace spattn::cuda {

class CurrentDeviceGuard {
 public:
  explicit CurrentDeviceGuard(int device_index) : device_index_(device_index) {
    SPATTN_CUDA_CHECK(cudaGetDevice(&previous_index_));
    if (previous_index_ != device_index_) SPATTN_CUDA_CHECK(cudaSetDevice(device_index_));
  }
  ~CurrentDeviceGuard() {
    // A destructor must not throw; switching back to a device that was current a moment ago
    // cannot fail for a reason the caller could act on.
    if (previous_index_ != device_index_) cudaSetDevice(previous_index_);
  }
  CurrentDeviceGuard(const CurrentDeviceGuard&) = delete;
  CurrentDeviceGuard& operator=(const CurrentDeviceGuard&) = delete;

 private:
  int device_index_;
  int previous_index_ = 0;
};

}  // namespace spattn::cuda
