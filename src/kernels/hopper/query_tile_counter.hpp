#pragma once
// The device memory of the own forward's dynamic schedule (QueryTileSchedule::counter): two
// unsigned counters that every launch leaves at zero for the next. Launches that share one must
// run one after another (on one stream, or on streams ordered by events); whoever owns the stream
// owns its counter (CudaBlockKernels holds one), so that its memory goes when the stream's user
// does.

#include <cuda_runtime_api.h>

#include "spattn/device.hpp"

namespace spattn::cuda::hopper {

class QueryTileCounter {
 public:
  /// Allocated and zeroed on `device` (cudaMalloc and cudaMemset: they synchronize). The device
  /// is named rather than taken from the current one: a counter on another GPU than the launch's
  /// is read across the bus or faults, and the library never leaves a device current.
  explicit QueryTileCounter(const Device& device);
  ~QueryTileCounter();
  QueryTileCounter(const QueryTileCounter&) = delete;
  QueryTileCounter& operator=(const QueryTileCounter&) = delete;

  unsigned* data() const { return counters_; }
  const Device& device() const { return device_; }

 private:
  Device device_;
  unsigned* counters_ = nullptr;
};

}  // namespace spattn::cuda::hopper
