#include "spattn/nccl_communicator.hpp"

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "comm/family_health.hpp"
#include "comm/fault_injection.hpp"
#include "comm/nccl/transfer_watchdog.hpp"
#include "comm/timeout_message.hpp"
#include "core/cuda/cuda_check.hpp"
#include "core/cuda/current_device_guard.hpp"
#include "core/cuda/device_event.hpp"
#include "spattn/error.hpp"

namespace spattn {

static_assert(sizeof(ncclUniqueId) == std::tuple_size<NcclUniqueIdBytes>::value,
              "NcclUniqueIdBytes must hold exactly one ncclUniqueId");

namespace {

using Clock = std::chrono::steady_clock;

// NCCL's description of `status`, and its last error message for `comm` (which may be null).
std::string nccl_error_text(ncclResult_t status, ncclComm_t comm) {
  std::string text = ncclGetErrorString(status);
  const char* last = ncclGetLastError(comm);
  if (last != nullptr && *last != '\0') text += std::string(" (") + last + ")";
  return text;
}

// Throws unless `status` is success or, from a nonblocking communicator, "in progress".
void check_issued(ncclResult_t status, const char* operation, ncclComm_t comm) {
  SPATTN_CHECK(status == ncclSuccess || status == ncclInProgress,
               "NCCL " << operation << " failed: " << nccl_error_text(status, comm));
}

Clock::time_point deadline_after(double seconds) {
  return Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
}

// Waits until the nonblocking communicator `comm` has finished what it was asked (ncclSuccess).
// Returns false on timeout, leaving the caller to abort; throws on an NCCL error.
bool poll_until_ready(ncclComm_t comm, const char* operation, Clock::time_point deadline) {
  for (;;) {
    ncclResult_t state = ncclSuccess;
    const ncclResult_t status = ncclCommGetAsyncError(comm, &state);
    SPATTN_CHECK(status == ncclSuccess, "NCCL ncclCommGetAsyncError after " << operation << " failed: "
                                                                           << nccl_error_text(status, comm));
    if (state == ncclSuccess) return true;
    SPATTN_CHECK(state == ncclInProgress, "NCCL " << operation << " failed: " << nccl_error_text(state, comm));
    if (Clock::now() > deadline) return false;
    std::this_thread::yield();
  }
}

// Making a communicator (initialization, a split, and the first exchange that connects every
// pair of ranks) may take at least this long, whatever the timeout: NCCL's own setup takes
// seconds (on 2 H200s a split's first exchange took over 1 s), and a timeout chosen to catch a
// stalled transfer must not fail it. A peer that never comes is still reported, this much later.
constexpr double kShortestSetupTimeoutSeconds = 60.0;

double setup_timeout(double timeout_seconds) { return std::max(timeout_seconds, kShortestSetupTimeoutSeconds); }

// A communicator being created: ready, or aborted and an Error thrown.
ncclComm_t await_new_comm(ncclComm_t comm, ncclResult_t status, const char* operation, double timeout_seconds) {
  if (status != ncclSuccess && status != ncclInProgress) {
    const std::string text = nccl_error_text(status, comm);
    if (comm != nullptr) ncclCommAbort(comm);
    SPATTN_FAIL("NCCL " << operation << " failed: " << text);
  }
  SPATTN_CHECK(comm != nullptr, "NCCL " << operation << " returned no communicator");
  bool ready = false;
  try {
    ready = poll_until_ready(comm, operation, deadline_after(timeout_seconds));
  } catch (...) {
    ncclCommAbort(comm);
    throw;
  }
  if (!ready) {
    ncclCommAbort(comm);
    SPATTN_FAIL("NCCL " << operation << " did not complete within " << timeout_seconds
                        << " s (is every rank creating it?); the communicator was aborted");
  }
  return comm;
}

// A nonblocking configuration: initialization and every later call return at once, so that a
// rank that never arrives shows as a timeout and the communicator can be aborted.
ncclConfig_t nonblocking_config() {
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  return config;
}

void check_device_index(int device_index) {
  int device_count = 0;
  SPATTN_CUDA_CHECK(cudaGetDeviceCount(&device_count));
  SPATTN_CHECK(device_index >= 0 && device_index < device_count,
               "device cuda:" << device_index << " does not exist; this process sees " << device_count << " GPU(s)");
}

// One transfer on the communication stream, with an event recorded right after it: wait() holds
// the compute stream for this transfer alone, not for those started after it on the same stream
// (a step's gradient hop must not delay the wait for the key/value rotation started before it).
class NcclPendingTransfer final : public PendingTransfer {
 public:
  NcclPendingTransfer(int device_index, uint64_t watch_ticket)
      : ticket(watch_ticket), done(device_index, cudaEventDisableTiming) {}

  uint64_t ticket;
  cuda::DeviceEvent done;  // recorded on the communication stream after the transfer
};

// What rank 0 of a bootstrap communicator gives every rank: the id, or word that making it failed.
struct UniqueIdMessage {
  char made = 0;
  NcclUniqueIdBytes id{};
};

NcclUniqueIdBytes unique_id_from_rank_0(Communicator& bootstrap) {
  UniqueIdMessage mine;
  std::string failure;
  if (bootstrap.rank() == 0) {
    try {
      mine.id = make_nccl_unique_id();
      mine.made = 1;
    } catch (const Error& error) {
      failure = error.what();  // the other ranks are already in host_all_gather: tell them first
    }
  }
  std::vector<UniqueIdMessage> all(static_cast<std::size_t>(bootstrap.size()));
  bootstrap.host_all_gather(&mine, all.data(), sizeof(UniqueIdMessage));
  SPATTN_CHECK(all[0].made == 1, "rank 0 could not make the NCCL unique id" << (failure.empty() ? "" : ": ")
                                                                            << failure);
  return all[0].id;
}

}  // namespace

NcclUniqueIdBytes make_nccl_unique_id() {
  ncclUniqueId id;
  const ncclResult_t status = ncclGetUniqueId(&id);
  SPATTN_CHECK(status == ncclSuccess, "NCCL ncclGetUniqueId failed: " << nccl_error_text(status, nullptr));
  NcclUniqueIdBytes bytes;
  std::memcpy(bytes.data(), &id, sizeof(id));
  return bytes;
}

struct NcclCommunicator::State {
  // Held by every call that uses `comm`, and by the watchdog when it aborts it.
  std::mutex comm_mutex;
  ncclComm_t comm = nullptr;
  bool owned = false;
  double timeout_seconds = kDefaultCommunicationTimeoutSeconds;
  int rank = 0;
  int size = 1;
  int device_index = 0;
  int process_rank = 0;                        // the rank SPATTN_FAULT names: in the first communicator
  std::shared_ptr<FaultPlan> fault;            // shared with the communicators split from this one
  std::shared_ptr<FamilyHealth> health = std::make_shared<FamilyHealth>();
  std::unique_ptr<TransferWatchdog> watchdog;  // watches the data-plane transfers
  cudaStream_t compute_stream = cudaStreamLegacy;
  cudaStream_t stream = nullptr;           // the communication stream
  cudaEvent_t compute_ready = nullptr;     // recorded on the compute stream by each start()
  void* control_buffer = nullptr;          // device memory of the control plane, grown on demand
  std::size_t control_bytes = 0;

  State(ncclComm_t nccl_comm, bool owns_comm, double timeout) : comm(nccl_comm), owned(owns_comm), timeout_seconds(timeout) {}

  ~State() {
    watchdog.reset();  // first: its thread may be about to abort `comm`
    if (stream == nullptr && comm == nullptr) return;
    int current = 0;
    const bool have_device = cudaGetDevice(&current) == cudaSuccess;
    if (have_device) cudaSetDevice(device_index);
    if (comm != nullptr && owned) {
      // Finalize flushes what is still queued; a peer that never gets there must not hang us.
      bool finalized = false;
      try {
        check_issued(ncclCommFinalize(comm), "ncclCommFinalize", comm);
        finalized = poll_until_ready(comm, "ncclCommFinalize", deadline_after(timeout_seconds));
      } catch (const Error&) {
        finalized = false;
      }
      if (finalized) {
        ncclCommDestroy(comm);
      } else {
        ncclCommAbort(comm);
      }
    }
    if (stream != nullptr) cudaStreamSynchronize(stream);
    if (control_buffer != nullptr) cudaFree(control_buffer);
    if (compute_ready != nullptr) cudaEventDestroy(compute_ready);
    if (stream != nullptr) cudaStreamDestroy(stream);
    if (have_device) cudaSetDevice(current);
  }

  // Reads rank, size and GPU from the communicator and makes the stream and events on that GPU.
  void set_up() {
    check_issued(ncclCommUserRank(comm, &rank), "ncclCommUserRank", comm);
    check_issued(ncclCommCount(comm, &size), "ncclCommCount", comm);
    check_issued(ncclCommCuDevice(comm, &device_index), "ncclCommCuDevice", comm);
    cuda::CurrentDeviceGuard guard(device_index);
    // Non-blocking: transfers must not serialize with the legacy default stream; the events order
    // them exactly where needed. Highest priority: the block scheduler then gives NCCL's kernels the
    // multiprocessors that attention CTAs free first, instead of queueing them behind the launch
    // that shares the GPU with the transfer (the 8k timeline's last dk, dv hop took 2.2 ms there).
    int least_priority = 0, greatest_priority = 0;
    SPATTN_CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&least_priority, &greatest_priority));
    SPATTN_CUDA_CHECK(cudaStreamCreateWithPriority(&stream, cudaStreamNonBlocking, greatest_priority));
    SPATTN_CUDA_CHECK(cudaEventCreateWithFlags(&compute_ready, cudaEventDisableTiming));
    watchdog = std::make_unique<TransferWatchdog>(
        device_index, timeout_seconds, describe_rank(rank, size),
        [this] { return asynchronous_error(); },
        [this](const std::string& message, FailureKind kind) { give_up(message, kind); });
  }

  // On the watchdog's thread: NCCL's asynchronous error, "" when there is none or when a call of
  // this rank holds the communicator (it checks for itself).
  std::string asynchronous_error() {
    std::unique_lock<std::mutex> lock(comm_mutex, std::try_to_lock);
    if (!lock.owns_lock() || comm == nullptr) return "";
    ncclResult_t state = ncclSuccess;
    if (ncclCommGetAsyncError(comm, &state) != ncclSuccess) return "";
    if (state == ncclSuccess || state == ncclInProgress) return "";
    return std::string("NCCL reported '") + nccl_error_text(state, comm) + "'";
  }

  // On the watchdog's thread: retires the family and ends the kernels that wait on the transfer.
  void give_up(const std::string& message, FailureKind kind) {
    health->record(message + (owned ? "; the NCCL communicator was aborted, make a new one"
                                    : "; the NCCL communicator is its owner's to abort"),
                   kind);
    std::lock_guard<std::mutex> lock(comm_mutex);
    if (owned && comm != nullptr) {
      ncclCommAbort(comm);
      comm = nullptr;
    }
  }

  // The communicator for a call that holds comm_mutex: none after a failure anywhere in the family.
  ncclComm_t usable_comm() const {
    health->check();
    SPATTN_CHECK(comm != nullptr, "this NCCL communicator was aborted after a timeout");
    return comm;
  }

  // A transfer of the data plane: `enqueue(comm)` puts `operation` with `peers` (empty: every
  // rank) on the communication stream, after the compute stream's work so far, and the watchdog
  // watches it. SPATTN_FAULT may stop or kill this process first (before the lock: a stalled
  // rank holds nothing).
  template <typename Enqueue>
  std::unique_ptr<PendingTransfer> data_transfer(const char* operation, const std::vector<int>& peers,
                                                 Enqueue&& enqueue) {
    health->check();
    before_transfer(fault.get(), process_rank);
    std::lock_guard<std::mutex> lock(comm_mutex);
    ncclComm_t usable = usable_comm();
    cuda::CurrentDeviceGuard guard(device_index);
    follow_compute_stream();
    enqueue(usable);
    auto transfer = std::make_unique<NcclPendingTransfer>(device_index, watchdog->watch(stream, operation, peers));
    SPATTN_CUDA_CHECK(cudaEventRecord(transfer->done.get(), stream));
    return transfer;
  }

  // An owned communicator that hangs is aborted (and unusable from then on, with the ones split
  // from the same one); a borrowed one is left to its owner.
  [[noreturn]] void fail_timeout(const char* operation, double waited_seconds) {
    if (owned) {
      ncclCommAbort(comm);
      comm = nullptr;
    }
    const std::string message =
        timeout_message(describe_rank(rank, size), waited_seconds, std::string("NCCL ") + operation) +
        (owned ? "; the communicator was aborted" : "");
    health->record(message, FailureKind::timeout);
    detail::throw_timeout_error(message);
  }

  // After an NCCL call on the communication stream: in nonblocking mode the call may return
  // before its work is enqueued, and nothing may be recorded on the stream until it is.
  // It waits for that at most `waited_seconds`.
  void complete_issue(ncclResult_t status, const char* operation, double waited_seconds) {
    check_issued(status, operation, comm);
    if (!poll_until_ready(comm, operation, deadline_after(waited_seconds))) fail_timeout(operation, waited_seconds);
  }

  // The communication stream continues after the compute stream's work so far.
  void follow_compute_stream() {
    SPATTN_CUDA_CHECK(cudaEventRecord(compute_ready, compute_stream));
    SPATTN_CUDA_CHECK(cudaStreamWaitEvent(stream, compute_ready, 0));
  }

  // Runs `issue` (NCCL calls that return their first failure) between ncclGroupStart and
  // ncclGroupEnd, closing the group even when a call failed; waits for the group's issue as
  // complete_issue does.
  template <typename Issue>
  void grouped(const char* operation, double waited_seconds, Issue&& issue) {
    check_issued(ncclGroupStart(), "ncclGroupStart", comm);
    const ncclResult_t issued = issue();
    const ncclResult_t ended = ncclGroupEnd();
    check_issued(issued, operation, comm);
    complete_issue(ended, operation, waited_seconds);
  }

  // Blocks the host until the communication stream is idle (control plane only), for at most
  // `waited_seconds`.
  void block_until_idle(const char* operation, double waited_seconds) {
    const Clock::time_point deadline = deadline_after(waited_seconds);
    for (;;) {
      const cudaError_t status = cudaStreamQuery(stream);
      if (status == cudaSuccess) return;
      SPATTN_CHECK(status == cudaErrorNotReady, "cudaStreamQuery after NCCL " << operation << " failed: "
                                                                              << cudaGetErrorString(status));
      if (!poll_until_ready(comm, operation, deadline) || Clock::now() > deadline) {
        fail_timeout(operation, waited_seconds);
      }
      std::this_thread::yield();
    }
  }

  // NCCL connects two ranks when they first exchange data, and connecting needs both: made here
  // (every rank makes the communicator), a peer that is missing later shows as a transfer that
  // never completes, which the watchdog reports with its step, rather than as a call that cannot
  // even enqueue it. One byte to and from every rank.
  void connect_to_every_peer() {
    std::lock_guard<std::mutex> lock(comm_mutex);
    cuda::CurrentDeviceGuard guard(device_index);
    char* bytes = static_cast<char*>(control_buffer_of(2 * static_cast<std::size_t>(size)));
    SPATTN_CUDA_CHECK(cudaMemsetAsync(bytes, 0, 2 * static_cast<std::size_t>(size), stream));
    const double setup_seconds = setup_timeout(timeout_seconds);
    grouped("the first exchange with every rank", setup_seconds, [&] {
      for (int peer = 0; peer < size; ++peer) {
        ncclResult_t status = ncclRecv(bytes + size + peer, 1, ncclUint8, peer, comm, stream);
        if (status != ncclSuccess && status != ncclInProgress) return status;
        status = ncclSend(bytes + peer, 1, ncclUint8, peer, comm, stream);
        if (status != ncclSuccess && status != ncclInProgress) return status;
      }
      return ncclSuccess;
    });
    block_until_idle("the first exchange with every rank", setup_seconds);
  }

  void* control_buffer_of(std::size_t bytes) {
    if (bytes > control_bytes) {
      if (control_buffer != nullptr) SPATTN_CUDA_CHECK(cudaFree(control_buffer));
      control_buffer = nullptr;
      control_bytes = 0;
      SPATTN_CUDA_CHECK(cudaMalloc(&control_buffer, bytes));
      control_bytes = bytes;
    }
    return control_buffer;
  }
};

NcclCommunicator::NcclCommunicator(std::unique_ptr<State> state) : state_(std::move(state)) {
  state_->set_up();
  state_->connect_to_every_peer();
}

NcclCommunicator::NcclCommunicator(Communicator& bootstrap, int device_index, double timeout_seconds)
    : NcclCommunicator(bootstrap.rank(), bootstrap.size(), unique_id_from_rank_0(bootstrap), device_index,
                       timeout_seconds) {}

NcclCommunicator::NcclCommunicator(int rank, int size, const NcclUniqueIdBytes& unique_id, int device_index,
                                   double timeout_seconds) {
  SPATTN_CHECK(size >= 1 && rank >= 0 && rank < size, "NCCL rank " << rank << " of " << size << " ranks");
  check_timeout_seconds(timeout_seconds, "timeout_seconds of the NCCL communicator");
  check_device_index(device_index);
  ncclUniqueId id;
  std::memcpy(&id, unique_id.data(), sizeof(id));
  ncclConfig_t config = nonblocking_config();
  ncclComm_t comm = nullptr;
  {
    cuda::CurrentDeviceGuard guard(device_index);
    const ncclResult_t status = ncclCommInitRankConfig(&comm, size, id, rank, &config);
    await_new_comm(comm, status, "ncclCommInitRankConfig", setup_timeout(timeout_seconds));
  }
  state_ = std::make_unique<State>(comm, true, timeout_seconds);
  state_->set_up();
  state_->connect_to_every_peer();
  state_->process_rank = state_->rank;
  state_->fault = fault_plan_from_environment();
}

NcclCommunicator::NcclCommunicator(ncclComm* borrowed_comm, double timeout_seconds) {
  SPATTN_CHECK(borrowed_comm != nullptr, "NcclCommunicator over a null ncclComm_t");
  check_timeout_seconds(timeout_seconds, "timeout_seconds of the NCCL communicator");
  state_ = std::make_unique<State>(borrowed_comm, false, timeout_seconds);
  state_->set_up();
  state_->process_rank = state_->rank;
  state_->fault = fault_plan_from_environment();
}

NcclCommunicator::~NcclCommunicator() = default;

double NcclCommunicator::timeout_seconds() const { return state_->timeout_seconds; }

void NcclCommunicator::set_compute_stream(void* stream) {
  state_->compute_stream = static_cast<cudaStream_t>(stream);
}
CUstream_st* NcclCommunicator::communication_stream() const { return state_->stream; }
ncclComm* NcclCommunicator::nccl_comm() const { return state_->comm; }

int NcclCommunicator::rank() const { return state_->rank; }
int NcclCommunicator::size() const { return state_->size; }
Device NcclCommunicator::device() const { return Device{DeviceKind::cuda, state_->device_index}; }

std::unique_ptr<PendingTransfer> NcclCommunicator::start(const TransferBatch& batch) {
  for (const PeerBuffer& receive : batch.receives) {
    SPATTN_CHECK(receive.peer >= 0 && receive.peer < state_->size,
                 "receive from rank " << receive.peer << "; ranks are 0.." << state_->size - 1);
  }
  for (const PeerBuffer& send : batch.sends) {
    SPATTN_CHECK(send.peer >= 0 && send.peer < state_->size,
                 "send to rank " << send.peer << "; ranks are 0.." << state_->size - 1);
  }
  // Each peer once, however many buffers go to or come from it.
  std::vector<int> peers;
  for (const std::vector<PeerBuffer>* buffers : {&batch.receives, &batch.sends}) {
    for (const PeerBuffer& buffer : *buffers) {
      if (std::find(peers.begin(), peers.end(), buffer.peer) == peers.end()) peers.push_back(buffer.peer);
    }
  }
  return state_->data_transfer("a send/receive batch", peers, [&](ncclComm_t comm) {
    // One group: NCCL matches every send with its receive whatever the order of peers, without
    // deadlock (the group is one operation).
    state_->grouped("send/receive batch", state_->timeout_seconds, [&] {
      for (const PeerBuffer& receive : batch.receives) {
        const ncclResult_t status = ncclRecv(receive.data, receive.bytes, ncclUint8, receive.peer, comm, state_->stream);
        if (status != ncclSuccess && status != ncclInProgress) return status;
      }
      for (const PeerBuffer& send : batch.sends) {
        const ncclResult_t status = ncclSend(send.data, send.bytes, ncclUint8, send.peer, comm, state_->stream);
        if (status != ncclSuccess && status != ncclInProgress) return status;
      }
      return ncclSuccess;
    });
  });
}

std::unique_ptr<PendingTransfer> NcclCommunicator::start_all_to_all(const void* send, void* receive,
                                                                    std::size_t bytes_per_rank) {
  return state_->data_transfer("an all-to-all", {}, [&](ncclComm_t comm) {
    // NCCL has no all-to-all collective: one send and one receive per peer, in one group.
    state_->grouped("all-to-all", state_->timeout_seconds, [&] {
      for (int peer = 0; peer < state_->size; ++peer) {
        const std::size_t offset = bytes_per_rank * static_cast<std::size_t>(peer);
        ncclResult_t status = ncclRecv(static_cast<char*>(receive) + offset, bytes_per_rank, ncclUint8, peer, comm,
                                       state_->stream);
        if (status != ncclSuccess && status != ncclInProgress) return status;
        status = ncclSend(static_cast<const char*>(send) + offset, bytes_per_rank, ncclUint8, peer, comm,
                          state_->stream);
        if (status != ncclSuccess && status != ncclInProgress) return status;
      }
      return ncclSuccess;
    });
  });
}

std::unique_ptr<PendingTransfer> NcclCommunicator::start_all_gather(const void* send, void* receive,
                                                                    std::size_t bytes_per_rank) {
  return state_->data_transfer("an all-gather", {}, [&](ncclComm_t comm) {
    state_->complete_issue(ncclAllGather(send, receive, bytes_per_rank, ncclUint8, comm, state_->stream),
                           "ncclAllGather", state_->timeout_seconds);
  });
}

std::unique_ptr<PendingTransfer> NcclCommunicator::start_reduce_scatter_sum(const float* send, float* receive,
                                                                            std::size_t floats_per_rank) {
  return state_->data_transfer("a reduce-scatter", {}, [&](ncclComm_t comm) {
    state_->complete_issue(
        ncclReduceScatter(send, receive, floats_per_rank, ncclFloat, ncclSum, comm, state_->stream),
        "ncclReduceScatter", state_->timeout_seconds);
  });
}

void NcclCommunicator::wait(PendingTransfer& transfer) {
  // A transfer of another communicator is a bug: dynamic_cast throws on it.
  const auto& pending = dynamic_cast<NcclPendingTransfer&>(transfer);
  std::lock_guard<std::mutex> lock(state_->comm_mutex);
  ncclComm_t comm = state_->usable_comm();
  state_->watchdog->set_site(pending.ticket, transfer.site);
  // An asynchronous failure (a peer gone, a network error) shows here rather than as wrong data.
  ncclResult_t state = ncclSuccess;
  check_issued(ncclCommGetAsyncError(comm, &state), "ncclCommGetAsyncError", comm);
  check_issued(state, "an earlier transfer", comm);
  cuda::CurrentDeviceGuard guard(state_->device_index);
  // No host synchronization: the compute stream's later work waits on the device.
  SPATTN_CUDA_CHECK(cudaStreamWaitEvent(state_->compute_stream, pending.done.get(), 0));
}

void NcclCommunicator::check_transfers_completed() { state_->health->check(); }

std::unique_ptr<Communicator> NcclCommunicator::split(int color, int key) {
  SPATTN_CHECK(color >= 0, "split color must be >= 0, got " << color);
  std::lock_guard<std::mutex> lock(state_->comm_mutex);
  ncclComm_t comm = state_->usable_comm();
  ncclConfig_t config = nonblocking_config();
  ncclComm_t part = nullptr;
  const double setup_seconds = setup_timeout(state_->timeout_seconds);
  {
    cuda::CurrentDeviceGuard guard(state_->device_index);
    const ncclResult_t status = ncclCommSplit(comm, color, key, &part, &config);
    if (status == ncclSuccess || status == ncclInProgress) {
      // The parent is busy until the split is done, and so is the new communicator.
      if (!poll_until_ready(comm, "ncclCommSplit", deadline_after(setup_seconds))) {
        if (part != nullptr) ncclCommAbort(part);
        state_->fail_timeout("ncclCommSplit", setup_seconds);
      }
    }
    await_new_comm(part, status, "ncclCommSplit", setup_seconds);
  }
  auto state = std::make_unique<State>(part, true, state_->timeout_seconds);
  state->compute_stream = state_->compute_stream;
  state->process_rank = state_->process_rank;
  state->fault = state_->fault;
  state->health = state_->health;
  return std::unique_ptr<Communicator>(new NcclCommunicator(std::move(state)));
}

void NcclCommunicator::barrier() {
  const char token = 0;
  std::vector<char> tokens(static_cast<std::size_t>(state_->size));
  host_all_gather(&token, tokens.data(), 1);
}

void NcclCommunicator::host_all_gather(const void* send, void* receive, std::size_t bytes_per_rank) {
  // Control plane: a few bytes, blocking, through a device buffer (NCCL moves device memory only).
  std::lock_guard<std::mutex> lock(state_->comm_mutex);
  ncclComm_t comm = state_->usable_comm();
  cuda::CurrentDeviceGuard guard(state_->device_index);
  const std::size_t total = bytes_per_rank * static_cast<std::size_t>(state_->size);
  char* gathered = static_cast<char*>(state_->control_buffer_of(total));
  char* mine = gathered + bytes_per_rank * static_cast<std::size_t>(state_->rank);
  SPATTN_CUDA_CHECK(cudaMemcpyAsync(mine, send, bytes_per_rank, cudaMemcpyHostToDevice, state_->stream));
  // In place: this rank's block already sits at its place in the gathered buffer.
  state_->complete_issue(ncclAllGather(mine, gathered, bytes_per_rank, ncclUint8, comm, state_->stream),
                         "ncclAllGather (host_all_gather)", state_->timeout_seconds);
  // Wait under the timeout first: a copy into pageable memory would block on a missing peer for ever.
  state_->block_until_idle("host_all_gather", state_->timeout_seconds);
  SPATTN_CUDA_CHECK(cudaMemcpyAsync(receive, gathered, total, cudaMemcpyDeviceToHost, state_->stream));
  SPATTN_CUDA_CHECK(cudaStreamSynchronize(state_->stream));
}

}  // namespace spattn
