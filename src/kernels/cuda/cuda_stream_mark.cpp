#include "kernels/cuda/cuda_stream_mark.hpp"

#include "core/cuda/cuda_check.hpp"
#include "core/cuda/current_device_guard.hpp"

namespace spattn::cuda {

CudaStreamMark::CudaStreamMark(int device_index, cudaStream_t stream) : event_(device_index, cudaEventDefault) {
  const CurrentDeviceGuard guard(device_index);
  SPATTN_CUDA_CHECK(cudaEventRecord(event_.get(), stream));
}

double CudaStreamMark::milliseconds_since(const StreamMark& earlier) const {
  float milliseconds = 0;
  SPATTN_CUDA_CHECK(
      cudaEventElapsedTime(&milliseconds, static_cast<const CudaStreamMark&>(earlier).event_.get(), event_.get()));
  return milliseconds;
}

}  // namespace spattn::cuda
