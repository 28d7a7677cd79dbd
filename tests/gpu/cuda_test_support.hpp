#pragma once
// What every GPU test shares: skipping, visibly, where there is no GPU; device twins of host
// tensors (same bytes, same strides); and comparisons of GPU results with the CPU kernels'.

#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "host_tensor.hpp"
#include "kernels/block_kernels.hpp"
#include "kernels/cuda/cuda_elementwise_kernels.hpp"

namespace spattn::test {

/// True when this process sees at least one CUDA device (false also when the driver is missing).
bool cuda_device_present();

/// Base of every GPU test: skips with "no CUDA device" where there is none; otherwise holds the
/// CUDA kernels of cuda:0, the CPU kernels they are compared with, and a seeded generator.
class CudaKernelTest : public ::testing::Test {
 protected:
  void SetUp() override;

  std::unique_ptr<cuda::CudaElementwiseKernels> gpu_;
  std::unique_ptr<BlockKernels> cpu_;
  std::mt19937 generator_{20240611u};
};

/// The head dims of `head_dims` that an own kernel runs here, by `unsupported` (its reason for a
/// head dim, "" where it runs). A test goes through these, so that a build of some head dims
/// (SPATTN_HOPPER_HEAD_DIMS) still tests those; the test is skipped, with the reasons, where none
/// runs, and the head dims left out are named once in its output.
std::vector<int64_t> runnable_head_dims(const std::vector<int64_t>& head_dims,
                                        const std::function<std::string(int64_t)>& unsupported);

/// A device buffer with the bytes of a host tensor. Any view into the host tensor (a slice, a
/// transposed view) has a twin here: the same shape, strides and offset, on the device.
class DeviceTwin {
 public:
  /// Allocates and uploads, ordered on the kernels' stream.
  DeviceTwin(cuda::CudaElementwiseKernels& kernels, const HostTensor& host);
  ~DeviceTwin();
  DeviceTwin(const DeviceTwin&) = delete;
  DeviceTwin& operator=(const DeviceTwin&) = delete;

  /// The device view of `host_view`, which must be a view into the host tensor given above.
  TensorView twin(const TensorView& host_view) const;
  /// The whole tensor on the device.
  TensorView view() const;
  /// The device bytes once the stream has run everything before, as a host tensor.
  HostTensor download() const;

 private:
  cuda::CudaElementwiseKernels& kernels_;
  HostTensor host_;            // a copy: its layout for download()
  const void* original_data_;  // the caller's tensor, which twin()'s views point into
  void* device_data_ = nullptr;
};

/// (B, S, H, D) viewed from a (B, H, S, D) tensor: strides swapped, so rows are not contiguous.
TensorView seq_heads_transposed(const TensorView& bhsd);

/// Every element of `actual` equals `expected` bit for bit, except that any NaN matches any NaN
/// (CUDA's conversions produce the canonical NaN, the CPU keeps the payload).
void expect_identical(const HostTensor& expected, const HostTensor& actual, const std::string& what);

/// |actual - expected| <= absolute + relative * |expected| everywhere; infinities and NaN must
/// sit at the same places (a NaN where the CPU wrote a number is an element the GPU never wrote).
void expect_close(const HostTensor& expected, const HostTensor& actual, double absolute, double relative,
                  const std::string& what);

/// Writes `value` (rounded to the view's dtype) at `index` of a host view.
void set_element(const TensorView& view, const std::array<int64_t, TensorView::kMaxDims>& index, double value);

}  // namespace spattn::test
