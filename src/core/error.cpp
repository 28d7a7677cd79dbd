#include "spattn/error.hpp"

namespace spattn::detail {

namespace {

// Messages are written for users of the library: they say where they come from, and the source
// location would only add noise.
std::string message_for_users(const std::string& message) { return "spattn: " + message; }

}  // namespace

void throw_error(const char* /*file*/, int /*line*/, const std::string& message) {
  throw Error(message_for_users(message));
}

void throw_timeout_error(const std::string& message) { throw TimeoutError(message_for_users(message)); }

}  // namespace spattn::detail
