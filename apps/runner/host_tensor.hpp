#pragma once
// A tensor that owns its host memory, for the programs and tests that feed spattn.

#include <cstdint>
#include <initializer_list>
#include <random>
#include <vector>

#include "spattn/tensor.hpp"

namespace spattn {

class HostTensor {
 public:
  HostTensor() = default;
  HostTensor(DType dtype, std::initializer_list<int64_t> shape);
  /// A contiguous host tensor of `view`'s dtype and shape (the values are not copied).
  static HostTensor like(const TensorView& view);
  HostTensor(const HostTensor& other);
  HostTensor& operator=(const HostTensor& other);
  HostTensor(HostTensor&&) = default;
  HostTensor& operator=(HostTensor&&) = default;

  const TensorView& view() const { return view_; }
  TensorView& view() { return view_; }
  bool empty() const { return bytes_.empty(); }
  int64_t numel() const { return view_.numel(); }
  DType dtype() const { return view_.dtype; }

  /// Element i (row-major) as a double, whatever the dtype.
  double at(int64_t index) const;
  /// Sets element i (row-major), rounding to the dtype.
  void set(int64_t index, double value);
  /// Every element, row-major.
  std::vector<double> values() const;

  /// Fresh normal(0, standard_deviation) values from `generator`, rounded to the dtype.
  void randomize(std::mt19937& generator, double standard_deviation = 1.0);
  /// Fresh standard-normal values from `seed`, rounded to the dtype.
  void fill_normal(uint64_t seed);
  void fill(double value);
  /// NaN everywhere: outputs are poisoned before a run so that unwritten elements show.
  void poison();

 private:
  std::vector<unsigned char> bytes_;
  TensorView view_;
};

}  // namespace spattn
