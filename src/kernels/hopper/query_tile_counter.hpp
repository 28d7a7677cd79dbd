#pragma once
// The device memory of the own forward's dynamic schedule (QueryTileSchedule::counter): two
// unsigned counters that every launch leaves at zero for the next. Launches that share one must
// run one after another (on one stream, or on streams ordered by events); whoever owns the stream
// owns its counter (CudaBlockKernels holds one), so that its memory goes when the stream's user
// does.

#include <cuda_runtime_api.h>

namespace spattn::cuda::hopper {

class QueryTileCounter {
 public:
  /// Allocated and zeroed on the current device (cudaMalloc and cudaMemset: they synchronize).
  QueryTileCounter();
  ~QueryTileCounter();
  QueryTileCounter(const QueryTileCounter&) = delete;
  QueryTileCounter& operator=(const QueryTileCounter&) = delete;

  unsigned* data() const { return counters_; }

 private:
  int device_ = 0;
  unsigned* counters_ = nullptr;
};

}  // namespace spattn::cuda::hopper
