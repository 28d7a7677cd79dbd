// copy() and fill(): dtype conversion with rounding to nearest even, any strides, ranks 1..4.

#include <gtest/gtest.h>

#include <cstring>

#include "core/dtype_conversion.hpp"
#include "host_tensor.hpp"
#include "kernels/block_kernels.hpp"
#include "spattn/error.hpp"

namespace spattn::test {
namespace {

float float_from_bits(uint32_t bits) {
  float value;
  std::memcpy(&value, &bits, sizeof value);
  return value;
}

uint16_t bits_of_16(const HostTensor& tensor, int64_t index) {
  uint16_t bits;
  std::memcpy(&bits, static_cast<const unsigned char*>(tensor.view().data) + 2 * index, sizeof bits);
  return bits;
}

/// fp32 inputs and the 16-bit patterns they must round to.
struct KnownRounding {
  uint32_t input_bits;
  uint16_t expected;
};

void expect_rounding(DType dtype, const std::vector<KnownRounding>& cases) {
  auto kernels = make_cpu_block_kernels();
  const int64_t count = static_cast<int64_t>(cases.size());
  HostTensor source(DType::f32, {count});
  HostTensor destination(dtype, {count});
  for (int64_t i = 0; i < count; ++i) source.set(i, float_from_bits(cases[static_cast<std::size_t>(i)].input_bits));
  kernels->copy(source.view(), destination.view());
  for (int64_t i = 0; i < count; ++i)
    EXPECT_EQ(bits_of_16(destination, i), cases[static_cast<std::size_t>(i)].expected)
        << dtype_name(dtype) << " of fp32 bits 0x" << std::hex << cases[static_cast<std::size_t>(i)].input_bits;
}

TEST(Copy, RoundsToNearestEvenBf16) {
  expect_rounding(DType::bf16, {
                                   {0x3f800000u, 0x3f80},  // 1
                                   {0x3f808000u, 0x3f80},  // 1 + 2^-8: tie, to even (down)
                                   {0x3f818000u, 0x3f82},  // 1 + 3 * 2^-8: tie, to even (up)
                                   {0x3f808001u, 0x3f81},  // just above the tie
                                   {0xc0490fdbu, 0xc049},  // -pi
                                   {0x7f800000u, 0x7f80},  // inf
                               });
}

TEST(Copy, RoundsToNearestEvenFp16) {
  expect_rounding(DType::f16, {
                                  {0x3f800000u, 0x3c00},  // 1
                                  {0x3f801000u, 0x3c00},  // 1 + 2^-11: tie, to even (down)
                                  {0x3f803000u, 0x3c02},  // 1 + 3 * 2^-11: tie, to even (up)
                                  {0x477fe000u, 0x7bff},  // 65504, the largest half
                                  {0x47800000u, 0x7c00},  // 65536 overflows to inf
                                  {0x33d6bf95u, 0x0002},  // 1e-7: subnormal 1.68 * 2^-24 -> 2
                                  {0xff800000u, 0xfc00},  // -inf
                              });
}

TEST(Copy, RoundTripsThroughEveryDtypeWithStrides) {
  std::mt19937 generator(9);
  auto kernels = make_cpu_block_kernels();
  for (DType narrow : {DType::f16, DType::bf16}) {
    HostTensor original(narrow, {3, 5, 7, 4});
    original.randomize(generator);
    // fp32 copy through a transposed view (dims 1 and 2 swapped in the strides).
    HostTensor wide(DType::f32, {3, 7, 5, 4});
    TensorView transposed = wide.view();
    std::swap(transposed.shape[1], transposed.shape[2]);
    std::swap(transposed.strides[1], transposed.strides[2]);
    kernels->copy(original.view(), transposed);
    for (int64_t a = 0; a < 3; ++a)
      for (int64_t b = 0; b < 5; ++b)
        for (int64_t c = 0; c < 7; ++c)
          for (int64_t d = 0; d < 4; ++d)
            ASSERT_EQ(wide.at(((a * 7 + c) * 5 + b) * 4 + d), original.at(((a * 5 + b) * 7 + c) * 4 + d));
    HostTensor back(narrow, {3, 5, 7, 4});
    kernels->copy(transposed, back.view());
    for (int64_t i = 0; i < original.numel(); ++i) ASSERT_EQ(bits_of_16(back, i), bits_of_16(original, i));
  }
}

TEST(Copy, HandlesEveryRankAndSlices) {
  std::mt19937 generator(10);
  auto kernels = make_cpu_block_kernels();
  HostTensor source(DType::f32, {6, 9});
  source.randomize(generator);
  // Rank 1: column 4 (stride 9) into a contiguous vector.
  TensorView column = source.view().slice(1, 4, 1);
  column.ndim = 1;
  column.shape[0] = 6;
  column.strides[0] = 9;
  HostTensor vector(DType::bf16, {6});
  kernels->copy(column, vector.view());
  for (int64_t i = 0; i < 6; ++i) ASSERT_EQ(bits_of_16(vector, i), float_to_bf16(source.at(i * 9 + 4)));
  // Rank 2 slice into the middle of a bigger destination; the rest stays untouched.
  HostTensor destination(DType::f32, {6, 12});
  destination.poison();
  kernels->copy(source.view(), destination.view().slice(1, 2, 9));
  for (int64_t r = 0; r < 6; ++r)
    for (int64_t c = 0; c < 12; ++c) {
      const float value = destination.at(r * 12 + c);
      if (c < 2 || c >= 11)
        ASSERT_TRUE(std::isnan(value));
      else
        ASSERT_EQ(value, source.at(r * 9 + c - 2));
    }
}

TEST(Copy, RejectsDifferentShapes) {
  auto kernels = make_cpu_block_kernels();
  HostTensor a(DType::f32, {4, 5}), b(DType::f32, {5, 4});
  EXPECT_THROW(kernels->copy(a.view(), b.view()), Error);
}

TEST(Fill, WritesEveryElementOfAStridedView) {
  auto kernels = make_cpu_block_kernels();
  for (DType dtype : {DType::f32, DType::f16, DType::bf16}) {
    HostTensor tensor(dtype, {2, 10, 3, 8});
    tensor.fill(7.0f);
    kernels->fill(tensor.view().slice(1, 3, 4), -1.5f);
    for (int64_t b = 0; b < 2; ++b)
      for (int64_t s = 0; s < 10; ++s)
        for (int64_t i = 0; i < 24; ++i)
          ASSERT_EQ(tensor.at((b * 10 + s) * 24 + i), s >= 3 && s < 7 ? -1.5f : 7.0f);
  }
}

TEST(Add, AccumulatesAnyDtypeIntoAFp32Slice) {
  std::mt19937 generator(15);
  auto kernels = make_cpu_block_kernels();
  for (DType dtype : {DType::f32, DType::f16, DType::bf16}) {
    HostTensor source(dtype, {2, 5, 3, 16});
    source.randomize(generator);
    HostTensor destination(DType::f32, {2, 9, 3, 16});
    destination.randomize(generator);
    const std::vector<double> before = destination.values();
    kernels->add(source.view(), destination.view().slice(1, 4, 5));
    for (int64_t b = 0; b < 2; ++b)
      for (int64_t s = 0; s < 9; ++s)
        for (int64_t i = 0; i < 48; ++i) {
          const int64_t e = (b * 9 + s) * 48 + i;
          const float added = s >= 4 ? source.at((b * 5 + s - 4) * 48 + i) : 0.0f;
          ASSERT_EQ(destination.at(e), static_cast<float>(before[static_cast<std::size_t>(e)]) + added);
        }
  }
}

TEST(Allocate, Returns64ByteAlignedMemory) {
  auto kernels = make_cpu_block_kernels();
  for (std::size_t bytes : {1u, 100u, 4096u, 1000000u}) {
    void* pointer = kernels->allocate(bytes);
    ASSERT_NE(pointer, nullptr);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(pointer) % 64, 0u);
    std::memset(pointer, 0xab, bytes);
    kernels->deallocate(pointer);
  }
}

}  // namespace
}  // namespace spattn::test
