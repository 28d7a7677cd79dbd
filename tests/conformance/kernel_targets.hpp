#pragma once
// The targets of the conformance suite: the kernel choices a build can have, each a device and a
// KernelChoice that make_block_kernels takes. Whether this build and machine have one, and whether
// it takes a case, is asked of the library (block_kernels_unsupported), as plans ask it.

#include <string>
#include <vector>

#include "block_cases.hpp"
#include "kernels/block_kernels.hpp"

namespace spattn::test {

struct KernelTarget {
  // "cpu", "cuda_own", "cuda_cudnn": also the GoogleTest suite name, hence '_' (a '-' in
  // --gtest_filter starts the negative patterns).
  std::string name;
  Device device;
  KernelChoice choice;
};

/// Every target, whether this build and machine have it or not.
const std::vector<KernelTarget>& kernel_targets();

/// "" when this build and machine run `target`; otherwise why not ("no CUDA device", or the
/// library's reason for a build without CUDA).
std::string target_unavailable(const KernelTarget& target);

/// "" when `target` (available) takes `c`; otherwise block_kernels_unsupported's reason for the
/// attention operations (CUDA takes no fp32; own only the dtypes and head dims it was built for,
/// on sm_90). Every target takes every element-wise case.
std::string case_unsupported(const KernelTarget& target, const BlockKernelCase& c);

/// The kernels of an available `target`, made once per process (cuDNN's handle and graph cache with them).
BlockKernels& kernels_of(const KernelTarget& target);

}  // namespace spattn::test
