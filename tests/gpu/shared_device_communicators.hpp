#pragma once
// One device communicator per transport over every rank of the test run, made at first use and
// kept for the whole run: NCCL communicators take a while to make. And the transports the GPU
// tests run their cases over, with the names those cases take.

#include <gtest/gtest.h>

#include <string>
#include <tuple>

#include "distributed_checks.hpp"
#include "spattn/device_communicator.hpp"
#include "spattn/distributed_attention.hpp"

namespace spattn {

/// The run's communicator of `transport`, or null with `why_not` set when the ranks refused it
/// together (NCCL: one GPU per rank, so more ranks than GPUs are refused).
Communicator* shared_device_communicator(Transport transport, std::string& why_not);

/// A GPU case of `algorithm` over `transport` at this run's rank count: the run's communicator,
/// with `setup` the algorithm's there, or null with `why_skipped` set (no GPU, the transport
/// refused, no such strategy at this rank count).
Communicator* gpu_case_communicator(Algorithm algorithm, Transport transport, AlgorithmSetup& setup,
                                    std::string& why_skipped);

/// The shape of a GPU case that runs a whole strategy on `setup`: batch 1, 8 of its length units
/// of tokens, 2N query heads on N kv heads at this run's N ranks (GQA), D 128, bf16.
AttentionShape gpu_case_shape(const AlgorithmSetup& setup);

/// NCCL (one GPU per rank) and MPI staged through the host (any number of ranks per GPU).
inline const Transport kDeviceTransports[] = {Transport::nccl, Transport::staged_mpi};

/// "nccl" or "staged": a transport in the name of a test case.
std::string transport_case_name(Transport transport);

/// "ring_nccl": the name of a case over an algorithm and a transport.
std::string algorithm_transport_case_name(const ::testing::TestParamInfo<std::tuple<Algorithm, Transport>>& info);

}  // namespace spattn
