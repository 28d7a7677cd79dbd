#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <vector>

#include "spattn/error.hpp"
#include "spattn/tensor.hpp"

namespace spattn {
namespace {

using ::testing::HasSubstr;

TEST(TensorView, ContiguousStridesAndSlices) {
  std::vector<uint16_t> data(2 * 6 * 3 * 4);
  const TensorView view = TensorView::contiguous(data.data(), DType::bf16, {2, 6, 3, 4});
  EXPECT_EQ(view.stride(0), 72);
  EXPECT_EQ(view.stride(3), 1);
  EXPECT_EQ(view.numel(), 144);
  EXPECT_TRUE(view.is_contiguous());
  const TensorView middle = view.slice(1, 2, 3);
  EXPECT_EQ(middle.size(1), 3);
  EXPECT_FALSE(middle.is_contiguous());
  EXPECT_EQ(middle.element_pointer({1, 0, 2, 3}), view.element_pointer({1, 2, 2, 3}));
  EXPECT_EQ(view.describe(), "(2, 6, 3, 4) bf16 cpu");
}

TEST(TensorView, SliceOutOfRangeIsAnError) {
  std::vector<float> data(8);
  const TensorView view = TensorView::contiguous(data.data(), DType::f32, {2, 4});
  try {
    view.slice(1, 3, 2);
    FAIL() << "no error";
  } catch (const Error& error) {
    EXPECT_THAT(error.what(), HasSubstr("slice [3, 5) of dimension 1 with extent 4"));
  }
}

TEST(DType, ParseNamesAndErrors) {
  EXPECT_EQ(parse_dtype("bf16"), DType::bf16);
  EXPECT_EQ(parse_dtype("float16"), DType::f16);
  EXPECT_EQ(parse_dtype("fp32"), DType::f32);
  try {
    parse_dtype("fp8");
    FAIL() << "no error";
  } catch (const Error& error) {
    EXPECT_THAT(error.what(), HasSubstr("unknown dtype 'fp8'; allowed: fp32, fp16, bf16"));
  }
}

}  // namespace
}  // namespace spattn
