#pragma once
// A CUDA event that remembers its GPU: made and destroyed with that GPU current, whichever one the
// caller has current at the time (a process may drive several GPUs, PyTorch may have another).

#include <cuda_runtime_api.h>

#include "core/cuda/cuda_check.hpp"
#include "core/cuda/current_device_guard.hpp"

namespace spattn::cuda {

class DeviceEvent {
 public:
  /// An event on GPU `device_index`; `flags` as cudaEventCreateWithFlags takes them
  /// (cudaEventDefault for one that times, cudaEventDisableTiming for one that only orders).
  DeviceEvent(int device_index, unsigned int flags) : device_index_(device_index) {
    const CurrentDeviceGuard guard(device_index_);
    SPATTN_CUDA_CHECK(cudaEventCreateWithFlags(&event_, flags));
  }
  ~DeviceEvent() {
    // A destructor must not throw: the guard's failure leaves the event to the context's end.
    try {
      const CurrentDeviceGuard guard(device_index_);
      cudaEventDestroy(event_);
    } catch (...) {
    }
  }
  DeviceEvent(const DeviceEvent&) = delete;
  DeviceEvent& operator=(const DeviceEvent&) = delete;

  cudaEvent_t get() const { return event_; }

 private:
  int device_index_;
  cudaEvent_t event_ = nullptr;
};

}  // namespace spattn::cuda
