#pragma once
// dQ's way from the backward's consumer warpgroups to the dQ writer (backward_kernel.cuh): the
// product dQ^T = K^T dS^T in fp32 accumulators and the shared-memory buffer that the TMA unit adds
// into dq, whose swizzle keeps the element stores between them free of bank conflicts.
// Host-compilable, so that the CPU tests check the stores' banks
// (tests/cpp/kernels/hopper_query_grad_stores_test.cpp).

#include <cute/tensor.hpp>
// The atoms after cute/tensor.hpp, which they need.
#include <cute/atom/mma_atom.hpp>
#include <cute/atom/mma_traits_sm90_gmma.hpp>

#include "kernels/hopper/transposed_layout.hpp"

namespace spattn::cuda::hopper {

/// The types of dQ's product and buffer for kBlockM query rows, kHeadDim columns and kBlockN keys.
template <class Element, int kBlockM, int kHeadDim, int kBlockN>
struct QueryGradBuffer {
  // dQ^T = K^T dS^T runs on 64 rows of head_dim per warpgroup: both at D = 128, one at D = 64
  // (transposed, so that the query rows are wgmma's N, which need not be a multiple of 64).
  static constexpr int kPartColumns = 64;
  static constexpr int kWarpgroups = kHeadDim / kPartColumns;
  // (M = head_dim, N = queries, K = keys): K^T read MN-major from K, dS^T K-major from dS.
  using Tile = cute::Shape<cute::Int<kHeadDim>, cute::Int<kBlockM>, cute::Int<kBlockN>>;
  using Mma = decltype(cute::make_tiled_mma(
      cute::GMMA::ss_op_selector<Element, Element, float, Tile, cute::GMMA::Major::MN, cute::GMMA::Major::K>(),
      cute::Layout<cute::Shape<cute::Int<kWarpgroups>, cute::_1, cute::_1>>{}));
  // dQ of a step in fp32, (rows, head_dim), as the TMA unit reads it to add into dq: 128-byte
  // swizzled (16-byte chunk c of row r at chunk c ^ (r % 8); CuTe applies it to the pointer).
  using Smem = decltype(cute::tile_to_shape(cute::GMMA::Layout_K_SW128_Atom<float>{},
                                            cute::Shape<cute::Int<kBlockM>, cute::Int<kHeadDim>>{}));
  // One warpgroup's part of the buffer, its 64 columns: the first part is the buffer's first
  // kPartElements floats (the swizzle atom spans 32 columns, and the atoms go down the rows before
  // they go across), the second part the next kPartElements. Each is added into dq on its own.
  using SmemPart = decltype(cute::tile_to_shape(cute::GMMA::Layout_K_SW128_Atom<float>{},
                                                cute::Shape<cute::Int<kBlockM>, cute::Int<kPartColumns>>{}));
  static constexpr int kPartElements = kBlockM * kPartColumns;
  // The buffer's bytes as (head_dim, rows), the shape of dQ^T's accumulator that stores them.
  using SmemTransposed = Transposed<Smem>;
};

}  // namespace spattn::cuda::hopper
