#pragma once
// What every communicator of device memory must do, written once as a type-parameterized suite.
// Each communicator's test file instantiates it with a Traits type:
//   using Communicator = ...;                                      // the class under test
//   static std::string skip_reason(int gpus);                      // "" when it can run here
//   static std::unique_ptr<Communicator> make(int device_index);   // one on this rank's GPU
// (GoogleTest allows this header, with its registration, in several test files.)

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "device_communicator_checks.hpp"
#include "distributed_world.hpp"
#include "core/cuda/cuda_check.hpp"

namespace spattn::test {

/// Skips on every rank where the communicator cannot run, else makes GPU rank % GPUs current.
template <typename Traits>
class OnTheRanksGpu : public ::testing::Test {
 protected:
  void SetUp() override {
    const int gpus = fewest_gpus_over_ranks();
    if (gpus == 0) GTEST_SKIP() << "no CUDA device";
    const std::string why_not = Traits::skip_reason(gpus);
    if (!why_not.empty()) GTEST_SKIP() << why_not;
    device_index_ = world().rank() % gpus;
    SPATTN_CUDA_CHECK(cudaSetDevice(device_index_));
  }

  int device_index_ = 0;
};

/// The fixture of the suite: a communicator on this rank's GPU.
template <typename Traits>
class DeviceCommunicatorContract : public OnTheRanksGpu<Traits> {
 protected:
  void SetUp() override {
    OnTheRanksGpu<Traits>::SetUp();
    if (this->IsSkipped()) return;
    communicator_ = Traits::make(this->device_index_);
  }

  std::unique_ptr<typename Traits::Communicator> communicator_;
};

TYPED_TEST_SUITE_P(DeviceCommunicatorContract);

TYPED_TEST_P(DeviceCommunicatorContract, IsOnTheRanksGpuWithTheWorldsRanks) {
  EXPECT_EQ(this->communicator_->rank(), world().rank());
  EXPECT_EQ(this->communicator_->size(), world().size());
  EXPECT_EQ(this->communicator_->device(), (Device{DeviceKind::cuda, this->device_index_}));
}

TYPED_TEST_P(DeviceCommunicatorContract, BatchInAnyPeerOrder) { check_batch_in_any_peer_order(*this->communicator_); }
TYPED_TEST_P(DeviceCommunicatorContract, LargeMessages) { check_large_messages(*this->communicator_); }
TYPED_TEST_P(DeviceCommunicatorContract, AllToAll) { check_all_to_all(*this->communicator_); }
TYPED_TEST_P(DeviceCommunicatorContract, AllGather) { check_all_gather(*this->communicator_); }
TYPED_TEST_P(DeviceCommunicatorContract, ReduceScatterSum) { check_reduce_scatter_sum(*this->communicator_); }
TYPED_TEST_P(DeviceCommunicatorContract, TwoTransfersInFlight) { check_two_transfers_in_flight(*this->communicator_); }
TYPED_TEST_P(DeviceCommunicatorContract, Split) { check_split(*this->communicator_); }
TYPED_TEST_P(DeviceCommunicatorContract, ControlPlane) { check_control_plane(*this->communicator_); }

TYPED_TEST_P(DeviceCommunicatorContract, OrderedAfterTheComputeStream) {
  cudaStream_t compute = nullptr;
  SPATTN_CUDA_CHECK(cudaStreamCreateWithFlags(&compute, cudaStreamNonBlocking));
  this->communicator_->set_compute_stream(compute);
  check_ordered_after_compute_stream(*this->communicator_, compute);
  this->communicator_.reset();  // before its compute stream goes
  SPATTN_CUDA_CHECK(cudaStreamDestroy(compute));
}

REGISTER_TYPED_TEST_SUITE_P(DeviceCommunicatorContract, IsOnTheRanksGpuWithTheWorldsRanks, BatchInAnyPeerOrder,
                            LargeMessages, AllToAll, AllGather, ReduceScatterSum, TwoTransfersInFlight, Split,
                            ControlPlane, OrderedAfterTheComputeStream);

}  // namespace spattn::test
