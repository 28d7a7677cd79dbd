#pragma once
// Owned device memory of a plan's workspace, taken from and given back to a BlockKernels.

#include <cstddef>
#include <utility>

#include "kernels/block_kernels.hpp"

namespace spattn {

class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(BlockKernels& kernels, std::size_t bytes)
      : kernels_(&kernels), data_(bytes ? kernels.allocate(bytes) : nullptr) {}
  ~DeviceBuffer() {
    if (data_) kernels_->deallocate(data_);
  }
  DeviceBuffer(DeviceBuffer&& other) noexcept
      : kernels_(other.kernels_), data_(std::exchange(other.data_, nullptr)) {}
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept {
    std::swap(kernels_, other.kernels_);
    std::swap(data_, other.data_);
    return *this;
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void* data() const { return data_; }

 private:
  BlockKernels* kernels_ = nullptr;
  void* data_ = nullptr;
};

}  // namespace spattn
