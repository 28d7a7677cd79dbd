#pragma once
// The meeting of a job's processes started without mpirun: rank 0 listens at MASTER_ADDR and hands
// the others what they need to form a communicator (oneCCL's key-value store address).

#include <string>

#include "spattn/launch_environment.hpp"

namespace spattn {

/// Rank 0 of `launch` hands `root_data` to every other rank over TCP; returns it on every rank. Rank 0
/// listens at the first free port of those `launch` allows and says hello on every connection; the
/// others try those ports at MASTER_ADDR in turn (retrying until rank 0 listens) until rank 0's hello
/// answers, and report their RANK and WORLD_SIZE; rank 0 waits until every rank 1..N-1 has come,
/// checks that none came twice and that all share its WORLD_SIZE, and answers each with `root_data`
/// or with the error, which it throws too. Everything within `timeout_seconds` (a rank that came
/// waits up to a second longer for rank 0's answer, which may be rank 0's own timeout): a rank that
/// never comes is a TimeoutError naming it on rank 0, and rank 0 missing is one naming its address
/// on the others.
std::string share_from_rank_zero(const LaunchEnvironment& launch, const std::string& root_data, double timeout_seconds);

}  // namespace spattn
