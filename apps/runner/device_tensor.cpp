#include "device_tensor.hpp"

namespace spattn {

namespace {

std::size_t bytes_of(const TensorView& view) {
  return static_cast<std::size_t>(view.numel()) * dtype_size(view.dtype);
}

}  // namespace

DeviceTensor::DeviceTensor(const HostTensor& host, const Device& device)
    : memory_(device, bytes_of(host.view())), view_(host.view()) {
  view_.data = memory_.data();
  view_.device = device;
  copy_bytes(host.view().data, Device::cpu(), view_.data, device, bytes_of(view_));
}

HostTensor DeviceTensor::to_host() const {
  HostTensor host = HostTensor::like(view_);
  copy_bytes(view_.data, view_.device, host.view().data, Device::cpu(), bytes_of(view_));
  return host;
}

}  // namespace spattn
