#pragma once
/// \file oneccl_communicator.hpp
/// The Communicator over oneCCL (Intel's collective library), for host memory: the transport an
/// Intel GPU backend will take, tested here on CPUs.

#include <functional>
#include <memory>
#include <string>

#include "spattn/communicator.hpp"

namespace spattn {

/// A Communicator over a oneCCL communicator of the ranks of a bootstrap communicator, or of the
/// processes that torchrun's environment variables describe (from_environment()). Rank 0 opens
/// oneCCL's key-value store and the others learn its address through the bootstrap (an
/// MpiCommunicator, say), which is used only while this is made, or from rank 0 over TCP. Waits
/// poll oneCCL's events against a deadline, so a missing peer becomes an Error naming it, not a
/// hang; after that the communicator (and those split from it) cannot be used again, and its
/// oneCCL objects are left alive so that no transfer still in flight writes into freed memory.
/// SPATTN_FAULT makes a chosen rank die or stall for tests, as with MPI.
class OnecclCommunicator final : public Communicator {
 public:
  /// Over the ranks of `bootstrap`, in its order. Collective over `bootstrap`.
  explicit OnecclCommunicator(Communicator& bootstrap);
  /// Over `size` processes, this one `rank`, for a caller with a bootstrap of its own
  /// (torch.distributed in Python): `share` is given this rank's bytes of a key-value store
  /// address (rank 0's is the one that counts) and returns rank 0's, e.g. by a broadcast from rank
  /// 0. Collective over the processes. Throws Error naming `rank` or `size` when out of range.
  using AddressShare = std::function<std::string(const std::string& mine)>;
  OnecclCommunicator(int rank, int size, const AddressShare& share);
  /// Over the processes of a job started without mpirun (torchrun, a shell loop), as the variables
  /// RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT describe them (spattn/launch_environment.hpp):
  /// rank 0 listens at MASTER_ADDR (LaunchEnvironment::rendezvous_port) and hands the others its
  /// key-value store's address. Collective over those processes; no MPI is involved. Throws Error
  /// naming the variable when one is missing or out of range, when two processes share a RANK or
  /// disagree on WORLD_SIZE, and TimeoutError when a rank does not come within SPATTN_TIMEOUT.
  static std::unique_ptr<OnecclCommunicator> from_environment();
  ~OnecclCommunicator() override;
  OnecclCommunicator(const OnecclCommunicator&) = delete;
  OnecclCommunicator& operator=(const OnecclCommunicator&) = delete;

  int rank() const override;
  int size() const override;
  Device device() const override { return Device::cpu(); }

  /// How long wait(), barrier() and host_all_gather() wait for peers before they throw Error; set
  /// from SPATTN_TIMEOUT (seconds, default 600) when it is made; a split communicator takes its
  /// parent's.
  double timeout_seconds() const;
  void set_timeout_seconds(double seconds);

  std::unique_ptr<PendingTransfer> start(const TransferBatch& batch) override;
  std::unique_ptr<PendingTransfer> start_all_to_all(const void* send, void* receive,
                                                    std::size_t bytes_per_rank) override;
  std::unique_ptr<PendingTransfer> start_all_gather(const void* send, void* receive,
                                                    std::size_t bytes_per_rank) override;
  std::unique_ptr<PendingTransfer> start_reduce_scatter_sum(const float* send, float* receive,
                                                            std::size_t floats_per_rank) override;
  void wait(PendingTransfer& transfer) override;
  /// A new oneCCL communicator per color (its own key-value store, opened by its lowest rank),
  /// ranks ordered by key, then by rank. Collective over this communicator.
  std::unique_ptr<Communicator> split(int color, int key) override;
  void barrier() override;
  void host_all_gather(const void* send, void* receive, std::size_t bytes_per_rank) override;

  struct State;  // defined where the communicator is, with oneCCL's types

 private:
  explicit OnecclCommunicator(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

}  // namespace spattn
