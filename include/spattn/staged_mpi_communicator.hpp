#pragma once
/// \file staged_mpi_communicator.hpp
/// The Communicator over MPI for buffers in GPU memory, staged through pinned host memory: it
/// needs no CUDA-aware MPI and no GPU per rank, so any number of ranks may share one GPU.
/// Built only with the CUDA backend (SPATTN_CUDA).

#include <cstddef>
#include <memory>

#include "spattn/communicator.hpp"

struct CUstream_st;  // cudaStream_t is CUstream_st*: this header needs no CUDA headers

namespace spattn {

/// A Communicator whose data-plane buffers live on cuda:N and whose transfers run over a host
/// communicator (an MpiCommunicator): start() copies the send buffers into pinned host staging
/// buffers and starts the host transfer; wait() completes it and copies the received bytes to
/// the device buffers, ordered before the compute stream's later work.
///
/// The staging buffers are allocated on first use and grown when a transfer needs more; a
/// steady state of same-sized steps allocates nothing.
class StagedMpiCommunicator final : public Communicator {
 public:
  /// Over MPI_COMM_WORLD, for buffers on cuda:`device_index`.
  explicit StagedMpiCommunicator(int device_index);
  /// \param[in] host_communicator  the host-memory communicator that moves the staged bytes
  ///                               (its device() must be cpu); owned from now on.
  /// \param[in] device_index       the GPU whose memory the data-plane buffers are in.
  StagedMpiCommunicator(std::unique_ptr<Communicator> host_communicator, int device_index);
  ~StagedMpiCommunicator() override;
  StagedMpiCommunicator(const StagedMpiCommunicator&) = delete;
  StagedMpiCommunicator& operator=(const StagedMpiCommunicator&) = delete;

  /// The stream whose work produces the send buffers and consumes the received ones: start()
  /// copies after the work already on it, wait() orders its later work after the copies back.
  /// Default: the legacy default stream.
  void set_compute_stream(void* stream) override;

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
  /// A staged communicator on the same GPU over the host communicator's split.
  std::unique_ptr<Communicator> split(int color, int key) override;
  void barrier() override;
  void host_all_gather(const void* send, void* receive, std::size_t bytes_per_rank) override;

  /// Pinned host bytes held for staging now (they only grow).
  std::size_t staging_bytes() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace spattn
