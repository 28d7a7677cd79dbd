#include "kernels/hopper/query_tile_counter.hpp"

#include <map>
#include <mutex>
#include <thread>
#include <tuple>

#include "kernels/cuda/cuda_check.hpp"

namespace spattn::cuda::hopper {

unsigned* query_tile_counter(cudaStream_t stream) {
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(stream, &capture) != cudaSuccess) {
    // The legacy default stream while another stream captures: launches there are refused anyway.
    cudaGetLastError();
    return nullptr;
  }
  if (capture != cudaStreamCaptureStatusNone) return nullptr;

  int device = 0;
  SPATTN_CUDA_CHECK(cudaGetDevice(&device));
  // cudaStreamPerThread is one handle for a different stream in every host thread.
  const std::thread::id thread = stream == cudaStreamPerThread ? std::this_thread::get_id() : std::thread::id{};
  static std::mutex mutex;
  static std::map<std::tuple<int, cudaStream_t, std::thread::id>, unsigned*> counters;
  std::lock_guard<std::mutex> lock(mutex);
  unsigned*& counter = counters[{device, stream, thread}];
  if (counter == nullptr) {
    // Another thread may be capturing a graph in global mode, which forbids cudaMalloc in every
    // thread that has not asked for relaxed mode (what PyTorch's allocator does too).
    cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
    SPATTN_CUDA_CHECK(cudaThreadExchangeStreamCaptureMode(&mode));
    void* memory = nullptr;
    const cudaError_t allocated = cudaMalloc(&memory, 2 * sizeof(unsigned));
    SPATTN_CUDA_CHECK(cudaThreadExchangeStreamCaptureMode(&mode));
    SPATTN_CUDA_CHECK(allocated);
    SPATTN_CUDA_CHECK(cudaMemsetAsync(memory, 0, 2 * sizeof(unsigned), stream));
    counter = static_cast<unsigned*>(memory);
  }
  return counter;
}

}  // namespace spattn::cuda::hopper
