#pragma once
// Copies and zero fills of host tensors of any strides, for the sharding helpers.

#include "spattn/tensor.hpp"

namespace spattn {

/// Copies `source` into `destination`: same dtype, same shape, any strides, both on the host.
void copy_host_tensor(const TensorView& source, const TensorView& destination);

/// Sets every element of `destination` (on the host, any strides) to zero bits.
void zero_host_tensor(const TensorView& destination);

}  // namespace spattn
