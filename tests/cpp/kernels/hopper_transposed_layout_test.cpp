// The transposed shared-memory views of the own backward (src/kernels/hopper/transposed_layout.hpp),
// checked on the CPU with CuTe's types: every element of the transposed view is the same byte of
// shared memory, swizzle included, as the element of the layout it reads the other way round. A
// wrong view would feed wgmma the wrong operand, which only the GPU tests would otherwise catch.

#include <cutlass/numeric_types.h>
#include <gtest/gtest.h>

#include "kernels/hopper/backward_tiles.hpp"
#include "kernels/hopper/query_grad_buffer.hpp"
#include "kernels/hopper/transposed_layout.hpp"
#include "swizzled_byte.hpp"

namespace spattn::cuda::hopper {
namespace {

using namespace cute;

constexpr int kKeys = kBackwardKeyTile;

/// Query rows of a step at kHeadDim.
template <int kHeadDim>
constexpr int kRows = backward_query_tile(kHeadDim);

/// Every (row, column[, copy]) of `Smem` (rows, columns[, copies]) against (column, row[, copy])
/// of its transposed view: the copies keep their place.
template <class Smem, class Element>
void expect_same_bytes() {
  constexpr int kRank = decltype(rank(Smem{}))::value;
  const Smem smem{};
  const Transposed<Smem> transposed{};
  static_assert(size<0>(Transposed<Smem>{}) == size<1>(Smem{}) && size<1>(Transposed<Smem>{}) == size<0>(Smem{}));
  int copies = 1;
  if constexpr (kRank == 3) {
    static_assert(size<2>(Transposed<Smem>{}) == size<2>(Smem{}));
    copies = size<2>(smem);
  }
  int mismatches = 0;
  for (int copy = 0; copy < copies; ++copy) {
    const auto byte = [copy](const auto& layout, int first, int second) {
      if constexpr (kRank == 3) {
        return swizzled_byte<Element>(layout, first, second, copy);
      } else {
        return swizzled_byte<Element>(layout, first, second);
      }
    };
    for (int row = 0; row < size<0>(smem); ++row) {
      for (int column = 0; column < size<1>(smem); ++column) {
        mismatches += byte(smem, row, column) != byte(transposed, column, row);
      }
    }
  }
  EXPECT_EQ(mismatches, 0) << "of " << size(smem) << " elements";
}

template <int kHeadDim>
using Keys = decltype(tile_to_shape(GMMA::Layout_K_SW128_Atom<cutlass::bfloat16_t>{},
                                    Shape<Int<kKeys>, Int<kHeadDim>>{}));  // K as loaded
template <int kHeadDim>
using Rows = decltype(tile_to_shape(GMMA::Layout_K_SW128_Atom<cutlass::bfloat16_t>{},
                                    Shape<Int<kRows<kHeadDim>>, Int<kHeadDim>, _2>{}));  // Q or dO, two stages
template <int kHeadDim>
using ScoreGrads = decltype(tile_to_shape(GMMA::Layout_K_SW128_Atom<cutlass::bfloat16_t>{},
                                          Shape<Int<kRows<kHeadDim>>, Int<kKeys>, _2>{}));  // dS, two buffers

TEST(HopperTransposedLayout, KeysReadAsKeysTransposedAreTheSameBytes) {
  expect_same_bytes<Keys<128>, cutlass::bfloat16_t>();
  expect_same_bytes<Keys<64>, cutlass::bfloat16_t>();
}

TEST(HopperTransposedLayout, RowsOfEveryStageReadTransposedAreTheSameBytes) {
  expect_same_bytes<Rows<128>, cutlass::bfloat16_t>();
  expect_same_bytes<Rows<64>, cutlass::bfloat16_t>();
  expect_same_bytes<ScoreGrads<128>, cutlass::bfloat16_t>();
  expect_same_bytes<ScoreGrads<64>, cutlass::bfloat16_t>();
}

TEST(HopperTransposedLayout, QueryGradBufferReadTransposedIsTheSameBytes) {
  expect_same_bytes<QueryGradBuffer<cutlass::bfloat16_t, kRows<128>, 128, kKeys>::Smem, float>();
  expect_same_bytes<QueryGradBuffer<cutlass::half_t, kRows<64>, 64, kKeys>::Smem, float>();
}

}  // namespace
}  // namespace spattn::cuda::hopper
