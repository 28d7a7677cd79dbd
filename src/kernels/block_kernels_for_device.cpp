#include "kernels/block_kernels.hpp"
#include "spattn/error.hpp"

#ifdef SPATTN_WITH_CUDA
#include "kernels/cuda/cuda_block_kernels.hpp"
#endif

namespace spattn {

std::unique_ptr<BlockKernels> make_block_kernels(const Device& device) {
#ifdef SPATTN_WITH_CUDA
  if (device.kind == DeviceKind::cuda) return cuda::make_cuda_block_kernels(device);
  constexpr const char* built_in = "cpu, cuda";
#else
  constexpr const char* built_in = "cpu";
#endif
  SPATTN_CHECK(device.kind == DeviceKind::cpu,
               "no kernels for device " << device_name(device) << " in this build; built in: " << built_in);
  return make_cpu_block_kernels();
}

}  // namespace spattn
