// A rank that stops answering on GPUs (SPATTN_FAULT stalls it at its first transfer) makes every
// other rank fail within the timeout (SPATTN_TIMEOUT), for every strategy and both device
// transports. Over NCCL a call returns before its transfers are done: the other ranks' watchdogs
// give up on the transfer that waits for the stalled rank, abort NCCL so that their GPUs stop
// waiting, and the plan's synchronize() throws the error, naming the step. Over MPI staged
// through the host the call itself throws, as on the CPU. The stalled rank's own call fails too,
// and the ranks meet again on the world communicator, so the tests after these run as usual.

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <tuple>

#include "distributed_world.hpp"
#include "scoped_environment.hpp"
#include "shared_device_communicators.hpp"
#include "spattn/device_communicator.hpp"
#include "spattn/device_memory.hpp"
#include "spattn/mpi_communicator.hpp"
#ifdef SPATTN_WITH_NCCL
#include "spattn/nccl_communicator.hpp"
#endif
#include "spattn/staged_mpi_communicator.hpp"
#include "stall_checks.hpp"

namespace spattn {
namespace {

using StallCase = std::tuple<Algorithm, Transport>;

class StalledRankOnGpus : public ::testing::TestWithParam<StallCase> {};

TEST_P(StalledRankOnGpus, EveryOtherRankReportsItWithinTheTimeout) {
  const auto [algorithm, transport] = GetParam();
  if (visible_device_count(DeviceKind::cuda) == 0) GTEST_SKIP() << "no CUDA device";
  const int ranks = world().size();
  if (ranks < 2) GTEST_SKIP() << "a stalled peer needs at least 2 ranks";
  const AlgorithmSetup setup = algorithm_setup(algorithm, ranks);
  if (!setup.not_applicable.empty()) GTEST_SKIP() << setup.not_applicable;
  const int stalled = ranks - 1;
  std::unique_ptr<Communicator> communicator;
  std::string why_not;
  {
    // Read when a communicator is made; this one (and what splits from it) carries the fault
    // and the timeout.
    const ScopedEnvironment fault("SPATTN_FAULT", stall_at_first_transfer(stalled, kGpuStallTimes));
    const ScopedEnvironment timeout("SPATTN_TIMEOUT", std::to_string(kGpuStallTimes.timeout_seconds));
    try {
      const DevicePlacement placement = place_on_devices(world(), DeviceKind::cuda, transport);
      if (transport == Transport::staged_mpi) {
        // Over a new MPI communicator, which reads the settings (one split from the world's
        // would inherit the world's).
        communicator = std::make_unique<StagedMpiCommunicator>(std::make_unique<MpiCommunicator>(),
                                                               placement.device.index);
      } else {
#ifdef SPATTN_WITH_NCCL
        // Making it (and splitting it) may take longer than the timeout: NCCL's setup waits at least
        // 60 s whatever the timeout.
        communicator = std::make_unique<NcclCommunicator>(world(), placement.device.index);
#else
        why_not = "NCCL is not built into this spattn";
#endif
      }
    } catch (const Error& error) {  // agreed: every rank refuses together (NCCL: one GPU per rank)
      why_not = error.what();
    }
  }
  if (!communicator) GTEST_SKIP() << why_not;
  const AttentionShape shape{1, 2 * setup.length_unit, 2 * ranks, ranks, 64, DType::bf16};
  const AttentionProblem problem = random_problem(shape, AttentionOptions{}, 93, /*backward=*/false);

  expect_stall_reported(*communicator, algorithm, setup, problem, stalled, kGpuStallTimes,
                        algorithm_name(algorithm) + " over " + transport_name(transport) +
                            " at " + std::to_string(ranks) + " ranks");
}

INSTANTIATE_TEST_SUITE_P(AllStrategies, StalledRankOnGpus,
                         ::testing::Combine(::testing::ValuesIn(all_algorithms()),
                                            ::testing::ValuesIn(kDeviceTransports)),
                         algorithm_transport_case_name);

}  // namespace
}  // namespace spattn
