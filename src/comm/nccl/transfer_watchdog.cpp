#include "comm/nccl/transfer_watchdog.hpp"

#include <chrono>
#include <sstream>
#include <utility>

#include "comm/timeout_message.hpp"
#include "core/cuda/cuda_check.hpp"

namespace spattn {

namespace {

using Clock = std::chrono::steady_clock;

// How often the watchdog looks at the oldest transfer while any is in flight: a small share of
// any timeout worth setting, and a cudaEventQuery costs about a microsecond.
constexpr std::chrono::milliseconds kPollInterval{1};

}  // namespace

TransferWatchdog::TransferWatchdog(int device_index, double timeout_seconds, std::string who, Probe probe,
                                   GiveUp give_up)
    : device_index_(device_index),
      who_(std::move(who)),
      probe_(std::move(probe)),
      give_up_(std::move(give_up)),
      timeout_seconds_(timeout_seconds),
      thread_([this] { run(); }) {}

TransferWatchdog::~TransferWatchdog() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  thread_.join();
  // An event still pending is released once the stream gets past it.
  for (const Watched& transfer : watched_) cudaEventDestroy(transfer.done);
  for (cudaEvent_t event : spare_) cudaEventDestroy(event);
}

uint64_t TransferWatchdog::watch(cudaStream_t stream, const char* operation, const std::vector<int>& peers) {
  std::unique_lock<std::mutex> lock(mutex_);
  Watched transfer;
  transfer.ticket = next_ticket_++;
  transfer.operation = operation;
  transfer.peers = peers;
  if (spare_.empty()) {
    SPATTN_CUDA_CHECK(cudaEventCreateWithFlags(&transfer.done, cudaEventDisableTiming));
  } else {
    transfer.done = spare_.back();
    spare_.pop_back();
  }
  const cudaError_t recorded = cudaEventRecord(transfer.done, stream);
  if (recorded != cudaSuccess) spare_.push_back(transfer.done);
  SPATTN_CUDA_CHECK(recorded);
  const uint64_t ticket = transfer.ticket;
  watched_.push_back(std::move(transfer));
  lock.unlock();
  wake_.notify_one();
  return ticket;
}

void TransferWatchdog::set_site(uint64_t ticket, const TransferSite& site) {
  std::lock_guard<std::mutex> lock(mutex_);
  for (Watched& transfer : watched_) {
    if (transfer.ticket == ticket) transfer.site = site;
  }
}

std::string TransferWatchdog::describe(const Watched& transfer) {
  std::ostringstream what;
  what << transfer.operation;
  if (transfer.peers.empty()) {
    what << " of every rank";
  } else {
    what << " with rank" << (transfer.peers.size() > 1 ? "s " : " ");
    for (std::size_t i = 0; i < transfer.peers.size(); ++i) what << (i ? ", " : "") << transfer.peers[i];
  }
  what << describe_site(transfer.site);
  return what.str();
}

void TransferWatchdog::run() {
  // Events belong to the GPU they were made on; querying them needs no more than that.
  cudaSetDevice(device_index_);
  std::unique_lock<std::mutex> lock(mutex_);
  uint64_t oldest_ticket = 0;
  Clock::time_point oldest_since = Clock::now();
  bool have_oldest = false;
  while (!stopping_) {
    if (watched_.empty() || gave_up_) {
      wake_.wait(lock, [this] { return stopping_ || (!watched_.empty() && !gave_up_); });
      continue;
    }
    Watched& oldest = watched_.front();
    if (!have_oldest || oldest.ticket != oldest_ticket) {
      oldest_ticket = oldest.ticket;
      oldest_since = Clock::now();
      have_oldest = true;
    }
    const cudaError_t state = cudaEventQuery(oldest.done);
    if (state == cudaSuccess) {
      spare_.push_back(oldest.done);
      watched_.pop_front();
      continue;
    }
    std::string failure;
    FailureKind kind = FailureKind::transfer_error;
    if (state != cudaErrorNotReady) {
      failure = who_ + ": CUDA reported '" + cudaGetErrorString(state) + "' while " + oldest.operation +
                " was in flight" + describe_site(oldest.site);
    } else if (std::chrono::duration<double>(Clock::now() - oldest_since).count() > timeout_seconds_) {
      failure = timeout_message(who_, timeout_seconds_, describe(oldest));
      kind = FailureKind::timeout;
    }
    if (failure.empty()) {
      // The probe may take the communicator's lock: never call it while holding ours.
      const std::string operation_site = std::string(oldest.operation) + describe_site(oldest.site);
      lock.unlock();
      const std::string probe_failure = probe_();
      if (!probe_failure.empty()) failure = who_ + ": " + probe_failure + " while " + operation_site + " was in flight";
      if (failure.empty()) std::this_thread::sleep_for(kPollInterval);
      lock.lock();
      if (failure.empty()) continue;
    }
    gave_up_ = true;
    lock.unlock();
    give_up_(failure, kind);
    lock.lock();
  }
}

}  // namespace spattn
