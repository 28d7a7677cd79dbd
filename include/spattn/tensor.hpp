#pragma once
/// \file tensor.hpp
/// A non-owning view of a strided tensor of up to four dimensions.

#include <array>
#include <cstdint>
#include <string>

#include "spattn/device.hpp"
#include "spattn/dtype.hpp"

namespace spattn {

/// A non-owning view: a pointer, an element type, a device, a shape and strides in elements.
/// Attention tensors use the layout BSHD (batch, seq, heads, head_dim); lse uses (B, H, S).
struct TensorView {
  static constexpr int kMaxDims = 4;

  void* data = nullptr;
  DType dtype = DType::f32;
  Device device{};
  int ndim = 0;
  std::array<int64_t, kMaxDims> shape{};
  std::array<int64_t, kMaxDims> strides{};  // in elements, not bytes

  /// A view of contiguous (row-major) memory.
  static TensorView contiguous(void* data, DType dtype, std::initializer_list<int64_t> shape,
                               Device device = Device::cpu());

  int64_t size(int dim) const { return shape.at(static_cast<std::size_t>(dim)); }
  int64_t stride(int dim) const { return strides.at(static_cast<std::size_t>(dim)); }
  int64_t numel() const;
  bool is_contiguous() const;

  /// Elements [start, start + length) of dimension `dim`; same strides, shifted data.
  TensorView slice(int dim, int64_t start, int64_t length) const;

  /// Pointer to the element at `index` (one entry per dimension).
  void* element_pointer(const std::array<int64_t, kMaxDims>& index) const;

  /// "(2, 128, 8, 64) bf16 cpu", for error messages.
  std::string describe() const;
};

}  // namespace spattn
