#pragma once
// Device tensors of random values for the GPU benchmarks, filled fast enough for billions of
// elements.

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <random>
#include <vector>

#include "core/dtype_conversion.hpp"
#include "spattn/device_memory.hpp"
#include "spattn/tensor.hpp"

namespace spattn {

// A device tensor filled with normal values: a random host tile repeated over it, so that
// billions of elements need no host generator (timing does not care that the tile repeats).
class BenchTensor {
 public:
  BenchTensor(const Device& device, DType dtype, std::initializer_list<int64_t> shape, uint64_t seed)
      : view_(TensorView::contiguous(nullptr, dtype, shape, device)),
        memory_(device, static_cast<std::size_t>(view_.numel()) * dtype_size(dtype)) {
    view_.data = memory_.data();
    // Of odd length, so that the tile never repeats in step with tokens: no two tokens hold the
    // same vector, and a kernel that read the wrong key tile would not get the right answer.
    constexpr int64_t kTileElements = (int64_t{1} << 22) + 1;
    const int64_t tile = std::min(kTileElements, view_.numel());
    std::vector<unsigned char> host(static_cast<std::size_t>(tile) * dtype_size(dtype));
    std::mt19937 generator(static_cast<unsigned>(seed));
    std::normal_distribution<float> normal;
    for (int64_t i = 0; i < tile; ++i) store(host.data(), dtype, i, normal(generator));
    const std::size_t element = dtype_size(dtype);
    for (int64_t offset = 0; offset < view_.numel(); offset += tile) {
      const int64_t count = std::min(tile, view_.numel() - offset);
      copy_bytes(host.data(), Device::cpu(), static_cast<char*>(memory_.data()) + offset * element, device,
                 static_cast<std::size_t>(count) * element);
    }
  }
  const TensorView& view() const { return view_; }
  std::size_t bytes() const { return memory_.bytes(); }

 private:
  // Rounds `value` into element `index` of a host buffer of `dtype`.
  static void store(unsigned char* buffer, DType dtype, int64_t index, float value) {
    if (dtype == DType::f32) {
      std::memcpy(buffer + index * 4, &value, sizeof value);
      return;
    }
    const uint16_t bits = dtype == DType::bf16 ? float_to_bf16(value) : float_to_fp16(value);
    std::memcpy(buffer + index * 2, &bits, sizeof bits);
  }

  TensorView view_;
  DeviceMemory memory_;
};

}  // namespace spattn
