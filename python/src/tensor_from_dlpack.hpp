#pragma once
// Torch (or any DLPack) tensors as spattn::TensorView, without copies.

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include "spattn/tensor.hpp"

namespace spattn::python {

/// A view of `array`'s memory. Throws spattn::Error, naming the argument `name`, unless the
/// array is a contiguous CPU or CUDA tensor of 1 to 4 dimensions in float32, float16 or bfloat16.
TensorView tensor_from_dlpack(const char* name, const nanobind::ndarray<>& array);

}  // namespace spattn::python
