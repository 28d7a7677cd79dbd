#include "kernels/block_kernels.hpp"
#include "spattn/error.hpp"

namespace spattn {

std::unique_ptr<BlockKernels> make_block_kernels(const Device& device) {
  SPATTN_CHECK(device.kind == DeviceKind::cpu,
               "no kernels for device " << device_name(device) << " in this build; built in: cpu");
  return make_cpu_block_kernels();
}

}  // namespace spattn
