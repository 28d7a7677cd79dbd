// One rule for a timeout wherever it comes from (SPATTN_TIMEOUT, a communicator's argument): a
// finite, positive number of seconds; the error names where the value came from, what is allowed
// and the value, when there is one.

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>

#include "comm/timeout_message.hpp"
#include "spattn/error.hpp"

namespace spattn {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;

std::string refusal(double seconds) {
  try {
    check_timeout_seconds(seconds, "timeout_seconds of a test");
  } catch (const Error& error) {
    return error.what();
  }
  return "";
}

TEST(CommunicationTimeout, OnlyFinitePositiveSecondsAreTimeouts) {
  EXPECT_EQ(refusal(0.001), "");
  EXPECT_EQ(refusal(600.0), "");
  for (const double seconds : {0.0, -1.0, std::numeric_limits<double>::infinity()}) {
    SCOPED_TRACE(seconds);
    EXPECT_THAT(refusal(seconds), AllOf(HasSubstr("timeout_seconds of a test is not a timeout"),
                                        HasSubstr("allowed: a positive number of seconds"), HasSubstr(", got ")));
  }
  // NaN: the value was not a number at all (SPATTN_TIMEOUT='soon'), so there is none to show.
  EXPECT_THAT(refusal(std::nan("")), AllOf(HasSubstr("is not a timeout"), Not(HasSubstr(", got "))));
}

}  // namespace
}  // namespace spattn
