#include "spattn/device.hpp"

namespace spattn {

std::string device_kind_name(DeviceKind kind) { return kind == DeviceKind::cpu ? "cpu" : "cuda"; }

std::string device_name(const Device& device) {
  const std::string kind = device_kind_name(device.kind);
  return device.kind == DeviceKind::cpu ? kind : kind + ":" + std::to_string(device.index);
}

}  // namespace spattn
