// The staged MPI communicator on device buffers: each rank on GPU rank % GPUs, so at more ranks
// than GPUs several ranks share one (which is what the staged communicator is for).

#include "spattn/staged_mpi_communicator.hpp"

#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "device_communicator_contract.hpp"

namespace spattn::test {
namespace {

struct StagedMpiTraits {
  using Communicator = StagedMpiCommunicator;
  static std::string skip_reason(int /*gpus*/) { return ""; }
  static std::unique_ptr<Communicator> make(int device_index) {
    return std::make_unique<StagedMpiCommunicator>(device_index);
  }
};

INSTANTIATE_TYPED_TEST_SUITE_P(StagedMpi, DeviceCommunicatorContract, ::testing::Types<StagedMpiTraits>);

using StagedMpiCommunicatorTest = DeviceCommunicatorContract<StagedMpiTraits>;

TEST_F(StagedMpiCommunicatorTest, StagingDoesNotGrowInSteadyState) {
  check_all_to_all(*communicator_);
  check_two_transfers_in_flight(*communicator_);
  const std::size_t after_first_round = communicator_->staging_bytes();
  EXPECT_GT(after_first_round, 0u);
  for (int step = 0; step < 3; ++step) {
    check_all_to_all(*communicator_);
    check_two_transfers_in_flight(*communicator_);
  }
  EXPECT_EQ(communicator_->staging_bytes(), after_first_round);
}

}  // namespace
}  // namespace spattn::test
