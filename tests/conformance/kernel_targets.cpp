#include "kernel_targets.hpp"

#include <map>
#include <memory>

#include "spattn/device_memory.hpp"

namespace spattn::test {

const std::vector<KernelTarget>& kernel_targets() {
  static const std::vector<KernelTarget> targets = {
      {"cpu", Device::cpu(), KernelChoice::automatic},
      {"cuda_own", Device{DeviceKind::cuda, 0}, KernelChoice::own},
      {"cuda_cudnn", Device{DeviceKind::cuda, 0}, KernelChoice::cudnn},
  };
  return targets;
}

std::string target_unavailable(const KernelTarget& target) {
  if (visible_device_count(target.device.kind) > target.device.index) return "";
  // A build without the device's kernels says so whatever the call; automatic on a dtype every
  // device takes asks nothing else (own would ask the absent GPU for its architecture).
  const std::string build_reason = block_kernels_unsupported(target.device, KernelChoice::automatic, DType::bf16, 64);
  return build_reason.empty() ? "no CUDA device" : build_reason;
}

std::string case_unsupported(const KernelTarget& target, const BlockKernelCase& c) {
  if (!attends(c.operation)) return "";
  return block_kernels_unsupported(target.device, target.choice, c.dtype, c.head_dim);
}

BlockKernels& kernels_of(const KernelTarget& target) {
  // Never destroyed: at exit the CUDA runtime may be gone before a static's destructor would run.
  static auto* made = new std::map<std::string, std::unique_ptr<BlockKernels>>();
  std::unique_ptr<BlockKernels>& kernels = (*made)[target.name];
  // One object serves every case of a target: its inputs (which decide only automatic's backward
  // on CUDA, no target's choice) are left at their defaults.
  if (!kernels) kernels = make_block_kernels(target.device, KernelInputs{}, target.choice);
  return *kernels;
}

}  // namespace spattn::test
