#pragma once
/// \file error.hpp
/// The one exception type of spattn and the checks that throw it.

#include <sstream>
#include <stdexcept>
#include <string>

namespace spattn {

/// Every error spattn reports: the message names the bad value and what is allowed.
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

/// A rank that gave up waiting for its peers (a peer died, stalled or is not in the call), or that
/// SPATTN_FAULT stalled and gave up: this rank's own error. The ranks agree on every other error
/// before they report it; this one no agreement can carry, since the peer it waited for may be the
/// one that is gone, so each rank reports its own (the program prints it on every rank).
class TimeoutError : public Error {
 public:
  explicit TimeoutError(const std::string& message) : Error(message) {}
};

/// Every message of an Error starts with this, which says where it comes from.
inline constexpr const char kErrorPrefix[] = "spattn: ";

/// `message` without kErrorPrefix, for quoting one error's message inside another.
std::string without_error_prefix(const std::string& message);

namespace detail {
[[noreturn]] void throw_error(const char* file, int line, const std::string& message);
[[noreturn]] void throw_timeout_error(const std::string& message);
}  // namespace detail

}  // namespace spattn

/// Throws spattn::Error with a streamed message when `condition` is false, e.g.
/// SPATTN_CHECK(heads % kv_heads == 0, "heads (" << heads << ") must be divisible by ...").
#define SPATTN_CHECK(condition, message_stream)                                 \
  do {                                                                          \
    if (!(condition)) {                                                         \
      std::ostringstream spattn_check_stream_;                                  \
      spattn_check_stream_ << message_stream;                                   \
      ::spattn::detail::throw_error(__FILE__, __LINE__, spattn_check_stream_.str()); \
    }                                                                           \
  } while (false)

/// Throws spattn::Error unconditionally with a streamed message.
#define SPATTN_FAIL(message_stream) SPATTN_CHECK(false, message_stream)
