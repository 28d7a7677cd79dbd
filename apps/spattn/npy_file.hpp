#pragma once
/// \file npy_file.hpp
/// Reading and writing NumPy .npy files, the format in which `spattn run` exchanges tensors.

#include <cstdint>
#include <istream>
#include <string>
#include <vector>

#include "spattn/dtype.hpp"

namespace spattn::app {

/// An array read from a .npy file, its values widened to fp32 whatever the file stored.
struct NpyArray {
  std::vector<int64_t> shape;   // () for a scalar
  DType stored_dtype = DType::f32;  // f32 or f16: what the file held, before widening
  std::vector<float> values;    // C order, one entry per element

  int64_t numel() const { return static_cast<int64_t>(values.size()); }
};

/// Reads a .npy file of format version 1.0, 2.0 or 3.0 holding little-endian float32 ('<f4')
/// or float16 ('<f2') in C order. Throws Error naming the file, what is wrong and what is
/// allowed for anything else: a missing file, a bad magic or version, a header that is not the
/// expected dict, Fortran order, another dtype, a negative or too large shape, or data that is
/// shorter or longer than the shape says.
NpyArray read_npy(const std::string& path);

/// The same from a seekable binary stream (a file, or bytes in memory); `name` stands for the
/// file in messages. Sizes in the header are checked against the stream's length before
/// anything is allocated.
NpyArray read_npy(std::istream& stream, const std::string& name);

/// Writes `data` as a version 1.0 '<f4' C-order .npy file whose data starts at a multiple of
/// 64 bytes, as NumPy writes it. Throws Error naming the path if it cannot be written.
/// \param[in] data   numel(shape) floats, C order (may be null when shape has a zero)
/// \param[in] shape  non-negative sizes; empty for a scalar
void write_npy(const std::string& path, const float* data, const std::vector<int64_t>& shape);

/// Throws Error unless `array` has shape `expected`, e.g.
/// "q.npy has shape (2, 64, 4, 32); expected (2, 128, 4, 32) (B, S, H, D)".
/// \param[in] name              how the message names the array, e.g. its file name
/// \param[in] dimension_names   e.g. "B, S, H, D"; empty to leave it out of the message
void expect_shape(const NpyArray& array, const std::vector<int64_t>& expected,
                  const std::string& name, const std::string& dimension_names = "");

/// "(2, 64, 4, 32)"; "(5,)" for one dimension and "()" for none, as NumPy prints shapes.
std::string format_shape(const std::vector<int64_t>& shape);

}  // namespace spattn::app
