#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "spattn/attention_options.hpp"
#include "spattn/error.hpp"

namespace spattn {
namespace {

using ::testing::HasSubstr;

TEST(KernelChoice, NamesParseBackToTheirChoice) {
  for (KernelChoice kernel : {KernelChoice::automatic, KernelChoice::own, KernelChoice::cudnn})
    EXPECT_EQ(parse_kernel_choice(kernel_choice_name(kernel)), kernel) << kernel_choice_name(kernel);
  EXPECT_EQ(kernel_choice_name(KernelChoice::automatic), "auto");
  EXPECT_EQ(kernel_choice_name(KernelChoice::own), "own");
  EXPECT_EQ(kernel_choice_name(KernelChoice::cudnn), "cudnn");
}

TEST(KernelChoice, UnknownNameIsNamedWithTheAllowedOnes) {
  for (const char* name : {"bogus", "", "automatic", "Auto", "cuDNN", " own"}) {
    SCOPED_TRACE(name);
    try {
      parse_kernel_choice(name);
      FAIL() << "accepted";
    } catch (const Error& error) {
      EXPECT_EQ(std::string(error.what()),
                std::string("spattn: unknown kernel '") + name + "'; allowed: auto, own, cudnn");
    }
  }
}

TEST(KernelChoice, OptionsChooseAutomaticallyUnlessTold) {
  EXPECT_EQ(AttentionOptions{}.kernel, KernelChoice::automatic);
}

}  // namespace
}  // namespace spattn
