#pragma once
/// \file device_memory.hpp
/// Owned memory on a device and copies between host and device, for callers that feed spattn
/// from host buffers (programs, tests, C++ users without a framework of their own).

#include <cstddef>

#include "spattn/device.hpp"

namespace spattn {

/// Bytes on a device (host memory for cpu, cudaMalloc for cuda), freed with this object.
class DeviceMemory {
 public:
  DeviceMemory() = default;
  DeviceMemory(const Device& device, std::size_t bytes);
  ~DeviceMemory();
  DeviceMemory(DeviceMemory&& other) noexcept;
  DeviceMemory& operator=(DeviceMemory&& other) noexcept;
  DeviceMemory(const DeviceMemory&) = delete;
  DeviceMemory& operator=(const DeviceMemory&) = delete;

  void* data() const { return data_; }
  std::size_t bytes() const { return bytes_; }
  const Device& device() const { return device_; }

 private:
  Device device_{};
  void* data_ = nullptr;
  std::size_t bytes_ = 0;
};

/// Copies `bytes` from `source` on `source_device` to `destination` on `destination_device`,
/// after all work queued on either device and before returning (a blocking copy).
void copy_bytes(const void* source, const Device& source_device, void* destination, const Device& destination_device,
                std::size_t bytes);

/// Blocks the host until all work queued on `device` has run (nothing to wait for on the cpu).
void synchronize_device(const Device& device);

/// GPUs of `kind` this process can see (1 for cpu; 0 in a build without that backend).
int visible_device_count(DeviceKind kind);

}  // namespace spattn
