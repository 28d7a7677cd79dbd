#include "spattn/error.hpp"

namespace spattn::detail {

void throw_error(const char* /*file*/, int /*line*/, const std::string& message) {
  // Messages are written for users of the library; the source location would only add noise.
  throw Error("spattn: " + message);
}

}  // namespace spattn::detail
