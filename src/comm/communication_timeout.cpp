#include "spattn/communication_timeout.hpp"

#include <cmath>
#include <cstdlib>
#include <sstream>
#include <string>

#include "comm/timeout_message.hpp"
#include "spattn/error.hpp"

namespace spattn {

double communication_timeout_seconds() {
  const char* text = std::getenv("SPATTN_TIMEOUT");
  if (text == nullptr || *text == '\0') return kDefaultCommunicationTimeoutSeconds;
  char* end = nullptr;
  const double seconds = std::strtod(text, &end);
  const bool number = end != text && *end == '\0';
  check_timeout_seconds(number ? seconds : std::nan(""), "SPATTN_TIMEOUT='" + std::string(text) + "'");
  return seconds;
}

void check_timeout_seconds(double seconds, const std::string& what) {
  if (std::isfinite(seconds) && seconds > 0) return;
  std::ostringstream why;
  why << what << " is not a timeout; allowed: a positive number of seconds (default "
      << kDefaultCommunicationTimeoutSeconds << ")";
  if (!std::isnan(seconds)) why << ", got " << seconds;
  SPATTN_FAIL(why.str());
}

std::string describe_rank(int rank, int size) { return "rank " + std::to_string(rank) + " of " + std::to_string(size); }

std::string timeout_message(const std::string& who, double seconds, const std::string& what) {
  std::ostringstream message;
  message << who << " timed out after " << seconds << " s waiting for " << what
          << ": a peer died, stalled or is not in this call (SPATTN_TIMEOUT sets the limit)";
  return message.str();
}

}  // namespace spattn
