#include "spattn/error.hpp"

namespace spattn {

std::string without_error_prefix(const std::string& message) {
  const std::string prefix = kErrorPrefix;
  return message.compare(0, prefix.size(), prefix) == 0 ? message.substr(prefix.size()) : message;
}

namespace detail {

// The source location is left out: messages are written for users of the library, and it would
// only add noise.
void throw_error(const char* /*file*/, int /*line*/, const std::string& message) {
  throw Error(kErrorPrefix + message);
}

void throw_timeout_error(const std::string& message) { throw TimeoutError(kErrorPrefix + message); }

}  // namespace detail
}  // namespace spattn
