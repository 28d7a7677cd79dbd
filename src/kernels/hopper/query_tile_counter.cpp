#include "kernels/hopper/query_tile_counter.hpp"

#include "core/cuda/cuda_check.hpp"
#include "core/cuda/current_device_guard.hpp"

namespace spattn::cuda::hopper {

QueryTileCounter::QueryTileCounter(const Device& device) : device_(device) {
  CurrentDeviceGuard guard(device_.index);
  void* memory = nullptr;
  SPATTN_CUDA_CHECK(cudaMalloc(&memory, 2 * sizeof(unsigned)));
  counters_ = static_cast<unsigned*>(memory);
  SPATTN_CUDA_CHECK(cudaMemset(counters_, 0, 2 * sizeof(unsigned)));
}

QueryTileCounter::~QueryTileCounter() {
  // Launches still queued may use the counters; a destructor must not throw.
  try {
    CurrentDeviceGuard guard(device_.index);
    cudaDeviceSynchronize();
    cudaFree(counters_);
  } catch (...) {  // no device to switch to: nothing left to free on it
  }
}

}  // namespace spattn::cuda::hopper
