#pragma once
// The element-wise half of the CUDA BlockKernels: merge, softmax_delta, copy, fill, add and the
// device memory of workspaces, all enqueued on one CUDA stream without host synchronization.
// Forward and backward through cuDNN live in their own translation unit (its headers compile
// slowly); CudaBlockKernels then owns one of these and forwards the element-wise calls to it.

#include <cuda_runtime_api.h>

#include <cstddef>

#include "spattn/device.hpp"
#include "spattn/tensor.hpp"

namespace spattn::cuda {

class CudaElementwiseKernels {
 public:
  /// Works on `device` in a non-blocking stream of its own, destroyed with this object.
  explicit CudaElementwiseKernels(const Device& device);

  /// Works on `device` in the caller's `stream` (e.g. PyTorch's current stream), which must
  /// belong to that device and outlive this object. Results are ordered after whatever the
  /// caller enqueued on it before, and work the caller enqueues later sees them.
  CudaElementwiseKernels(const Device& device, cudaStream_t stream);

  ~CudaElementwiseKernels();
  CudaElementwiseKernels(const CudaElementwiseKernels&) = delete;
  CudaElementwiseKernels& operator=(const CudaElementwiseKernels&) = delete;

  Device device() const { return device_; }
  cudaStream_t stream() const { return stream_; }
  /// Enqueues later work on `stream` (of this device). The caller orders it after the previous
  /// stream's work (CudaBlockKernels::set_stream does, with an event).
  void set_stream(cudaStream_t stream);

  /// See BlockKernels::merge.
  void merge(const TensorView& partial_out,  // (B, S, H, D) any dtype
             const TensorView& partial_lse,  // (B, H, S) fp32
             TensorView running_out,         // (B, S, H, D) fp32
             TensorView running_lse);        // (B, H, S) fp32

  /// running = partial: merge() into a running result that holds nothing yet, which is written
  /// without being read (no fill before it).
  void merge_into_empty(const TensorView& partial_out,  // (B, S, H, D) any dtype
                        const TensorView& partial_lse,  // (B, H, S) fp32
                        TensorView running_out,         // (B, S, H, D) fp32
                        TensorView running_lse);        // (B, H, S) fp32

  /// See BlockKernels::softmax_delta.
  void softmax_delta(const TensorView& out,   // (B, S, H, D)
                     const TensorView& dout,  // (B, S, H, D)
                     TensorView delta);       // (B, H, S) fp32

  /// See BlockKernels::copy: any dtypes, any strides, rank 1 to 4.
  void copy(const TensorView& source, TensorView destination);

  /// See BlockKernels::fill.
  void fill(TensorView destination, float value);

  /// See BlockKernels::add: destination fp32, source any dtype.
  void add(const TensorView& source, TensorView destination);

  /// Device memory on this object's device (cudaMalloc: it synchronizes, so allocate once per
  /// plan, never inside a step loop).
  void* allocate(std::size_t bytes);
  void deallocate(void* pointer);

  /// Waits on the host until everything enqueued on the stream so far has run. For tests and
  /// for callers handing results to the host; no operation above calls it.
  void synchronize();

 private:
  void check_on_this_device(const TensorView& tensor, const char* name) const;
  void check_elementwise_operand(const TensorView& tensor, const char* name) const;
  void enqueue_merge(const TensorView& partial_out, const TensorView& partial_lse, const TensorView& running_out,
                     const TensorView& running_lse, bool running_is_empty);
  void check_rows_and_statistics(const TensorView& rows, const char* rows_name, const TensorView& statistics,
                                 const char* statistics_name) const;

  Device device_;
  cudaStream_t stream_;
  cudaStream_t owned_stream_ = nullptr;  // created here, destroyed with this object
};

}  // namespace spattn::cuda
