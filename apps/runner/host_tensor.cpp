#include "host_tensor.hpp"

#include <cstring>
#include <limits>
#include <random>

#include "core/dtype_conversion.hpp"

namespace spattn {

HostTensor::HostTensor(DType dtype, std::initializer_list<int64_t> shape) {
  view_ = TensorView::contiguous(nullptr, dtype, shape);
  bytes_.resize(static_cast<std::size_t>(view_.numel()) * dtype_size(dtype));
  view_.data = bytes_.data();
}

HostTensor HostTensor::like(const TensorView& view) {
  HostTensor tensor;
  tensor.view_ = view;
  tensor.view_.device = Device::cpu();
  int64_t stride = 1;
  for (int dim = view.ndim - 1; dim >= 0; --dim) {
    tensor.view_.strides[static_cast<std::size_t>(dim)] = stride;
    stride *= view.size(dim);
  }
  tensor.bytes_.resize(static_cast<std::size_t>(view.numel()) * dtype_size(view.dtype));
  tensor.view_.data = tensor.bytes_.data();
  return tensor;
}

HostTensor::HostTensor(const HostTensor& other) : bytes_(other.bytes_), view_(other.view_) {
  view_.data = bytes_.data();
}

HostTensor& HostTensor::operator=(const HostTensor& other) {
  bytes_ = other.bytes_;
  view_ = other.view_;
  view_.data = bytes_.data();
  return *this;
}

double HostTensor::at(int64_t index) const {
  const unsigned char* element = bytes_.data() + static_cast<std::size_t>(index) * dtype_size(view_.dtype);
  if (view_.dtype == DType::f32) {
    float value;
    std::memcpy(&value, element, sizeof value);
    return value;
  }
  uint16_t bits;
  std::memcpy(&bits, element, sizeof bits);
  return view_.dtype == DType::f16 ? fp16_to_float(bits) : bf16_to_float(bits);
}

void HostTensor::set(int64_t index, double value) {
  unsigned char* element = bytes_.data() + static_cast<std::size_t>(index) * dtype_size(view_.dtype);
  const float narrowed = static_cast<float>(value);
  if (view_.dtype == DType::f32) {
    std::memcpy(element, &narrowed, sizeof narrowed);
    return;
  }
  const uint16_t bits = view_.dtype == DType::f16 ? float_to_fp16(narrowed) : float_to_bf16(narrowed);
  std::memcpy(element, &bits, sizeof bits);
}

std::vector<double> HostTensor::values() const {
  std::vector<double> result(static_cast<std::size_t>(numel()));
  for (int64_t i = 0; i < numel(); ++i) result[static_cast<std::size_t>(i)] = at(i);
  return result;
}

void HostTensor::randomize(std::mt19937& generator, double standard_deviation) {
  std::normal_distribution<double> normal(0.0, standard_deviation);
  for (int64_t i = 0; i < numel(); ++i) set(i, normal(generator));
}

void HostTensor::fill_normal(uint64_t seed) {
  std::mt19937 generator(static_cast<std::mt19937::result_type>(seed));
  randomize(generator);
}

void HostTensor::fill(double value) {
  for (int64_t i = 0; i < numel(); ++i) set(i, value);
}

void HostTensor::poison() { fill(std::numeric_limits<double>::quiet_NaN()); }

}  // namespace spattn
