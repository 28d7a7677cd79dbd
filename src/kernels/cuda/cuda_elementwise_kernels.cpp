#include "kernels/cuda/cuda_elementwise_kernels.hpp"

#include "core/cuda/cuda_check.hpp"
#include "core/cuda/current_device_guard.hpp"
#include "core/memory_ledger.hpp"
#include "kernels/cuda/kernel_launches.hpp"
#include "kernels/cuda/strided_operand.hpp"
#include "spattn/error.hpp"

namespace spattn::cuda {
namespace {

void check_cuda_device(const Device& device) {
  SPATTN_CHECK(device.kind == DeviceKind::cuda,
               "the CUDA kernels need a cuda device, got " << device_name(device));
  int device_count = 0;
  SPATTN_CUDA_CHECK(cudaGetDeviceCount(&device_count));
  SPATTN_CHECK(device.index >= 0 && device.index < device_count,
               "no device " << device_name(device) << ": this process sees " << device_count << " CUDA device(s)");
}

void check_same_shape(const TensorView& a, const char* a_name, const TensorView& b, const char* b_name) {
  bool same = a.ndim == b.ndim;
  for (int d = 0; same && d < a.ndim; ++d) same = a.size(d) == b.size(d);
  SPATTN_CHECK(same, a_name << " " << a.describe() << " and " << b_name << " " << b.describe()
                            << " must have the same shape");
}

void check_fp32(const TensorView& tensor, const char* name) {
  SPATTN_CHECK(tensor.dtype == DType::f32, name << " is " << tensor.describe() << ", expected fp32");
}

}  // namespace

CudaElementwiseKernels::CudaElementwiseKernels(const Device& device) : device_(device), stream_(nullptr) {
  check_cuda_device(device);
  CurrentDeviceGuard guard(device.index);
  // Non-blocking: the legacy default stream, which other libraries may use, does not serialize it.
  SPATTN_CUDA_CHECK(cudaStreamCreateWithFlags(&owned_stream_, cudaStreamNonBlocking));
  stream_ = owned_stream_;
}

CudaElementwiseKernels::CudaElementwiseKernels(const Device& device, cudaStream_t stream)
    : device_(device), stream_(nullptr) {
  check_cuda_device(device);
  set_stream(stream);
}

CudaElementwiseKernels::~CudaElementwiseKernels() {
  // A destructor must not throw; destroying a stream we created has no failure to act on.
  if (owned_stream_ != nullptr) cudaStreamDestroy(owned_stream_);
}

void CudaElementwiseKernels::set_stream(cudaStream_t stream) {
  // The legacy and per-thread default streams (handles 0, 1, 2) belong to whichever device is
  // current when work is enqueued, which CurrentDeviceGuard makes ours: nothing to check.
  const bool default_stream = stream == nullptr || stream == cudaStreamLegacy || stream == cudaStreamPerThread;
  if (!default_stream) {
    CurrentDeviceGuard guard(device_.index);
    int stream_device = -1;
    SPATTN_CUDA_CHECK(cudaStreamGetDevice(stream, &stream_device));
    SPATTN_CHECK(stream_device == device_.index, "the stream given for " << device_name(device_)
                                                     << " belongs to cuda:" << stream_device);
  }
  stream_ = stream;
}

void CudaElementwiseKernels::check_on_this_device(const TensorView& tensor, const char* name) const {
  SPATTN_CHECK(tensor.device == device_, name << " " << tensor.describe() << " must be on " << device_name(device_)
                                              << " for these CUDA kernels");
  SPATTN_CHECK(tensor.data != nullptr || tensor.numel() == 0, name << " " << tensor.describe() << " has no data");
}

void CudaElementwiseKernels::check_elementwise_operand(const TensorView& tensor, const char* name) const {
  check_on_this_device(tensor, name);
  SPATTN_CHECK(tensor.ndim >= 1 && tensor.ndim <= TensorView::kMaxDims,
               name << " " << tensor.describe() << " has " << tensor.ndim << " dimensions; allowed: 1 to "
                    << TensorView::kMaxDims);
}

/// Checks that `rows` is (B, S, H, D) and `statistics` is its (B, H, S) fp32 row statistic.
void CudaElementwiseKernels::check_rows_and_statistics(const TensorView& rows, const char* rows_name,
                                                       const TensorView& statistics,
                                                       const char* statistics_name) const {
  check_on_this_device(rows, rows_name);
  check_on_this_device(statistics, statistics_name);
  SPATTN_CHECK(rows.ndim == 4, rows_name << " is " << rows.describe() << ", expected (B, S, H, D)");
  SPATTN_CHECK(statistics.ndim == 3 && statistics.size(0) == rows.size(0) && statistics.size(1) == rows.size(2) &&
                   statistics.size(2) == rows.size(1),
               statistics_name << " is " << statistics.describe() << ", expected (B, H, S) = (" << rows.size(0)
                               << ", " << rows.size(2) << ", " << rows.size(1) << ")");
  check_fp32(statistics, statistics_name);
}

void CudaElementwiseKernels::merge(const TensorView& partial_out, const TensorView& partial_lse,
                                   TensorView running_out, TensorView running_lse) {
  enqueue_merge(partial_out, partial_lse, running_out, running_lse, false);
}

void CudaElementwiseKernels::merge_into_empty(const TensorView& partial_out, const TensorView& partial_lse,
                                              TensorView running_out, TensorView running_lse) {
  enqueue_merge(partial_out, partial_lse, running_out, running_lse, true);
}

void CudaElementwiseKernels::enqueue_merge(const TensorView& partial_out, const TensorView& partial_lse,
                                           const TensorView& running_out, const TensorView& running_lse,
                                           bool running_is_empty) {
  check_rows_and_statistics(partial_out, "partial_out", partial_lse, "partial_lse");
  check_rows_and_statistics(running_out, "running_out", running_lse, "running_lse");
  check_same_shape(partial_out, "partial_out", running_out, "running_out");
  check_fp32(running_out, "running_out");
  CurrentDeviceGuard guard(device_.index);
  launch_merge(strided_operand(partial_out), strided_operand(partial_lse), strided_operand(running_out),
               strided_operand(running_lse), running_is_empty, stream_);
}

void CudaElementwiseKernels::softmax_delta(const TensorView& out, const TensorView& dout, TensorView delta) {
  check_rows_and_statistics(out, "out", delta, "delta");
  check_on_this_device(dout, "dout");
  check_same_shape(out, "out", dout, "dout");
  CurrentDeviceGuard guard(device_.index);
  launch_softmax_delta(strided_operand(out), strided_operand(dout), strided_operand(delta), stream_);
}

void CudaElementwiseKernels::copy(const TensorView& source, TensorView destination) {
  check_elementwise_operand(source, "source");
  check_elementwise_operand(destination, "destination");
  check_same_shape(source, "source", destination, "destination");
  CurrentDeviceGuard guard(device_.index);
  launch_copy(strided_operand(source), strided_operand(destination), source.numel(), stream_);
}

void CudaElementwiseKernels::fill(TensorView destination, float value) {
  check_elementwise_operand(destination, "destination");
  CurrentDeviceGuard guard(device_.index);
  launch_fill(strided_operand(destination), destination.numel(), value, stream_);
}

void CudaElementwiseKernels::add(const TensorView& source, TensorView destination) {
  check_elementwise_operand(source, "source");
  check_elementwise_operand(destination, "destination");
  check_same_shape(source, "source", destination, "destination");
  check_fp32(destination, "destination");
  CurrentDeviceGuard guard(device_.index);
  launch_add(strided_operand(source), strided_operand(destination), source.numel(), stream_);
}

void* CudaElementwiseKernels::allocate(std::size_t bytes) {
  CurrentDeviceGuard guard(device_.index);
  void* pointer = nullptr;
  // A zero-byte request still gets a distinct pointer, as on the CPU.
  SPATTN_CUDA_CHECK(cudaMalloc(&pointer, bytes == 0 ? 1 : bytes));
  record_allocation(device_, pointer, bytes == 0 ? 1 : bytes);
  return pointer;
}

void CudaElementwiseKernels::deallocate(void* pointer) {
  CurrentDeviceGuard guard(device_.index);
  record_release(device_, pointer);
  SPATTN_CUDA_CHECK(cudaFree(pointer));
}

void CudaElementwiseKernels::synchronize() {
  CurrentDeviceGuard guard(device_.index);
  SPATTN_CUDA_CHECK(cudaStreamSynchronize(stream_));
}

}  // namespace spattn::cuda
