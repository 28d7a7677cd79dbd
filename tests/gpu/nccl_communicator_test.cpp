// The NCCL communicator on device buffers. NCCL cannot put two ranks of one communicator on one
// GPU, so these run only where every rank has a GPU of its own (on one GPU: at 1 rank only).

#include "spattn/nccl_communicator.hpp"

#include <gtest/gtest.h>
#include <nccl.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "device_communicator_contract.hpp"

namespace spattn::test {
namespace {

// NCCL over the world, bootstrapped through MPI.
struct NcclTraits {
  using Communicator = NcclCommunicator;
  static std::string skip_reason(int gpus) {
    if (gpus >= world().size()) return "";
    return "NCCL needs one GPU per rank: " + std::to_string(world().size()) + " ranks, " + std::to_string(gpus) +
           " GPU(s)";
  }
  static std::unique_ptr<Communicator> make(int device_index) {
    return std::make_unique<NcclCommunicator>(world(), device_index);
  }
};

INSTANTIATE_TYPED_TEST_SUITE_P(Nccl, DeviceCommunicatorContract, ::testing::Types<NcclTraits>);

using NcclOverWorldTest = DeviceCommunicatorContract<NcclTraits>;

TEST_F(NcclOverWorldTest, HasACommunicationStream) {
  EXPECT_NE(communicator_->communication_stream(), nullptr);
}

// The other ways to make one (from a caller's unique id, around a caller's ncclComm_t) need only
// the rank's GPU.
using NcclCommunicatorTest = OnTheRanksGpu<NcclTraits>;

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
