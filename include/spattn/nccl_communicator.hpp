#pragma once
/// \file nccl_communicator.hpp
/// The Communicator over NCCL, for buffers in GPU memory: transfers run on a communication
/// stream, ordered after the compute stream by events, with no host synchronization. Built only
/// with the CUDA backend where NCCL is found (SPATTN_NCCL).

#include <array>
#include <cstddef>
#include <memory>

#include "spattn/communication_timeout.hpp"
#include "spattn/communicator.hpp"

struct CUstream_st;  // cudaStream_t is CUstream_st*
struct ncclComm;     // ncclComm_t is ncclComm*: this header needs neither CUDA's nor NCCL's headers

namespace spattn {

/// The 128 bytes of an ncclUniqueId, which any channel (MPI, a file, a framework's broadcast)
/// can carry from the rank that made it to the others.
using NcclUniqueIdBytes = std::array<char, 128>;

/// A fresh NCCL unique id; one rank makes it, every rank of the new communicator passes it.
NcclUniqueIdBytes make_nccl_unique_id();

/// A Communicator over an NCCL communicator, one GPU per rank (NCCL cannot put two ranks of one
/// communicator on one GPU).
///
/// start() records an event on the compute stream, makes the communication stream wait on it and
/// enqueues the transfer there; wait() records an event on the communication stream and makes
/// the compute stream wait on it. Transfers run in the order they were started, so waiting on
/// one also orders the compute stream after those started before it.
///
/// The control plane (host_all_gather, barrier) goes through a small device buffer and blocks.
/// Initialization is nonblocking inside NCCL and polled: when a blocking control-plane call takes
/// longer than the timeout (default: SPATTN_TIMEOUT, else 600 s), or making a communicator
/// (initialization, split, the first exchange with every rank) longer than the timeout and at
/// least 60 s (NCCL's setup alone can take seconds), the communicator is aborted and an Error is
/// thrown. The data plane does not block the host, so a watchdog thread
/// watches each transfer: one still unfinished a timeout after everything before it on the
/// communication stream has finished (a peer died or stalled), or an asynchronous NCCL error,
/// makes it abort the communicator, which ends the GPU work waiting on it. From then on this
/// communicator and those split from the same one throw that error at every call, and
/// check_transfers_completed() throws it after a synchronization. SPATTN_FAULT (see
/// src/comm/fault_injection.hpp) counts the transfers of the data plane, with the rank in the
/// communicator first made as the process's rank.
class NcclCommunicator final : public Communicator {
 public:
  /// Over every rank of `bootstrap` (a host communicator, e.g. an MpiCommunicator), with the same
  /// ranks: its rank 0 makes the unique id and bootstrap.host_all_gather carries it. Collective
  /// over `bootstrap`, which is needed only during the constructor.
  NcclCommunicator(Communicator& bootstrap, int device_index, double timeout_seconds = communication_timeout_seconds());
  /// Rank `rank` of `size` ranks that all pass the same `unique_id` (see make_nccl_unique_id).
  NcclCommunicator(int rank, int size, const NcclUniqueIdBytes& unique_id, int device_index,
                   double timeout_seconds = communication_timeout_seconds());
  /// Over a caller's communicator (an ncclComm_t), which stays the caller's: it is neither
  /// finalized nor destroyed here. Its GPU is the one it was created on.
  explicit NcclCommunicator(ncclComm* borrowed_comm, double timeout_seconds = communication_timeout_seconds());
  ~NcclCommunicator() override;
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  /// The stream whose work produces the send buffers and consumes the received ones.
  /// Default: the legacy default stream.
  void set_compute_stream(void* stream) override;
  /// The stream the transfers run on (owned by this communicator).
  CUstream_st* communication_stream() const;
  /// The NCCL communicator (still owned by whoever owned it).
  ncclComm* nccl_comm() const;

  /// How long a transfer or a control-plane call may wait for the peers (communicators split
  /// from this one later take it too).
  double timeout_seconds() const;

  int rank() const override;
  int size() const override;
  Device device() const override;

  std::unique_ptr<PendingTransfer> start(const TransferBatch& batch) override;
  std::unique_ptr<PendingTransfer> start_all_to_all(const void* send, void* receive,
                                                    std::size_t bytes_per_rank) override;
  std::unique_ptr<PendingTransfer> start_all_gather(const void* send, void* receive,
                                                    std::size_t bytes_per_rank) override;
  std::unique_ptr<PendingTransfer> start_reduce_scatter_sum(const float* send, float* receive,
                                                            std::size_t floats_per_rank) override;
  void wait(PendingTransfer& transfer) override;
  void check_transfers_completed() override;
  /// ncclCommSplit: an owned NcclCommunicator on the same GPU. `color` must be >= 0.
  std::unique_ptr<Communicator> split(int color, int key) override;
  void barrier() override;
  void host_all_gather(const void* send, void* receive, std::size_t bytes_per_rank) override;

 private:
  struct State;
  explicit NcclCommunicator(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

}  // namespace spattn
