// The own backward's dQ stores into its shared-memory buffer (src/kernels/hopper/query_grad_buffer.hpp),
// checked on the CPU with the kernel's own CuTe types: each thread stores its elements of dQ^T's
// accumulator one 32-bit store at a time, and a warp's store instruction is one pass through the
// 32 banks only when its 32 words fall on distinct banks. Bank conflicts cost the kernel (ncu,
// 2026-11-28: twice the ideal wavefronts, 8% of its warps' stall samples) but never its results,
// so only this test sees them. And each warpgroup's part of the buffer, added into dq on its own,
// is that warpgroup's columns.

#include <cutlass/numeric_types.h>
#include <gtest/gtest.h>

#include <map>
#include <set>
#include <utility>

#include "kernels/hopper/backward_tiles.hpp"
#include "kernels/hopper/query_grad_buffer.hpp"
#include "swizzled_byte.hpp"

namespace spattn::cuda::hopper {
namespace {

using namespace cute;

constexpr int kKeys = kBackwardKeyTile;

/// Query rows of a step at kHeadDim.
template <int kHeadDim>
constexpr int kRows = backward_query_tile(kHeadDim);

struct StoreCensus {
  int passes = 0;                        // bank passes over every store instruction of every warp
  int instructions = 0;                  // the ideal: one pass each
  std::set<std::pair<int, int>> stored;  // (row, column) of every element stored
  int stores = 0;
};

/// Every dQ thread's stores of its accumulator elements, (head_dim, rows) as the product holds
/// them, into the (rows, head_dim) buffer.
template <int kHeadDim>
StoreCensus census() {
  using Buffer = QueryGradBuffer<cutlass::bfloat16_t, kRows<kHeadDim>, kHeadDim, kKeys>;
  const typename Buffer::Smem layout{};
  typename Buffer::Mma mma;
  StoreCensus result;
  for (int warp = 0; warp < 4 * Buffer::kWarpgroups; ++warp) {
    std::map<int, std::map<int, std::set<int>>> words_of_bank;  // instruction -> bank -> words
    for (int lane = 0; lane < 32; ++lane) {
      Tensor coordinates = mma.get_thread_slice(warp * 32 + lane)
                               .partition_C(make_identity_tensor(Shape<Int<kHeadDim>, Int<kRows<kHeadDim>>>{}));
      for (int element = 0; element < size(coordinates); ++element) {
        const int column = get<0>(coordinates(element)), row = get<1>(coordinates(element));
        result.stored.insert({row, column});
        ++result.stores;
        const int word = swizzled_byte<float>(layout, row, column) / 4;
        words_of_bank[element][word % 32].insert(word);  // a bank serves one word per pass
      }
    }
    for (const auto& [instruction, banks] : words_of_bank) {
      int passes = 0;
      for (const auto& [bank, words] : banks) passes = std::max(passes, static_cast<int>(words.size()));
      result.passes += passes;
      ++result.instructions;
    }
  }
  return result;
}

template <int kHeadDim>
void expect_every_element_once_and_one_pass_per_instruction() {
  const StoreCensus stores = census<kHeadDim>();
  EXPECT_EQ(stores.stores, kRows<kHeadDim> * kHeadDim);
  EXPECT_EQ(static_cast<int>(stores.stored.size()), kRows<kHeadDim> * kHeadDim);  // each element once
  EXPECT_EQ(stores.passes, stores.instructions);
}

TEST(HopperQueryGradStores, EveryElementOnceWithoutBankConflictsAtHeadDim128) {
  expect_every_element_once_and_one_pass_per_instruction<128>();
}

TEST(HopperQueryGradStores, EveryElementOnceWithoutBankConflictsAtHeadDim64) {
  expect_every_element_once_and_one_pass_per_instruction<64>();
}

/// Each warpgroup's part of the buffer, which the TMA unit adds into dq on its own, holds that
/// warpgroup's 64 columns at the same bytes as the whole buffer's layout, swizzle and all, from
/// byte part * kPartElements * 4 on.
template <int kHeadDim>
void expect_parts_to_be_the_buffers_columns() {
  using Buffer = QueryGradBuffer<cutlass::bfloat16_t, kRows<kHeadDim>, kHeadDim, kKeys>;
  const typename Buffer::Smem whole{};
  const typename Buffer::SmemPart part_layout{};
  for (int part = 0; part < Buffer::kWarpgroups; ++part)
    for (int row = 0; row < kRows<kHeadDim>; ++row)
      for (int column = 0; column < 64; ++column)
        ASSERT_EQ(part * Buffer::kPartElements * int{sizeof(float)} + swizzled_byte<float>(part_layout, row, column),
                  swizzled_byte<float>(whole, row, 64 * part + column))
            << "part " << part << ", row " << row << ", column " << column;
}

TEST(HopperQueryGradStores, EachWarpgroupsPartIsItsColumnsOfTheBuffer) {
  expect_parts_to_be_the_buffers_columns<128>();
  expect_parts_to_be_the_buffers_columns<64>();
}

}  // namespace
}  // namespace spattn::cuda::hopper
