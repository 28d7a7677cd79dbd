// Reports on every layer of the build, so it sits above them.
#include "spattn/build_info.hpp"

#include <mpi.h>
#include <omp.h>

#include <algorithm>
#include <thread>

#ifdef SPATTN_WITH_CUDA
#include <cuda_runtime_api.h>

#include "kernels/hopper/hopper_backward.hpp"
#include "kernels/hopper/hopper_forward.hpp"
#endif

#include "spattn/attention_shape.hpp"
#include "spattn/device_memory.hpp"
#include "spattn/error.hpp"

namespace spattn {

BuildInfo build_info() {
  BuildInfo info;
  info.version = SPATTN_VERSION;
  info.kernel_backends = {"cpu"};
  info.communicators = {"mpi"};
#ifdef SPATTN_WITH_ONECCL
  info.communicators.push_back("oneccl");
#endif
  info.devices = {"cpu"};
  info.block_kernels = {{"cpu", "fp32, fp16, bf16 (computed in fp32), head dim 1 to " + std::to_string(kMaxHeadDim) +
                                    "; forward and backward (OpenMP threads, OpenBLAS tile products)"}};
#ifdef SPATTN_WITH_CUDA
  info.kernel_backends.push_back("cuda (own Hopper forward and backward, cuDNN attention)");
  info.block_kernels.push_back({"own (Hopper sm_90)", "forward: " + cuda::hopper_forward_description() +
                                                          "; backward: " + cuda::hopper_backward_description()});
  info.block_kernels.push_back({"cudnn", "bf16, fp16, the head dims cuDNN's fused attention takes; forward and "
                                         "backward, each call's out and gradients in the input dtype"});
  info.communicators.push_back("mpi staged through the host (device memory)");
#ifdef SPATTN_WITH_NCCL
  info.communicators.push_back("nccl");
#endif
  // No GPU (or no driver) is a normal answer here, not an error: the list just stays "cpu".
  const int gpus = visible_device_count(DeviceKind::cuda);
  for (int index = 0; index < gpus; ++index) {
    cudaDeviceProp properties{};
    if (cudaGetDeviceProperties(&properties, index) == cudaSuccess)
      info.devices.push_back("cuda:" + std::to_string(index) + " " + properties.name);
  }
#endif
  char library[MPI_MAX_LIBRARY_VERSION_STRING];
  int length = 0;
  MPI_Get_library_version(library, &length);
  info.mpi_library = std::string(library, static_cast<std::size_t>(length));
  info.mpi_library = info.mpi_library.substr(0, info.mpi_library.find_first_of(",\n"));
  info.blas = "OpenBLAS (OpenMP)";
  info.cpu_threads = cpu_threads();
  info.cpu_cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  return info;
}

void set_cpu_threads(int threads) {
  SPATTN_CHECK(threads >= 1, "CPU threads must be at least 1, got " << threads);
  omp_set_num_threads(threads);
}

int cpu_threads() { return std::max(1, omp_get_max_threads()); }

}  // namespace spattn
