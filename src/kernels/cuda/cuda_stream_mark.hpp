#pragma once
// The mark of CUDA kernels: an event recorded on their stream, whose time is the moment the GPU
// reached it (CudaBlockKernels::mark).

#include <cuda_runtime_api.h>

#include "core/cuda/device_event.hpp"
#include "kernels/stream_mark.hpp"

namespace spattn::cuda {

class CudaStreamMark final : public StreamMark {
 public:
  /// Records a timing event after the work enqueued so far on `stream` of `device_index`.
  CudaStreamMark(int device_index, cudaStream_t stream);

  double milliseconds_since(const StreamMark& earlier) const override;

 private:
  DeviceEvent event_;
};

}  // namespace spattn::cuda
