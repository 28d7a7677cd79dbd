// How the CUDA kernels meet their caller: a stream of their own or the caller's, device memory,
// and errors that name what went wrong (a tensor on the wrong device, CUDA's own failures).

#include <gtest/gtest.h>

#include <cuda_runtime_api.h>

#include <string>

#include "cuda_test_support.hpp"
#include "core/cuda/cuda_check.hpp"
#include "spattn/error.hpp"

namespace spattn::test {
namespace {

/// The message of the spattn::Error that `action` throws, or a failure when it throws none.
template <typename Action>
std::string error_message_of(Action action) {
  try {
    action();
  } catch (const Error& error) {
    return error.what();
  }
  ADD_FAILURE() << "expected spattn::Error";
  return "";
}

using CudaStreams = CudaKernelTest;

TEST_F(CudaStreams, WorksInTheCallersStream) {
  cudaStream_t caller_stream = nullptr;
  SPATTN_CUDA_CHECK(cudaStreamCreateWithFlags(&caller_stream, cudaStreamNonBlocking));
  {
    cuda::CudaElementwiseKernels kernels(Device{DeviceKind::cuda, 0}, caller_stream);
    EXPECT_EQ(kernels.stream(), caller_stream);
    HostTensor source(DType::f32, {3, 17, 2, 64});
    source.randomize(generator_);
    HostTensor destination(DType::bf16, {3, 17, 2, 64});
    destination.poison();
    DeviceTwin source_gpu(kernels, source), destination_gpu(kernels, destination);
    kernels.fill(destination_gpu.view(), 1.0f);
    kernels.copy(source_gpu.view(), destination_gpu.view());  // ordered after the fill
    cpu_->copy(source.view(), destination.view());
    SPATTN_CUDA_CHECK(cudaStreamSynchronize(caller_stream));
    expect_identical(destination, destination_gpu.download(), "copy in the caller's stream");
  }
  // The kernels borrowed the stream: it is still the caller's to use and destroy.
  SPATTN_CUDA_CHECK(cudaStreamSynchronize(caller_stream));
  SPATTN_CUDA_CHECK(cudaStreamDestroy(caller_stream));
}

TEST_F(CudaStreams, OwnStreamIsNotTheLegacyDefaultStream) {
  EXPECT_NE(gpu_->stream(), nullptr);
  unsigned int flags = 0;
  SPATTN_CUDA_CHECK(cudaStreamGetFlags(gpu_->stream(), &flags));
  EXPECT_EQ(flags & cudaStreamNonBlocking, cudaStreamNonBlocking);
}

using CudaErrors = CudaKernelTest;

TEST_F(CudaErrors, HostTensorsAreRefusedByName) {
  HostTensor host(DType::f32, {2, 3});
  HostTensor device_bytes(DType::f32, {2, 3});
  DeviceTwin on_device(*gpu_, device_bytes);
  const std::string message = error_message_of([&] { gpu_->copy(host.view(), on_device.view()); });
  EXPECT_NE(message.find("source"), std::string::npos) << message;
  EXPECT_NE(message.find("must be on cuda:0"), std::string::npos) << message;
}

TEST_F(CudaErrors, ShapeMismatchesAreRefused) {
  HostTensor a(DType::f32, {2, 3}), b(DType::f32, {3, 2});
  DeviceTwin a_gpu(*gpu_, a), b_gpu(*gpu_, b);
  const std::string message = error_message_of([&] { gpu_->add(a_gpu.view(), b_gpu.view()); });
  EXPECT_NE(message.find("must have the same shape"), std::string::npos) << message;
}

TEST_F(CudaErrors, AddIntoANonFp32DestinationIsRefused) {
  HostTensor a(DType::f32, {4}), b(DType::bf16, {4});
  DeviceTwin a_gpu(*gpu_, a), b_gpu(*gpu_, b);
  const std::string message = error_message_of([&] { gpu_->add(a_gpu.view(), b_gpu.view()); });
  EXPECT_NE(message.find("expected fp32"), std::string::npos) << message;
}

TEST_F(CudaErrors, FailedAllocationNamesTheCallAndCudasReason) {
  const std::string message = error_message_of([&] { gpu_->allocate(std::size_t{1} << 60); });
  EXPECT_NE(message.find("cudaMalloc"), std::string::npos) << message;
  EXPECT_NE(message.find("cudaErrorMemoryAllocation"), std::string::npos) << message;
}

TEST_F(CudaErrors, UnknownDeviceIsRefused) {
  int device_count = 0;
  SPATTN_CUDA_CHECK(cudaGetDeviceCount(&device_count));
  const std::string message =
      error_message_of([&] { cuda::CudaElementwiseKernels kernels(Device{DeviceKind::cuda, device_count}); });
  EXPECT_NE(message.find("no device cuda:" + std::to_string(device_count)), std::string::npos) << message;
}

TEST_F(CudaErrors, AllocationsRoundTrip) {
  void* empty = gpu_->allocate(0);
  EXPECT_NE(empty, nullptr);
  gpu_->deallocate(empty);
  void* workspace = gpu_->allocate(std::size_t{64} << 20);
  SPATTN_CUDA_CHECK(cudaMemsetAsync(workspace, 0, std::size_t{64} << 20, gpu_->stream()));
  gpu_->synchronize();
  gpu_->deallocate(workspace);
}

}  // namespace
}  // namespace spattn::test
