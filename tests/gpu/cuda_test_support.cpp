#include "cuda_test_support.hpp"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <iostream>
#include <sstream>

#include "core/cuda/cuda_check.hpp"
#include "core/dtype_conversion.hpp"
#include "spattn/dtype.hpp"

namespace spattn::test {
namespace {

/// At most this many mismatching elements are printed per comparison.
constexpr int kMismatchesShown = 8;

}  // namespace

bool cuda_device_present() {
  int device_count = 0;
  return cudaGetDeviceCount(&device_count) == cudaSuccess && device_count > 0;
}

void CudaKernelTest::SetUp() {
  if (!cuda_device_present()) GTEST_SKIP() << "no CUDA device";
  gpu_ = std::make_unique<cuda::CudaElementwiseKernels>(Device{DeviceKind::cuda, 0});
  cpu_ = make_cpu_block_kernels();
}

std::vector<int64_t> runnable_head_dims(const std::vector<int64_t>& head_dims,
                                        const std::function<std::string(int64_t)>& unsupported) {
  std::vector<int64_t> runnable;
  std::string left_out;
  for (const int64_t head_dim : head_dims) {
    const std::string reason = unsupported(head_dim);
    if (reason.empty()) {
      runnable.push_back(head_dim);
    } else {
      left_out += (left_out.empty() ? "" : "; ") + reason;
    }
  }
  if (runnable.empty()) {
    [&] { GTEST_SKIP() << left_out; }();  // marks the test skipped; its loops over no head dim do nothing
  } else if (!left_out.empty()) {
    // Once per test: its loops ask again for every dtype and case, with the same answer.
    static std::string last_noted;
    const std::string note =
        std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()) + ": " + left_out;
    if (note != last_noted) std::cout << "[   NOTE   ] not run in " << note << "\n";
    last_noted = note;
  }
  return runnable;
}

DeviceTwin::DeviceTwin(cuda::CudaElementwiseKernels& kernels, const HostTensor& host)
    : kernels_(kernels), host_(host), original_data_(host.view().data) {
  const std::size_t bytes = static_cast<std::size_t>(host.numel()) * dtype_size(host.dtype());
  device_data_ = kernels_.allocate(bytes);
  // On the kernels' stream, so that the kernels (on a non-blocking stream) run after the upload.
  SPATTN_CUDA_CHECK(cudaMemcpyAsync(device_data_, host_.view().data, bytes, cudaMemcpyHostToDevice, kernels_.stream()));
  kernels_.synchronize();
}

DeviceTwin::~DeviceTwin() { kernels_.deallocate(device_data_); }

TensorView DeviceTwin::twin(const TensorView& host_view) const {
  // Views come from the caller's tensor, so offsets are measured from its bytes, not our copy's.
  const auto* host_base = static_cast<const unsigned char*>(original_data_);
  const auto* view_start = static_cast<const unsigned char*>(host_view.data);
  const std::ptrdiff_t offset = view_start - host_base;
  const std::ptrdiff_t bytes = static_cast<std::ptrdiff_t>(host_.numel() * static_cast<int64_t>(dtype_size(host_.dtype())));
  SPATTN_CHECK(offset >= 0 && offset < std::max<std::ptrdiff_t>(bytes, 1),
               "DeviceTwin::twin: the view does not start inside the tensor this twin was made from");
  TensorView device_view = host_view;
  device_view.data = static_cast<unsigned char*>(device_data_) + offset;
  device_view.device = kernels_.device();
  return device_view;
}

TensorView DeviceTwin::view() const {
  TensorView device_view = host_.view();
  device_view.data = device_data_;
  device_view.device = kernels_.device();
  return device_view;
}

HostTensor DeviceTwin::download() const {
  HostTensor result = host_;
  const std::size_t bytes = static_cast<std::size_t>(result.numel()) * dtype_size(result.dtype());
  SPATTN_CUDA_CHECK(cudaMemcpyAsync(result.view().data, device_data_, bytes, cudaMemcpyDeviceToHost, kernels_.stream()));
  kernels_.synchronize();
  return result;
}

TensorView seq_heads_transposed(const TensorView& bhsd) {
  TensorView bshd = bhsd;
  std::swap(bshd.shape[1], bshd.shape[2]);
  std::swap(bshd.strides[1], bshd.strides[2]);
  return bshd;
}

void expect_identical(const HostTensor& expected, const HostTensor& actual, const std::string& what) {
  ASSERT_EQ(expected.numel(), actual.numel()) << what;
  ASSERT_EQ(expected.dtype(), actual.dtype()) << what;
  const std::size_t element_bytes = dtype_size(expected.dtype());
  const auto* expected_bytes = static_cast<const unsigned char*>(expected.view().data);
  const auto* actual_bytes = static_cast<const unsigned char*>(actual.view().data);
  int mismatches = 0;
  for (int64_t i = 0; i < expected.numel(); ++i) {
    const std::size_t offset = static_cast<std::size_t>(i) * element_bytes;
    if (std::memcmp(expected_bytes + offset, actual_bytes + offset, element_bytes) == 0) continue;
    if (std::isnan(expected.at(i)) && std::isnan(actual.at(i))) continue;
    if (++mismatches <= kMismatchesShown)
      ADD_FAILURE() << what << ": element " << i << " is " << actual.at(i) << " on the GPU, " << expected.at(i)
                    << " on the CPU (" << dtype_name(expected.dtype()) << ", compared bit for bit)";
  }
  EXPECT_EQ(mismatches, 0) << what << ": elements that differ from the CPU kernels' result";
}

void expect_close(const HostTensor& expected, const HostTensor& actual, double absolute, double relative,
                  const std::string& what) {
  ASSERT_EQ(expected.numel(), actual.numel()) << what;
  int mismatches = 0;
  double worst_excess = 0.0;
  for (int64_t i = 0; i < expected.numel(); ++i) {
    const double want = expected.at(i), got = actual.at(i);
    if (want == got || (std::isnan(want) && std::isnan(got))) continue;
    const double error = std::abs(got - want);
    const double allowed = absolute + relative * std::abs(want);
    if (std::isfinite(want) && std::isfinite(got) && error <= allowed) continue;
    worst_excess = std::max(worst_excess, std::isfinite(error) ? error / allowed : INFINITY);
    if (++mismatches <= kMismatchesShown)
      ADD_FAILURE() << what << ": element " << i << " is " << got << " on the GPU, " << want << " on the CPU"
                    << (std::isnan(got) ? " (NaN: never written?)" : "") << "; allowed error " << allowed;
  }
  EXPECT_EQ(mismatches, 0) << what << ": elements off the CPU result by more than the tolerance (worst "
                           << worst_excess << "x the allowed error)";
}

void set_element(const TensorView& view, const std::array<int64_t, TensorView::kMaxDims>& index, double value) {
  void* element = view.element_pointer(index);
  const float narrowed = static_cast<float>(value);
  switch (view.dtype) {
    case DType::f32:
      std::memcpy(element, &narrowed, sizeof narrowed);
      return;
    case DType::f16: {
      const uint16_t bits = float_to_fp16(narrowed);
      std::memcpy(element, &bits, sizeof bits);
      return;
    }
    case DType::bf16: {
      const uint16_t bits = float_to_bf16(narrowed);
      std::memcpy(element, &bits, sizeof bits);
      return;
    }
  }
}

}  // namespace spattn::test
