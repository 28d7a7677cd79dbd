#pragma once
/// \file device.hpp
/// Where a tensor's memory lives.

#include <string>

namespace spattn {

enum class DeviceKind { cpu, cuda };

/// A device: its kind and, for accelerators, its index.
struct Device {
  DeviceKind kind = DeviceKind::cpu;
  int index = 0;

  static Device cpu() { return Device{}; }
  bool operator==(const Device& other) const { return kind == other.kind && index == other.index; }
  bool operator!=(const Device& other) const { return !(*this == other); }
};

/// "cpu" or "cuda".
std::string device_kind_name(DeviceKind kind);
/// The DeviceKind of device_kind_name's `name`; throws Error naming `name` and the allowed names.
DeviceKind parse_device_kind(const std::string& name);
/// "cpu" or "cuda:N".
std::string device_name(const Device& device);

}  // namespace spattn
