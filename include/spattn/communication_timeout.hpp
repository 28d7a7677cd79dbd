#pragma once
/// \file communication_timeout.hpp
/// How long a rank waits for its peers before it gives up with an error instead of hanging.

namespace spattn {

/// PyTorch's default for its NCCL process groups: long enough for any step of a healthy run.
constexpr double kDefaultCommunicationTimeoutSeconds = 600.0;

/// Seconds a communicator waits on a transfer or on the agreement of ranks that does not
/// complete: SPATTN_TIMEOUT when it is set (a positive number of seconds), else the default.
/// Throws Error naming SPATTN_TIMEOUT's value when it is not a positive number.
double communication_timeout_seconds();

}  // namespace spattn
