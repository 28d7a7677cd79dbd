#pragma once
// A tensor in a device's memory, made from and read back into a HostTensor: how the programs
// and tests hand their host-side problems to strategies on any device.

#include "host_tensor.hpp"
#include "spattn/device_memory.hpp"
#include "spattn/tensor.hpp"

namespace spattn {

class DeviceTensor {
 public:
  DeviceTensor() = default;
  /// A copy of `host` on `device`.
  DeviceTensor(const HostTensor& host, const Device& device);

  const TensorView& view() const { return view_; }
  TensorView& view() { return view_; }
  /// A host copy (waits for the device's queued work first).
  HostTensor to_host() const;

 private:
  DeviceMemory memory_;
  TensorView view_;
};

}  // namespace spattn
