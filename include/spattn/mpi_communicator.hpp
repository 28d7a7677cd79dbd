#pragma once
/// \file mpi_communicator.hpp
/// The Communicator over MPI, for host memory.

#include <memory>
#include <vector>

#include "spattn/communicator.hpp"

namespace spattn {

/// A Communicator over an MPI communicator. Initializes MPI when nobody has (and finalizes it
/// at exit in that case); duplicates the given communicator so spattn's traffic never meets
/// the caller's. Waits poll against a deadline, so a missing peer becomes an Error, not a hang;
/// SPATTN_FAULT (see src/comm/fault_injection.hpp) makes a chosen rank die or stall for tests.
class MpiCommunicator final : public Communicator {
 public:
  /// Over MPI_COMM_WORLD.
  MpiCommunicator();
  /// Over a caller's MPI communicator, passed as its handle (MPI_Comm) cast to void* so this
  /// header needs no mpi.h.
  explicit MpiCommunicator(void* mpi_comm_handle);
  ~MpiCommunicator() override;
  MpiCommunicator(const MpiCommunicator&) = delete;
  MpiCommunicator& operator=(const MpiCommunicator&) = delete;

  int rank() const override;
  int size() const override;
  Device device() const override { return Device::cpu(); }

  /// How long wait(), barrier() and host_all_gather() wait for peers before they throw Error
  /// naming the ranks still missing (a peer died or stalled); the communicator cannot be used
  /// again after that. Set from SPATTN_TIMEOUT (seconds, default 600) when it is made; a split
  /// communicator takes its parent's.
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
  std::unique_ptr<Communicator> split(int color, int key) override;
  /// A communicator over `ranks` of this one, in that order (rank i of the new one is ranks[i]),
  /// collective over those ranks only (MPI_Comm_create_group), so the other ranks need not call
  /// it: how a process group of some ranks gets its communicator when its members first use it.
  /// Every rank of the list calls it with the same list, which must hold this rank.
  std::unique_ptr<MpiCommunicator> over_ranks(const std::vector<int>& ranks);
  void barrier() override;
  void host_all_gather(const void* send, void* receive, std::size_t bytes_per_rank) override;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace spattn
