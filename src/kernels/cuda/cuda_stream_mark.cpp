#include "kernels/cuda/cuda_stream_mark.hpp"

#include "core/cuda/cuda_check.hpp"
#include "core/cuda/current_device_guard.hpp"

namespace spattn::cuda {

CudaStreamMark::CudaStreamMark(int device_index, cudaStream_t stream) : device_index_(device_index) {
  const CurrentDeviceGuard guard(device_index_);
  SPATTN_CUDA_CHECK(cudaEventCreate(&event_));
  try {
    SPATTN_CUDA_CHECK(cudaEventRecord(event_, stream));
  } catch (...) {
    cudaEventDestroy(event_);
    throw;
  }
}

CudaStreamMark::~CudaStreamMark() {
  // A destructor must not throw: the guard's failure leaves the event to the context's end.
  try {
    const CurrentDeviceGuard guard(device_index_);
    cudaEventDestroy(event_);
  } catch (...) {
  }
}

double CudaStreamMark::milliseconds_since(const StreamMark& earlier) const {
  float milliseconds = 0;
  SPATTN_CUDA_CHECK(cudaEventElapsedTime(&milliseconds, static_cast<const CudaStreamMark&>(earlier).event_, event_));
  return milliseconds;
}

}  // namespace spattn::cuda
