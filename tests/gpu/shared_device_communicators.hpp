#pragma once
// One device communicator per transport over every rank of the test run, made at first use and
// kept for the whole run: NCCL communicators take a while to make.

#include <string>

#include "spattn/device_communicator.hpp"

namespace spattn {

/// The run's communicator of `transport`, or null with `why_not` set when the ranks refused it
/// together (NCCL: one GPU per rank, so more ranks than GPUs are refused).
Communicator* shared_device_communicator(Transport transport, std::string& why_not);

}  // namespace spattn
