#pragma once
// A tensor that owns its host memory, for the programs and tests that feed spattn.

#include <cstdint>
#include <initializer_list>
#include <vector>

#include "spattn/tensor.hpp"

namespace spattn {

class HostTensor {
 public:
  HostTensor() = default;
  HostTensor(DType dtype, std::initializer_list<int64_t> shape);
  HostTensor(const HostTensor& other);
  HostTensor& operator=(const HostTensor& other);
  HostTensor(HostTensor&&) = default;
  HostTensor& operator=(HostTensor&&) = default;

  const TensorView& view() const { return view_; }
  TensorView& view() { return view_; }
  bool empty() const { return bytes_.empty(); }

  /// Element i (row-major) as a double, whatever the dtype.
  double at(int64_t index) const;
  /// Sets element i (row-major), rounding to the dtype.
  void set(int64_t index, double value);

  /// Fresh standard-normal values from `seed`, rounded to the dtype.
  void fill_normal(uint64_t seed);
  /// NaN everywhere: outputs are poisoned before a run so that unwritten elements show.
  void fill_nan();

 private:
  std::vector<unsigned char> bytes_;
  TensorView view_;
};

}  // namespace spattn
