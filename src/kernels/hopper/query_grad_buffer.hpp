#pragma once
// dQ's way from the backward's consumer warpgroups to the dQ writer (backward_kernel.cuh): the
// product dQ = dS K in fp32 accumulators, the shared-memory buffer that the TMA unit adds into dq,
// and the 64-bit stores between them, in an order free of bank conflicts. Host-compilable, so that
// the CPU tests check the stores' banks (tests/cpp/kernels/hopper_query_grad_stores_test.cpp).

#include <cstdint>
#include <cute/tensor.hpp>
// The atoms after cute/tensor.hpp, which they need.
#include <cute/atom/copy_atom.hpp>
#include <cute/atom/mma_atom.hpp>
#include <cute/atom/mma_traits_sm90_gmma.hpp>

namespace spattn::cuda::hopper {

/// The types of dQ's product and buffer for kBlockM query rows, kHeadDim columns and kBlockN keys.
template <class Element, int kBlockM, int kHeadDim, int kBlockN>
struct QueryGradBuffer {
  // dQ = dS K runs on 64 columns of head_dim per warpgroup: both at D = 128, one at D = 64.
  static constexpr int kPartColumns = 64;
  static constexpr int kWarpgroups = kHeadDim / kPartColumns;
  // One warpgroup's part: (M = queries, N = its columns of head_dim, K = keys).
  using Tile = cute::Shape<cute::Int<kBlockM>, cute::Int<kPartColumns>, cute::Int<kBlockN>>;
  using Mma = decltype(cute::make_tiled_mma(
      cute::GMMA::ss_op_selector<Element, Element, float, Tile, cute::GMMA::Major::K, cute::GMMA::Major::MN>(),
      cute::Layout<cute::Shape<cute::_1, cute::Int<kWarpgroups>, cute::_1>>{}));
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
  // A thread's column pairs, one 64-bit store each: 32 fp32 per thread, flat (pair element, row
  // half, column block of 8), both accumulator and buffer partitioned alike.
  using Store = decltype(cute::make_tiled_copy_C(cute::Copy_Atom<cute::UniversalCopy<uint64_t>, float>{}, Mma{}));
};

/// The column block (of 8 columns, 0..7) whose pair a lane stores in the store instruction of
/// column block `block`. A warp's 64-bit stores go in two halves of 16 lanes, four rows each, and
/// under the 128-byte swizzle rows 2i and 2i + 1 put the same pair on the same banks: each half
/// took two passes (ncu at 16k causal: twice the ideal wavefronts). Lanes of odd rows store the
/// pair 16 columns over instead, which the swizzle puts on the other banks; every pair is still
/// stored once, since j -> j ^ 2 pairs the blocks up.
CUTE_HOST_DEVICE constexpr int query_grad_stored_block(int block, bool odd_row) { return odd_row ? block ^ 2 : block; }

/// Whether consumer thread `thread`'s accumulator rows are odd: lane / 4 is its row within each
/// group of 8 rows of wgmma's accumulator layout.
CUTE_HOST_DEVICE constexpr bool query_grad_odd_row(int thread) { return thread % 8 >= 4; }

}  // namespace spattn::cuda::hopper
