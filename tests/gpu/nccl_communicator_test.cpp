// The NCCL communicator on device buffers. NCCL cannot put two ranks of one communicator on one
// GPU, so these run only where every rank has a GPU of its own (on one GPU: at 1 rank only).

#include "spattn/nccl_communicator.hpp"

#include <gtest/gtest.h>
#include <nccl.h>

#include <cstring>
#include <memory>
#include <vector>

#include "device_communicator_checks.hpp"
#include "distributed_world.hpp"
#include "kernels/cuda/cuda_check.hpp"

namespace spattn::test {
namespace {

class NcclCommunicatorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const int gpus = fewest_gpus_over_ranks();
    if (gpus == 0) GTEST_SKIP() << "no CUDA device";
    if (gpus < world().size()) {
      GTEST_SKIP() << "NCCL needs one GPU per rank: " << world().size() << " ranks, " << gpus << " GPU(s)";
    }
    device_index_ = world().rank() % gpus;
    SPATTN_CUDA_CHECK(cudaSetDevice(device_index_));
  }

  int device_index_ = 0;
};

// Over the world, bootstrapped through MPI.
class NcclOverWorldTest : public NcclCommunicatorTest {
 protected:
  void SetUp() override {
    NcclCommunicatorTest::SetUp();
    if (IsSkipped()) return;
    communicator_ = std::make_unique<NcclCommunicator>(world(), device_index_);
  }

  std::unique_ptr<NcclCommunicator> communicator_;
};

TEST_F(NcclOverWorldTest, IsOnTheRanksGpuWithTheWorldsRanks) {
  EXPECT_EQ(communicator_->rank(), world().rank());
  EXPECT_EQ(communicator_->size(), world().size());
  EXPECT_EQ(communicator_->device(), (Device{DeviceKind::cuda, device_index_}));
  EXPECT_NE(communicator_->communication_stream(), nullptr);
}

TEST_F(NcclOverWorldTest, BatchInAnyPeerOrder) { check_batch_in_any_peer_order(*communicator_); }
TEST_F(NcclOverWorldTest, LargeMessages) { check_large_messages(*communicator_); }
TEST_F(NcclOverWorldTest, AllToAll) { check_all_to_all(*communicator_); }
TEST_F(NcclOverWorldTest, AllGather) { check_all_gather(*communicator_); }
TEST_F(NcclOverWorldTest, ReduceScatterSum) { check_reduce_scatter_sum(*communicator_); }
TEST_F(NcclOverWorldTest, TwoTransfersInFlight) { check_two_transfers_in_flight(*communicator_); }
TEST_F(NcclOverWorldTest, Split) { check_split(*communicator_); }
TEST_F(NcclOverWorldTest, ControlPlane) { check_control_plane(*communicator_); }

TEST_F(NcclOverWorldTest, OrderedAfterTheComputeStream) {
  cudaStream_t compute = nullptr;
  SPATTN_CUDA_CHECK(cudaStreamCreateWithFlags(&compute, cudaStreamNonBlocking));
  communicator_->set_compute_stream(compute);
  check_ordered_after_compute_stream(*communicator_, compute);
  communicator_.reset();  // before its compute stream goes
  SPATTN_CUDA_CHECK(cudaStreamDestroy(compute));
}

TEST_F(NcclCommunicatorTest, FromACallersUniqueId) {
  NcclUniqueIdBytes id{};
  if (world().rank() == 0) id = make_nccl_unique_id();
  std::vector<NcclUniqueIdBytes> ids(static_cast<std::size_t>(world().size()));
  world().host_all_gather(&id, ids.data(), sizeof(id));
  NcclCommunicator communicator(world().rank(), world().size(), ids[0], device_index_);
  EXPECT_EQ(communicator.rank(), world().rank());
  check_all_gather(communicator);
}

TEST_F(NcclCommunicatorTest, WrapsACallersCommWithoutOwningIt) {
  NcclUniqueIdBytes id{};
  if (world().rank() == 0) id = make_nccl_unique_id();
  std::vector<NcclUniqueIdBytes> ids(static_cast<std::size_t>(world().size()));
  world().host_all_gather(&id, ids.data(), sizeof(id));
  ncclUniqueId nccl_id;
  std::memcpy(&nccl_id, ids[0].data(), sizeof(nccl_id));
  ncclComm_t comm = nullptr;
  ASSERT_EQ(ncclCommInitRank(&comm, world().size(), nccl_id, world().rank()), ncclSuccess);
  {
    NcclCommunicator communicator(comm);
    EXPECT_EQ(communicator.nccl_comm(), comm);
    EXPECT_EQ(communicator.device(), (Device{DeviceKind::cuda, device_index_}));
    check_reduce_scatter_sum(communicator);
  }
  // Still the caller's, and still usable.
  int count = 0;
  EXPECT_EQ(ncclCommCount(comm, &count), ncclSuccess);
  EXPECT_EQ(count, world().size());
  EXPECT_EQ(ncclCommDestroy(comm), ncclSuccess);
}

TEST_F(NcclCommunicatorTest, RejectsAMissingGpu) {
  EXPECT_THROW(NcclCommunicator(0, 1, make_nccl_unique_id(), 4096), Error);
}

}  // namespace
}  // namespace spattn::test
