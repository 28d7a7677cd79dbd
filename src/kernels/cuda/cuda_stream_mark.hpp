#pragma once
// The mark of CUDA kernels: an event recorded on their stream, whose time is the moment the GPU
// reached it (CudaBlockKernels::mark).

#include <cuda_runtime_api.h>

#include "kernels/stream_mark.hpp"

namespace spattn::cuda {

class CudaStreamMark final : public StreamMark {
 public:
  /// Records a timing event after the work enqueued so far on `stream` of `device_index`.
  CudaStreamMark(int device_index, cudaStream_t stream);
  ~CudaStreamMark() override;
  CudaStreamMark(const CudaStreamMark&) = delete;
  CudaStreamMark& operator=(const CudaStreamMark&) = delete;

  double milliseconds_since(const StreamMark& earlier) const override;

 private:
  int device_index_;
  cudaEvent_t event_ = nullptr;
};

}  // namespace spattn::cuda
