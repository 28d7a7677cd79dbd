#include "elementwise_reference.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

namespace spattn::test {
namespace {

constexpr double kMinusInfinity = -std::numeric_limits<double>::infinity();

/// A binary floating-point format: significant bits, the exponent of its smallest normal value
/// (below it the spacing stays that of the smallest normals: subnormals), and its largest value.
struct Format {
  int precision;
  int min_exponent;
  double largest;
};

Format format_of(DType dtype) {
  switch (dtype) {
    case DType::f32: return {24, -126, 0x1.fffffep127};
    case DType::f16: return {11, -14, 65504.0};
    case DType::bf16: return {8, -126, 0x1.fep127};
  }
  return {53, -1022, std::numeric_limits<double>::max()};
}

}  // namespace

double rounded_to(DType dtype, double value) {
  if (!std::isfinite(value) || value == 0.0) return value;
  const Format format = format_of(dtype);
  int exponent;
  std::frexp(value, &exponent);  // |value| in [2^(exponent - 1), 2^exponent)
  // The spacing of the format's values around |value|: 2^quantum.
  const int quantum = std::max(exponent - 1, format.min_exponent) - (format.precision - 1);
  // nearbyint rounds to nearest even under the default rounding mode.
  const double rounded = std::ldexp(std::nearbyint(std::ldexp(value, -quantum)), quantum);
  return std::abs(rounded) > format.largest ? std::copysign(std::numeric_limits<double>::infinity(), value)
                                            : rounded;
}

MergedRows merged_rows(const HostTensor& partial_out, const HostTensor& partial_lse, const HostTensor& running_out,
                       const HostTensor& running_lse) {
  const TensorView& shape = running_out.view();
  const int64_t batch = shape.size(0), rows = shape.size(1), heads = shape.size(2), head_dim = shape.size(3);
  MergedRows merged{std::vector<double>(static_cast<std::size_t>(running_out.numel())),
                    std::vector<double>(static_cast<std::size_t>(running_lse.numel()))};
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t s = 0; s < rows; ++s) {
        const int64_t row = (b * heads + h) * rows + s;
        const double running = running_lse.at(row), partial = partial_lse.at(row);
        const double high = std::max(running, partial);
        const double lse = high == kMinusInfinity
                               ? kMinusInfinity
                               : high + std::log(std::exp(running - high) + std::exp(partial - high));
        merged.lse[static_cast<std::size_t>(row)] = lse;
        for (int64_t d = 0; d < head_dim; ++d) {
          const int64_t element = ((b * rows + s) * heads + h) * head_dim + d;
          double out = 0.0;
          if (running != kMinusInfinity) out += running_out.at(element) * std::exp(running - lse);
          if (partial != kMinusInfinity) out += partial_out.at(element) * std::exp(partial - lse);
          merged.out[static_cast<std::size_t>(element)] = out;
        }
      }
  return merged;
}

std::vector<double> row_sums_of_products(const HostTensor& out, const HostTensor& dout) {
  const TensorView& shape = out.view();
  const int64_t batch = shape.size(0), rows = shape.size(1), heads = shape.size(2), head_dim = shape.size(3);
  std::vector<double> sums(static_cast<std::size_t>(batch * heads * rows), 0.0);
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t s = 0; s < rows; ++s)
      for (int64_t h = 0; h < heads; ++h)
        for (int64_t d = 0; d < head_dim; ++d) {
          const int64_t element = ((b * rows + s) * heads + h) * head_dim + d;
          sums[static_cast<std::size_t>((b * heads + h) * rows + s)] += out.at(element) * dout.at(element);
        }
  return sums;
}

}  // namespace spattn::test
