// The own backward's dQ stores into its shared-memory buffer (src/kernels/hopper/query_grad_buffer.hpp),
// checked on the CPU with the kernel's own CuTe types: each of a warp's 64-bit store instructions
// goes in two halves of 16 lanes, and a half is one pass through the 32 banks only when its 16
// pairs fall on distinct banks. Bank conflicts cost the kernel (ncu, 2026-11-28: twice the ideal
// wavefronts, 8% of its warps' stall samples) but never its results, so only this test sees them.
// And each warpgroup's part of the buffer, added into dq on its own, is that warpgroup's columns.

#include <cutlass/numeric_types.h>
#include <gtest/gtest.h>

#include <array>
#include <map>
#include <set>
#include <utility>

#include "kernels/hopper/query_grad_buffer.hpp"

namespace spattn::cuda::hopper {
namespace {

using namespace cute;

constexpr int kRows = 64, kKeys = 128;  // kBackwardQueryTile, kBackwardKeyTile

/// The byte address in the (1024-byte aligned) buffer of (row, column): the layout's offset, then
/// its swizzle, which CuTe applies to the shared-memory pointer's bytes rather than to the offset.
template <class Layout>
int swizzled_byte(const Layout& layout, int row, int column) {
  return static_cast<int>(layout.layout_a()(static_cast<int>(layout.layout_b()(row, column)) * int{sizeof(float)}));
}

struct StoreCensus {
  int passes = 0;                        // bank passes over every half-warp of every store instruction
  int half_warps = 0;                    // the ideal: one pass each
  std::set<std::pair<int, int>> stored;  // (row, column) of every element stored
  int stores = 0;
};

/// Every consumer thread's stores of its dQ pairs in query_grad_stored_block's order (or in the
/// accumulator's own order when `reordered` is false).
template <int kHeadDim>
StoreCensus census(bool reordered) {
  using Buffer = QueryGradBuffer<cutlass::bfloat16_t, kRows, kHeadDim, kKeys>;
  const typename Buffer::Smem layout{};
  typename Buffer::Store store;
  StoreCensus result;
  for (int warp = 0; warp < 4 * Buffer::kWarpgroups; ++warp) {
    // instruction (row half, block) -> the byte address each lane writes
    std::map<std::pair<int, int>, std::array<int, 32>> addresses;
    for (int lane = 0; lane < 32; ++lane) {
      const int thread = warp * 32 + lane;
      Tensor coordinates = store.get_thread_slice(thread).partition_D(
          make_identity_tensor(Shape<Int<kRows>, Int<kHeadDim>>{}));  // the same 32 places as the kernel's
      EXPECT_EQ(size(coordinates), 32);
      const bool odd_row = query_grad_odd_row(thread);
      for (int half = 0; half < 2; ++half) {
        for (int block = 0; block < 8; ++block) {
          const int stored = reordered ? query_grad_stored_block(block, odd_row) : block;
          const auto first = coordinates(2 * half + 4 * stored), second = coordinates(2 * half + 4 * stored + 1);
          EXPECT_EQ(get<0>(first) % 2 == 1, odd_row) << "thread " << thread;
          EXPECT_EQ(get<0>(second), get<0>(first));
          EXPECT_EQ(get<1>(second), get<1>(first) + 1);  // a pair: one 64-bit store
          result.stored.insert({get<0>(first), get<1>(first)});
          result.stored.insert({get<0>(second), get<1>(second)});
          result.stores += 2;
          addresses[{half, block}][lane] = swizzled_byte(layout, get<0>(first), get<1>(first));
        }
      }
    }
    for (const auto& [instruction, lanes] : addresses) {
      for (int half_warp = 0; half_warp < 2; ++half_warp) {
        std::map<int, std::set<int>> words_of_bank;  // a bank serves one 4-byte word per pass
        for (int lane = 16 * half_warp; lane < 16 * half_warp + 16; ++lane)
          for (int word = lanes[lane] / 4; word < lanes[lane] / 4 + 2; ++word) words_of_bank[word % 32].insert(word);
        int passes = 0;
        for (const auto& [bank, words] : words_of_bank) passes = std::max(passes, static_cast<int>(words.size()));
        result.passes += passes;
        ++result.half_warps;
      }
    }
  }
  return result;
}

template <int kHeadDim>
void expect_every_element_once_and_one_pass_per_half_warp() {
  const StoreCensus reordered = census<kHeadDim>(true);
  EXPECT_EQ(reordered.stores, kRows * kHeadDim);
  EXPECT_EQ(static_cast<int>(reordered.stored.size()), kRows * kHeadDim);  // each element once
  EXPECT_EQ(reordered.passes, reordered.half_warps);
  // The accumulator's own order is what the reordering is for: two passes per half-warp.
  const StoreCensus plain = census<kHeadDim>(false);
  EXPECT_EQ(plain.passes, 2 * plain.half_warps);
}

TEST(HopperQueryGradStores, EveryElementOnceWithoutBankConflictsAtHeadDim128) {
  expect_every_element_once_and_one_pass_per_half_warp<128>();
}

TEST(HopperQueryGradStores, EveryElementOnceWithoutBankConflictsAtHeadDim64) {
  expect_every_element_once_and_one_pass_per_half_warp<64>();
}

/// Each warpgroup's part of the buffer, which the TMA unit adds into dq on its own, holds that
/// warpgroup's 64 columns at the same bytes as the whole buffer's layout, swizzle and all, from
/// byte part * kPartElements * 4 on.
template <int kHeadDim>
void expect_parts_to_be_the_buffers_columns() {
  using Buffer = QueryGradBuffer<cutlass::bfloat16_t, kRows, kHeadDim, kKeys>;
  const typename Buffer::Smem whole{};
  const typename Buffer::SmemPart part_layout{};
  for (int part = 0; part < Buffer::kWarpgroups; ++part)
    for (int row = 0; row < kRows; ++row)
      for (int column = 0; column < 64; ++column)
        ASSERT_EQ(part * Buffer::kPartElements * int{sizeof(float)} + swizzled_byte(part_layout, row, column),
                  swizzled_byte(whole, row, 64 * part + column))
            << "part " << part << ", row " << row << ", column " << column;
}

TEST(HopperQueryGradStores, EachWarpgroupsPartIsItsColumnsOfTheBuffer) {
  expect_parts_to_be_the_buffers_columns<128>();
  expect_parts_to_be_the_buffers_columns<64>();
}

}  // namespace
}  // namespace spattn::cuda::hopper
