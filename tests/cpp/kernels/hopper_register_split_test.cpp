// The register shares of the own Hopper kernels' warpgroups (src/kernels/hopper/register_split.hpp):
// what setmaxnreg can give the consumers is what the producer gives back from the share every
// thread launched with, so a split that only fits the multiprocessor's 64K registers can still hang.

#include <gtest/gtest.h>

#include "kernels/hopper/register_split.hpp"

namespace spattn::cuda::hopper {
namespace {

TEST(HopperRegisterSplit, ThreadsLaunchWithTheirShareRoundedDownToEight) {
  EXPECT_EQ(launch_registers_per_thread(384), 168);  // 170.7 rounded down
  EXPECT_EQ(launch_registers_per_thread(512), 128);
  EXPECT_EQ(launch_registers_per_thread(256), 256);
}

TEST(HopperRegisterSplit, TheKernelsSplitsFitWhatTheirCtasLaunchWith) {
  EXPECT_TRUE(register_split_fits(24, 256, 240));  // two consumer warpgroups: 384 threads x 168
  EXPECT_TRUE(register_split_fits(32, 384, 160));  // three: 512 threads x 128
}

TEST(HopperRegisterSplit, ASplitWithinTheMultiprocessorsRegistersButPastTheLaunchShareDoesNotFit) {
  // 128 x 32 + 256 x 240 = 65536 registers, 1024 more than 384 threads x 168: setmaxnreg waits for ever.
  EXPECT_FALSE(register_split_fits(32, 256, 240));
  EXPECT_TRUE(register_split_fits(32, 256, 232));
}

TEST(HopperRegisterSplit, SetmaxnregTakesMultiplesOfEightFrom24To256) {
  EXPECT_FALSE(register_split_fits(20, 256, 240));
  EXPECT_FALSE(register_split_fits(24, 256, 236));
  EXPECT_FALSE(register_split_fits(24, 128, 264));
}

}  // namespace
}  // namespace spattn::cuda::hopper
