#pragma once
// Warpgroup matrix products (wgmma) and the register layouts of their accumulators, for the own
// attention kernels: issue a product asynchronously, wait for it later, and read an
// accumulator as rows and columns or hand it on as the A operand of the next product.

#include <cute/tensor.hpp>

namespace spattn::cuda::hopper {

/// Issues C (+)= A B over every K block of the operands as one batch of wgmma and returns without
/// waiting: cute::warpgroup_wait<N>() later waits until at most N batches are still running.
/// With kZeroInit the first block overwrites C instead of adding to it. A lives in shared memory
/// (descriptors) or in registers; B in shared memory.
template <bool kZeroInit, class TiledMma, class FragmentA, class FragmentB, class FragmentC>
__device__ void issue_warpgroup_mma(TiledMma& mma, FragmentA const& a, FragmentB const& b, FragmentC& c) {
  constexpr bool a_in_registers = !cute::is_base_of<cute::GMMA::DescriptorIterator, typename TiledMma::FrgTypeA>::value;
  // Registers that wgmma reads or writes asynchronously must not be moved by the compiler across
  // the products: the fences pin them.
  if constexpr (a_in_registers) cute::warpgroup_fence_operand(const_cast<FragmentA&>(a));
  cute::warpgroup_fence_operand(c);
  cute::warpgroup_arrive();
  mma.accumulate_ = kZeroInit ? cute::GMMA::ScaleOut::Zero : cute::GMMA::ScaleOut::One;
  CUTE_UNROLL
  for (int k_block = 0; k_block < cute::size<2>(a); ++k_block) {
    cute::gemm(mma, a(cute::_, cute::_, k_block), b(cute::_, cute::_, k_block), c);
    mma.accumulate_ = cute::GMMA::ScaleOut::One;
  }
  cute::warpgroup_commit_batch();
  cute::warpgroup_fence_operand(c);
  if constexpr (a_in_registers) cute::warpgroup_fence_operand(const_cast<FragmentA&>(a));
}

/// A wgmma accumulator's layout ((2, 2, V), MMA_M, MMA_N) seen as (rows, columns): each thread
/// holds column pairs (mode 0.0) of two rows eight apart (mode 0.1) in V groups of eight columns
/// (mode 0.2), so rows = (2, MMA_M) and columns = (2, V, MMA_N).
template <class Layout>
__device__ constexpr auto accumulator_rows_columns(Layout layout) {
  using cute::get;
  static_assert(decltype(cute::rank<0>(layout))::value == 3, "a wgmma accumulator layout");
  return cute::make_layout(cute::make_layout(get<0, 1>(layout), get<1>(layout)),
                           cute::make_layout(get<0, 0>(layout), get<0, 2>(layout), get<2>(layout)));
}

/// The same registers as the 16-bit A operand of a register-sourced wgmma whose K runs along the
/// accumulator's columns: each K block of 16 is two of the accumulator's groups of eight
/// columns, so ((2, 2, V), MMA_M, MMA_N) becomes ((2, 2, 2), MMA_M, (V / 2, MMA_N)).
template <class Layout>
__device__ constexpr auto accumulator_as_operand_a(Layout layout) {
  using cute::get;
  auto column_groups = cute::logical_divide(get<0, 2>(layout), cute::Tile<cute::_2>{});  // ((2, V / 2))
  return cute::make_layout(cute::make_layout(get<0, 0>(layout), get<0, 1>(layout), get<0, 0>(column_groups)),
                           get<1>(layout), cute::coalesce(cute::make_layout(get<0, 1>(column_groups), get<2>(layout))));
}

}  // namespace spattn::cuda::hopper
