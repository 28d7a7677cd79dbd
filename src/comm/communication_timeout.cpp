#include "spattn/communication_timeout.hpp"

#include <cmath>
#include <cstdlib>
#include <string>

#include "spattn/error.hpp"

namespace spattn {

double communication_timeout_seconds() {
  const char* text = std::getenv("SPATTN_TIMEOUT");
  if (text == nullptr || *text == '\0') return kDefaultCommunicationTimeoutSeconds;
  char* end = nullptr;
  const double seconds = std::strtod(text, &end);
  SPATTN_CHECK(end != text && *end == '\0' && std::isfinite(seconds) && seconds > 0,
               "SPATTN_TIMEOUT='" << text << "' is not a timeout; allowed: a positive number of seconds (default "
                                  << kDefaultCommunicationTimeoutSeconds << ")");
  return seconds;
}

}  // namespace spattn
