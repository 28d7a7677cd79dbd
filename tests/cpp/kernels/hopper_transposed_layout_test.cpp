// The transposed shared-memory views of the own backward (src/kernels/hopper/transposed_layout.hpp),
// checked on the CPU with CuTe's types: every element of the transposed view is the same byte of
// shared memory, swizzle included, as the element of the layout it reads the other way round. A
// wrong view would feed wgmma the wrong operand, which only the GPU tests would otherwise catch.

#include <cutlass/numeric_types.h>
#include <gtest/gtest.h>

#include "kernels/hopper/backward_tiles.hpp"
#include "kernels/hopper/query_grad_buffer.hpp"
#include "kernels/hopper/transposed_layout.hpp"

namespace spattn::cuda::hopper {
namespace {

using namespace cute;

constexpr int kRows = kBackwardQueryTile, kKeys = kBackwardKeyTile;

/// The byte in shared memory of the element at `offset`: CuTe's swizzled layouts apply their
/// swizzle to the pointer's bytes, after the offset.
template <class Smem>
int swizzled_byte(const Smem& smem, int offset, int element_bytes) {
  return static_cast<int>(smem.layout_a()(offset * element_bytes));
}

/// Every (row, column) of a 2-mode `Smem` against (column, row) of its transposed view.
template <class Smem, class Element>
void expect_same_bytes_2d() {
  const Smem smem{};
  const Transposed<Smem> transposed{};
  static_assert(size<0>(Transposed<Smem>{}) == size<1>(Smem{}) && size<1>(Transposed<Smem>{}) == size<0>(Smem{}));
  int mismatches = 0;
  for (int row = 0; row < size<0>(smem); ++row) {
    for (int column = 0; column < size<1>(smem); ++column) {
      const int original = swizzled_byte(smem, smem.layout_b()(row, column), sizeof(Element));
      const int read_back = swizzled_byte(transposed, transposed.layout_b()(column, row), sizeof(Element));
      mismatches += original != read_back;
    }
  }
  EXPECT_EQ(mismatches, 0) << "of " << size(smem) << " elements";
}

/// The same for a 3-mode `Smem` (rows, columns, copies): the copies keep their place.
template <class Smem, class Element>
void expect_same_bytes_3d() {
  const Smem smem{};
  const Transposed<Smem> transposed{};
  static_assert(size<2>(Transposed<Smem>{}) == size<2>(Smem{}));
  int mismatches = 0;
  for (int copy = 0; copy < size<2>(smem); ++copy) {
    for (int row = 0; row < size<0>(smem); ++row) {
      for (int column = 0; column < size<1>(smem); ++column) {
        const int original = swizzled_byte(smem, smem.layout_b()(row, column, copy), sizeof(Element));
        const int read_back = swizzled_byte(transposed, transposed.layout_b()(column, row, copy), sizeof(Element));
        mismatches += original != read_back;
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
                                    Shape<Int<kRows>, Int<kHeadDim>, _2>{}));  // Q or dO, two stages
using ScoreGrads = decltype(tile_to_shape(GMMA::Layout_K_SW128_Atom<cutlass::bfloat16_t>{},
                                          Shape<Int<kRows>, Int<kKeys>, _2>{}));  // dS, two buffers

TEST(HopperTransposedLayout, KeysReadAsKeysTransposedAreTheSameBytes) {
  expect_same_bytes_2d<Keys<128>, cutlass::bfloat16_t>();
  expect_same_bytes_2d<Keys<64>, cutlass::bfloat16_t>();
}

TEST(HopperTransposedLayout, RowsOfEveryStageReadTransposedAreTheSameBytes) {
  expect_same_bytes_3d<Rows<128>, cutlass::bfloat16_t>();
  expect_same_bytes_3d<Rows<64>, cutlass::bfloat16_t>();
  expect_same_bytes_3d<ScoreGrads, cutlass::bfloat16_t>();
}

TEST(HopperTransposedLayout, QueryGradBufferReadTransposedIsTheSameBytes) {
  expect_same_bytes_2d<QueryGradBuffer<cutlass::bfloat16_t, kRows, 128, kKeys>::Smem, float>();
  expect_same_bytes_2d<QueryGradBuffer<cutlass::half_t, kRows, 64, kKeys>::Smem, float>();
}

}  // namespace
}  // namespace spattn::cuda::hopper
