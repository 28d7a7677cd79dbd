#include "kernels/hopper/hopper_support.hpp"

#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <mutex>
#include <sstream>

namespace spattn::cuda::hopper {

const GpuFacts& gpu_facts(int device_index) {
  static std::mutex mutex;
  static std::map<int, GpuFacts> known;
  std::lock_guard<std::mutex> lock(mutex);
  const auto found = known.find(device_index);
  if (found != known.end()) return found->second;
  cudaDeviceProp properties{};
  SPATTN_CUDA_CHECK(cudaGetDeviceProperties(&properties, device_index));
  return known[device_index] = {properties.name, properties.major, properties.minor, properties.multiProcessorCount};
}

std::string device_unsupported(const char* kernel, const Device& device, DType dtype, int64_t head_dim, bool built,
                               const std::string& built_head_dims) {
  std::ostringstream why;
  if (device.kind != DeviceKind::cuda) {
    why << kernel << " runs on CUDA GPUs, not on " << device_name(device);
  } else if (dtype != DType::bf16 && dtype != DType::f16) {
    why << kernel << " takes bf16 or fp16 inputs, not " << dtype_name(dtype);
  } else if (!built) {
    why << "head dim " << head_dim << " is not built into " << kernel << " (built: "
        << (built_head_dims.empty() ? "none; CMake SPATTN_HOPPER_HEAD_DIMS and the CUTLASS headers" : built_head_dims)
        << ")";
  } else {
    const GpuFacts& gpu = gpu_facts(device.index);
    if (gpu.major != 9 || gpu.minor != 0)
      why << kernel << " runs on sm_90 GPUs (H100, H200); " << device_name(device) << " is " << gpu.name
          << ", compute capability " << gpu.major << "." << gpu.minor;
  }
  return why.str();
}

std::string built_head_dims(bool (*built)(int64_t head_dim)) {
  std::string dims;
  for (int64_t head_dim : {64, 128})
    if (built(head_dim)) dims += (dims.empty() ? "" : ", ") + std::to_string(head_dim);
  return dims;
}

std::string tma_addressable(const char* kernel, const TensorView& tensor, const char* name) {
  std::ostringstream why;
  const auto address = reinterpret_cast<std::uintptr_t>(tensor.data);
  if (tensor.ndim != 4) {
    why << name << " " << tensor.describe() << " must have 4 dimensions (B, S, H, D)";
  } else if (tensor.stride(3) != 1) {
    why << name << " " << tensor.describe() << " has head_dim stride " << tensor.stride(3) << "; " << kernel
        << " needs 1";
  } else if (address % 16 != 0) {
    why << name << " starts at an address that is not 16-byte aligned (" << address % 16 << " bytes past)";
  } else {
    for (int dim = 0; dim < 3; ++dim) {
      const int64_t element_bytes = static_cast<int64_t>(dtype_size(tensor.dtype));
      if ((tensor.stride(dim) * element_bytes) % 16 != 0 || tensor.stride(dim) < 0) {
        why << name << " " << tensor.describe() << " has stride " << tensor.stride(dim) << " in dimension " << dim
            << "; " << kernel << " needs non-negative strides of whole 16-byte units (multiples of "
            << 16 / element_bytes << " elements)";
        break;
      }
      if (tensor.size(dim) > std::numeric_limits<int32_t>::max()) {
        why << name << " " << tensor.describe() << " has " << tensor.size(dim) << " in dimension " << dim << "; "
            << kernel << " takes at most 2^31 - 1";
        break;
      }
    }
  }
  return why.str();
}

std::string key_values_unsupported(const char* kernel, const KvSegment& segment, const TensorView& q) {
  std::ostringstream why;
  for (const TensorView* tensor : {&segment.k, &segment.v}) {
    const char* name = tensor == &segment.k ? "k" : "v";
    std::string reason = tma_addressable(kernel, *tensor, name);
    if (!reason.empty()) return reason;
    if (tensor->dtype != q.dtype || tensor->device != q.device) {
      why << name << " " << tensor->describe() << " must have q's dtype and device (" << q.describe() << ")";
      return why.str();
    }
    if (tensor->size(0) != q.size(0) || tensor->size(3) != q.size(3) || tensor->size(2) <= 0 ||
        q.size(2) % tensor->size(2) != 0 || tensor->size(1) != segment.k.size(1) ||
        tensor->size(2) != segment.k.size(2)) {
      why << name << " " << tensor->describe() << " does not fit q " << q.describe()
          << ": (B, Sk, HK, D) with q's B and D, HK dividing q's heads, k and v alike";
      return why.str();
    }
  }
  return "";
}

std::string scale_unsupported(float scale) {
  std::ostringstream why;
  if (!(std::isfinite(scale) && scale > 0)) why << "softmax scale " << scale << " must be finite and > 0";
  return why.str();
}

void copy_strides(const TensorView& tensor, int64_t (&strides)[3]) {
  for (int dim = 0; dim < 3; ++dim) strides[dim] = tensor.stride(dim);
}

}  // namespace spattn::cuda::hopper
