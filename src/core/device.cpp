#include "spattn/device.hpp"

namespace spattn {

std::string device_name(const Device& device) {
  return device.kind == DeviceKind::cpu ? "cpu" : "cuda:" + std::to_string(device.index);
}

}  // namespace spattn
