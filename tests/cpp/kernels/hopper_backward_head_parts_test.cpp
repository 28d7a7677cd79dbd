// The parts into which the own Hopper backward splits a key tile's GQA group of query heads
// (src/kernels/hopper/backward_head_parts.hpp): enough CTAs to fill the multiprocessors evenly,
// no more, and never in deterministic mode.

#include <gtest/gtest.h>

#include "kernels/hopper/backward_head_parts.hpp"

namespace spattn::cuda::hopper {
namespace {

constexpr int kH100Multiprocessors = 132;

TEST(HopperBackwardHeadParts, ALaunchOfManyCtasKeepsTheGroupWhole) {
  // One H100 on 16k causal, GQA 32/8: 128 key tiles x 8 kv heads.
  EXPECT_EQ(backward_head_parts(128 * 8, 4, kH100Multiprocessors, false), 1);
  EXPECT_EQ(backward_head_parts(6 * kH100Multiprocessors, 4, kH100Multiprocessors, false), 1);
}

TEST(HopperBackwardHeadParts, AShortLaunchTakesTheFewestPartsThatFillTheMultiprocessors) {
  // 2x 8k zigzag, GQA 32/8: a 4k block is 32 key tiles x 8 kv heads, two blocks 512 CTAs.
  EXPECT_EQ(backward_head_parts(32 * 8, 4, kH100Multiprocessors, false), 4);
  EXPECT_EQ(backward_head_parts(64 * 8, 4, kH100Multiprocessors, false), 2);
  // Parts divide the group: 3 would do for 300 CTAs of a group of 6, 2 would not.
  EXPECT_EQ(backward_head_parts(300, 6, kH100Multiprocessors, false), 3);
  // Only divisors: a group of 5 is whole or in single heads.
  EXPECT_EQ(backward_head_parts(300, 5, kH100Multiprocessors, false), 5);
}

TEST(HopperBackwardHeadParts, HeadsApartWhereNoPartFillsTheMultiprocessors) {
  EXPECT_EQ(backward_head_parts(8, 4, kH100Multiprocessors, false), 4);
  EXPECT_EQ(backward_head_parts(8, 1, kH100Multiprocessors, false), 1);  // no GQA: one head a CTA already
}

TEST(HopperBackwardHeadParts, DeterministicModeKeepsTheGroupWhole) {
  EXPECT_EQ(backward_head_parts(8, 4, kH100Multiprocessors, true), 1);
  EXPECT_EQ(backward_head_parts(32 * 8, 8, kH100Multiprocessors, true), 1);
}

}  // namespace
}  // namespace spattn::cuda::hopper
