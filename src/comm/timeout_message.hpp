#pragma once
// The timeout rules every communicator shares: what a timeout may be, and the message of a rank
// that gave up waiting for its peers (thrown as TimeoutError, spattn/error.hpp).

#include <string>

namespace spattn {

/// Throws Error unless `seconds` is a timeout (finite and positive), naming `what` (where the value
/// came from) and what is allowed; NaN stands for a value that is not a number at all.
void check_timeout_seconds(double seconds, const std::string& what);

/// "rank 2 of 4", how a communicator's errors name the rank that reports them.
std::string describe_rank(int rank, int size);

/// "<who> timed out after <seconds> s waiting for <what>: a peer died, stalled or is not in this
/// call (SPATTN_TIMEOUT sets the limit)".
std::string timeout_message(const std::string& who, double seconds, const std::string& what);

}  // namespace spattn
