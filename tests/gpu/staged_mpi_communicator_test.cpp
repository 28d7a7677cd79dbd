// The staged MPI communicator on device buffers: each rank on GPU rank % GPUs, so at more ranks
// than GPUs several ranks share one (which is what the staged communicator is for).

#include "spattn/staged_mpi_communicator.hpp"

#include <gtest/gtest.h>

#include <memory>

#include "device_communicator_checks.hpp"
#include "distributed_world.hpp"
#include "kernels/cuda/cuda_check.hpp"

namespace spattn::test {
namespace {

class StagedMpiCommunicatorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const int gpus = fewest_gpus_over_ranks();
    if (gpus == 0) GTEST_SKIP() << "no CUDA device";
    const int device_index = world().rank() % gpus;
    SPATTN_CUDA_CHECK(cudaSetDevice(device_index));
    communicator_ = std::make_unique<StagedMpiCommunicator>(device_index);
  }

  std::unique_ptr<StagedMpiCommunicator> communicator_;
};

TEST_F(StagedMpiCommunicatorTest, IsOnTheRanksGpuWithTheWorldsRanks) {
  EXPECT_EQ(communicator_->rank(), world().rank());
  EXPECT_EQ(communicator_->size(), world().size());
  int device_index = 0;
  SPATTN_CUDA_CHECK(cudaGetDevice(&device_index));
  EXPECT_EQ(communicator_->device(), (Device{DeviceKind::cuda, device_index}));
}

TEST_F(StagedMpiCommunicatorTest, BatchInAnyPeerOrder) { check_batch_in_any_peer_order(*communicator_); }
TEST_F(StagedMpiCommunicatorTest, LargeMessages) { check_large_messages(*communicator_); }
TEST_F(StagedMpiCommunicatorTest, AllToAll) { check_all_to_all(*communicator_); }
TEST_F(StagedMpiCommunicatorTest, AllGather) { check_all_gather(*communicator_); }
TEST_F(StagedMpiCommunicatorTest, ReduceScatterSum) { check_reduce_scatter_sum(*communicator_); }
TEST_F(StagedMpiCommunicatorTest, TwoTransfersInFlight) { check_two_transfers_in_flight(*communicator_); }
TEST_F(StagedMpiCommunicatorTest, Split) { check_split(*communicator_); }
TEST_F(StagedMpiCommunicatorTest, ControlPlane) { check_control_plane(*communicator_); }

TEST_F(StagedMpiCommunicatorTest, OrderedAfterTheComputeStream) {
  cudaStream_t compute = nullptr;
  SPATTN_CUDA_CHECK(cudaStreamCreateWithFlags(&compute, cudaStreamNonBlocking));
  communicator_->set_compute_stream(compute);
  check_ordered_after_compute_stream(*communicator_, compute);
  communicator_.reset();  // before its compute stream goes
  SPATTN_CUDA_CHECK(cudaStreamDestroy(compute));
}

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
