#include "spattn/device.hpp"

#include "core/name_table.hpp"

namespace spattn {
namespace {

const NameTable<DeviceKind>& device_kind_names() {
  static const NameTable<DeviceKind> table("device", {{DeviceKind::cpu, "cpu"}, {DeviceKind::cuda, "cuda"}});
  return table;
}

}  // namespace

std::string device_kind_name(DeviceKind kind) { return device_kind_names().name(kind); }

DeviceKind parse_device_kind(const std::string& name) { return device_kind_names().parse(name); }

std::string device_name(const Device& device) {
  const std::string kind = device_kind_name(device.kind);
  return device.kind == DeviceKind::cpu ? kind : kind + ":" + std::to_string(device.index);
}

}  // namespace spattn
