#include "kernels/hopper/query_grad_turns.hpp"

#include "core/cuda/cuda_check.hpp"
#include "core/cuda/current_device_guard.hpp"
#include "core/memory_ledger.hpp"

namespace spattn::cuda::hopper {

int* QueryGradTurns::zeroed(int64_t count, cudaStream_t stream) {
  CurrentDeviceGuard guard(device_.index);
  const std::size_t needed = static_cast<std::size_t>(count);
  if (needed > capacity_) {
    if (turns_ != nullptr) {
      SPATTN_CUDA_CHECK(cudaStreamSynchronize(stream));  // queued launches may still count on the old ones
      record_release(device_, turns_);
      SPATTN_CUDA_CHECK(cudaFree(turns_));
      turns_ = nullptr;
      capacity_ = 0;
    }
    void* memory = nullptr;
    SPATTN_CUDA_CHECK(cudaMalloc(&memory, needed * sizeof(int)));
    record_allocation(device_, memory, needed * sizeof(int));
    turns_ = static_cast<int*>(memory);
    capacity_ = needed;
  }
  SPATTN_CUDA_CHECK(cudaMemsetAsync(turns_, 0, needed * sizeof(int), stream));
  return turns_;
}

QueryGradTurns::~QueryGradTurns() {
  // Launches still queued may use the turns; a destructor must not throw.
  try {
    if (turns_ == nullptr) return;
    CurrentDeviceGuard guard(device_.index);
    cudaDeviceSynchronize();
    record_release(device_, turns_);
    cudaFree(turns_);
  } catch (...) {  // no device to switch to: nothing left to free on it
  }
}

}  // namespace spattn::cuda::hopper
