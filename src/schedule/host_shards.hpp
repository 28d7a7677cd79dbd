#pragma once
// What the sharding helpers (shard_sequence, shard_documents and their inverses) share: the check
// of a whole tensor against a rank's shard, and copies and zero fills of host tensors of any
// strides.

#include <cstdint>

#include "spattn/tensor.hpp"

namespace spattn {

/// Throws Error unless `whole` ("<whole_name> tensor") and `local` have one dtype, are on the
/// host, have the same number of dimensions with `seq_dim` among them, and agree in every extent
/// but `seq_dim`, where `local` has `local_tokens`. The whole tensor's own length is the caller's
/// to check: what it must be differs between the helpers.
void check_whole_and_shard(const char* whole_name, const TensorView& whole, const TensorView& local, int seq_dim,
                           int64_t local_tokens);

/// Copies `source` into `destination`: same dtype, same shape, any strides, both on the host.
void copy_host_tensor(const TensorView& source, const TensorView& destination);

/// Sets every element of `destination` (on the host, any strides) to zero bits.
void zero_host_tensor(const TensorView& destination);

}  // namespace spattn
