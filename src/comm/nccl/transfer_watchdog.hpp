#pragma once
// Watches the transfers that a communicator has enqueued on its CUDA stream, from a thread of its
// own. On a GPU a transfer completes after the call that started it has returned: when a peer
// dies or stalls, NCCL's kernels wait for it for ever, and the host would only notice by hanging
// in its next synchronization. The watchdog gives up on the oldest unfinished transfer once it
// has been the oldest for longer than the timeout (the stream ran everything before it, so the
// wait is the transfer's own), or as soon as the probe reports an error (NCCL's asynchronous
// error), and hands its message to `give_up` once: the communicator aborts NCCL there, which ends
// the waiting kernels, so that a synchronizing host returns and every later call throws.

#include <cuda_runtime_api.h>

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "comm/family_health.hpp"
#include "spattn/communicator.hpp"

namespace spattn {

class TransferWatchdog {
 public:
  /// "" while the transport is healthy, else what went wrong. Called on the watchdog's thread.
  using Probe = std::function<std::string()>;
  /// Gets the message for the user and whether the transfer timed out or failed; called on the
  /// watchdog's thread, at most once.
  using GiveUp = std::function<void(const std::string& message, FailureKind kind)>;

  /// `who` names this rank in messages ("rank 1 of 4"); events are made on GPU `device_index`.
  TransferWatchdog(int device_index, double timeout_seconds, std::string who, Probe probe, GiveUp give_up);
  ~TransferWatchdog();
  TransferWatchdog(const TransferWatchdog&) = delete;
  TransferWatchdog& operator=(const TransferWatchdog&) = delete;

  /// Right after `operation` was enqueued on `stream` (the caller's GPU current): watches it until
  /// the stream gets past it. `peers` are the ranks it exchanges with (empty: every rank).
  /// Returns the ticket that set_site() takes.
  uint64_t watch(cudaStream_t stream, const char* operation, const std::vector<int>& peers);

  /// Where the caller waits on transfer `ticket`, for the message; ignored once it is done.
  void set_site(uint64_t ticket, const TransferSite& site);

 private:
  struct Watched {
    uint64_t ticket = 0;
    cudaEvent_t done = nullptr;  // recorded on the stream right behind the transfer
    const char* operation = "";
    std::vector<int> peers;
    TransferSite site;
  };

  void run();
  /// "a send/receive batch with ranks 1, 3 (at step 2 of the forward's steps 0-3)".
  static std::string describe(const Watched& transfer);

  const int device_index_;
  const std::string who_;
  const Probe probe_;
  const GiveUp give_up_;
  const double timeout_seconds_;

  std::mutex mutex_;  // guards everything below
  std::condition_variable wake_;
  std::deque<Watched> watched_;      // oldest first
  std::vector<cudaEvent_t> spare_;   // events of finished transfers, reused: no new event per step
  uint64_t next_ticket_ = 0;
  bool stopping_ = false;
  bool gave_up_ = false;
  std::thread thread_;  // last: starts once everything above exists
};

}  // namespace spattn
