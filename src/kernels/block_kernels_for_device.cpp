#include "kernels/block_kernels.hpp"
#include "spattn/error.hpp"

#ifdef SPATTN_WITH_CUDA
#include "kernels/cuda/cuda_block_kernels.hpp"
#include "kernels/hopper/hopper_backward.hpp"
#include "kernels/hopper/hopper_forward.hpp"
#endif

namespace spattn {
namespace {

#ifdef SPATTN_WITH_CUDA
constexpr bool kCudaBuiltIn = true;
constexpr const char* kBuiltInDevices = "cpu, cuda";
#else
constexpr bool kCudaBuiltIn = false;
constexpr const char* kBuiltInDevices = "cpu";
#endif

// Why `kernel` cannot run on `device` whatever the call, or "": this build has no kernels for
// the device, or the choice names CUDA kernels (only a CUDA device has a choice of kernels).
std::string unsupported_whatever_the_call(const Device& device, KernelChoice kernel) {
  const bool device_built_in = device.kind == DeviceKind::cpu || (kCudaBuiltIn && device.kind == DeviceKind::cuda);
  if (!device_built_in)
    return "no kernels for device " + device_name(device) + " in this build; built in: " + kBuiltInDevices;
  if (kernel == KernelChoice::automatic || device.kind == DeviceKind::cuda) return "";
  const char* kernels = kernel == KernelChoice::own ? "spattn's own Hopper kernels" : "cuDNN's fused attention";
  return "kernel " + kernel_choice_name(kernel) + " names CUDA kernels (" + kernels + ") and cannot run on " +
         device_name(device) + "; allowed there: auto";
}

}  // namespace

std::string input_dtype_unsupported(DeviceKind kind, DType dtype) {
  if (kind != DeviceKind::cuda || dtype == DType::bf16 || dtype == DType::f16) return "";
  return "the CUDA kernels take bf16 or fp16 inputs, not " + dtype_name(dtype) +
         " (neither cuDNN's fused attention nor spattn's own kernels have an fp32 path): convert q, k, v to bf16 or "
         "fp16, or run on cpu";
}

std::string block_kernels_unsupported(const Device& device, KernelChoice kernel, DType dtype,
                                      [[maybe_unused]] int64_t head_dim) {
  std::string reason = unsupported_whatever_the_call(device, kernel);
  // Said here, where plans ask before their first transfer, and not only by the kernels at the
  // first block.
  if (reason.empty()) {
    const std::string dtype_reason = input_dtype_unsupported(device.kind, dtype);
    if (!dtype_reason.empty()) reason = "on " + device_name(device) + ", " + dtype_reason;
  }
#ifdef SPATTN_WITH_CUDA
  if (reason.empty() && kernel == KernelChoice::own) {
    std::string own_reason = cuda::hopper_forward_unsupported(device, dtype, head_dim);
    if (own_reason.empty()) own_reason = cuda::hopper_backward_unsupported(device, dtype, head_dim);
    if (!own_reason.empty()) {
      return "kernel own cannot run " + dtype_name(dtype) + " attention of head dim " + std::to_string(head_dim) +
             " on " + device_name(device) + ": " + own_reason +
             "; allowed there: auto (cuDNN where the own kernels cannot run) or cudnn";
    }
  }
#endif
  return reason;
}

std::unique_ptr<BlockKernels> make_block_kernels(const Device& device, [[maybe_unused]] const KernelInputs& inputs,
                                                 KernelChoice kernel, bool deterministic) {
  const std::string reason = unsupported_whatever_the_call(device, kernel);
  SPATTN_CHECK(reason.empty(), reason);
#ifdef SPATTN_WITH_CUDA
  if (device.kind == DeviceKind::cuda) return cuda::make_cuda_block_kernels(device, kernel, deterministic, inputs);
#endif
  (void)deterministic;  // the CPU kernels add in a fixed order at any thread count
  return make_cpu_block_kernels();
}

}  // namespace spattn
