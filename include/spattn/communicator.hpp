#pragma once
/// \file communicator.hpp
/// How ranks exchange data: batches of point-to-point transfers and collectives, each started
/// and later waited on, so that a transfer overlaps compute (MPI requests on the CPU, a
/// communication stream on CUDA).

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "spattn/device.hpp"

namespace spattn {

/// A buffer to send to, or receive from, one peer rank.
struct PeerBuffer {
  void* data = nullptr;
  std::size_t bytes = 0;
  int peer = -1;
};

/// Transfers started together; wait() completes all of them.
struct TransferBatch {
  std::vector<PeerBuffer> sends;
  std::vector<PeerBuffer> receives;
};

/// Where a strategy waits on a transfer: the call and its step. A device communicator, whose
/// transfers can fail after the call that started them has returned, names it in its error.
struct TransferSite {
  const char* call = nullptr;  // "forward" or "backward"; null when the caller did not say
  int step = 0;
  int steps = 0;
};

/// " (at step 3 of the forward's steps 0-7)", or "" for a site that names no call.
std::string describe_site(const TransferSite& site);

/// Whether `message` names a site already (holds what describe_site writes).
bool names_a_site(const std::string& message);

/// An in-flight transfer, completed by Communicator::wait.
class PendingTransfer {
 public:
  virtual ~PendingTransfer() = default;
  /// Where the caller will wait on it; set before Communicator::wait, optional.
  TransferSite site;
};

/// The communication interface that every strategy is written against.
class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  /// Where the buffers passed to the data-plane calls live.
  virtual Device device() const = 0;

  /// Starts every send and receive of `batch` at once: deadlock-free at any rank count and in
  /// any order of peers. Buffers must stay valid until wait().
  virtual std::unique_ptr<PendingTransfer> start(const TransferBatch& batch) = 0;

  /// Starts an all-to-all: block i of `send` (bytes_per_rank bytes) goes to rank i, and block j
  /// of `receive` comes from rank j.
  virtual std::unique_ptr<PendingTransfer> start_all_to_all(const void* send, void* receive,
                                                            std::size_t bytes_per_rank) = 0;

  /// Starts an all-gather: block j of `receive` (bytes_per_rank bytes) is rank j's `send`.
  virtual std::unique_ptr<PendingTransfer> start_all_gather(const void* send, void* receive,
                                                            std::size_t bytes_per_rank) = 0;

  /// Starts a reduce-scatter of fp32 sums: block j of `receive` (floats_per_rank floats) is the
  /// sum over ranks of block j of their `send`, on rank j.
  virtual std::unique_ptr<PendingTransfer> start_reduce_scatter_sum(const float* send, float* receive,
                                                                    std::size_t floats_per_rank) = 0;

  /// Completes a started transfer; on CUDA it orders the caller's stream after it instead of
  /// blocking the host.
  virtual void wait(PendingTransfer& transfer) = 0;

  /// Throws the Error of a transfer that failed or timed out after the call that started it had
  /// returned, which only happens on devices that run asynchronously (NCCL: a watchdog thread
  /// gives up on it and aborts the communicator, so that the device work waiting on it ends).
  /// Every later call throws it too; call this after synchronizing with the device to know that
  /// what the calls wrote is whole. Host communicators fail inside the call and do nothing here.
  /// Safe to call from any thread, also while another one is in a call.
  virtual void check_transfers_completed() {}

  /// The device stream whose work produces the send buffers and consumes the received ones (a
  /// cudaStream_t for CUDA communicators; nullptr is the legacy default stream, their default):
  /// transfers start after the work already enqueued on it, and wait() orders its later work
  /// after them. Host communicators have no streams and ignore it.
  virtual void set_compute_stream(void* stream) { (void)stream; }

  /// A communicator of the ranks that pass the same `color`, ordered by `key` (then by rank).
  /// Collective over this communicator.
  virtual std::unique_ptr<Communicator> split(int color, int key) = 0;

  /// Blocks until every rank arrives.
  virtual void barrier() = 0;

  /// Control plane: an all-gather of small host buffers, used to agree on validation verdicts
  /// before any data moves. Blocking.
  virtual void host_all_gather(const void* send, void* receive, std::size_t bytes_per_rank) = 0;
};

/// One number of a call that every rank must agree on, named so that a disagreement says which.
struct CallField {
  const char* name;                         // e.g. "seq"
  int64_t value;
  std::string (*show)(int64_t) = nullptr;   // how a value reads (e.g. "bf16"); null: the number
};

/// Agreement before any transfer, in one small collective. Every rank passes its own verdict
/// (empty when its inputs are valid) and a signature of the call (the fields every rank must
/// agree on: global shape, dtype, mask, ...). When any verdict is an error, or any signature
/// differs from rank 0's, every rank throws the same Error, naming the rank at fault and, for a
/// disagreement, each field that differs with both ranks' values.
void agree_on_call(Communicator& communicator, const std::string& local_error,
                   const std::vector<CallField>& call_signature);

}  // namespace spattn
