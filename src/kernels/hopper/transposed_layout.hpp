#pragma once
// A shared-memory layout read the other way round. The backward keeps tiles in shared memory in
// the layout that one use wants (K-major, for a wgmma operand or a TMA copy) and reads the same
// bytes transposed for another: K as K^T for dQ^T = K^T dS^T, Q and dO as (head_dim, rows) for
// dK and dV, and the dS and dQ buffers in the shape of the transposed accumulators that store them.
// Host-compilable, as query_grad_buffer.hpp, which uses it, must be.

#include <cute/tensor.hpp>

namespace spattn::cuda::hopper {

/// `smem` (rows, columns[, copies]) with its first two modes swapped: (columns, rows[, copies]),
/// every element at the same offset, swizzle and all (a composition with the swapped layout).
template <class Smem>
CUTE_HOST_DEVICE constexpr auto transposed_layout(Smem smem) {
  using namespace cute;
  constexpr auto rows = size<0>(Smem{});
  constexpr auto columns = size<1>(Smem{});
  static_assert(decltype(rank(Smem{}))::value == 2 || decltype(rank(Smem{}))::value == 3,
                "transposed_layout takes (rows, columns) or (rows, columns, copies)");
  if constexpr (decltype(rank(Smem{}))::value == 2) {
    return composition(smem, make_layout(make_shape(columns, rows), make_stride(rows, _1{})));
  } else {
    return composition(
        smem, make_layout(make_shape(columns, rows, size<2>(Smem{})), make_stride(rows, _1{}, rows * columns)));
  }
}

/// The type of transposed_layout(Smem{}).
template <class Smem>
using Transposed = decltype(transposed_layout(Smem{}));

}  // namespace spattn::cuda::hopper
