#include "spattn/mpi_communicator.hpp"

#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdlib>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "comm/family_health.hpp"
#include "comm/fault_injection.hpp"
#include "comm/timeout_message.hpp"
#include "spattn/communication_timeout.hpp"
#include "spattn/error.hpp"

namespace spattn {

namespace {

using Clock = std::chrono::steady_clock;

void check_mpi(int status, const char* operation) {
  if (status == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(status, text, &length);
  SPATTN_FAIL("MPI " << operation << " failed: " << std::string(text, static_cast<std::size_t>(length)));
}

int checked_count(std::size_t bytes) {
  SPATTN_CHECK(bytes <= static_cast<std::size_t>(INT_MAX),
               "one MPI message is at most " << INT_MAX << " bytes, got " << bytes);
  return static_cast<int>(bytes);
}

// What one request of a transfer waits for, to say so when it does not come.
struct RequestRole {
  enum class Kind { receive, send, collective };
  Kind kind = Kind::collective;
  int peer = -1;  // point-to-point only
};

// MPI requests of one started batch or collective, with what each is for.
class MpiPendingTransfer final : public PendingTransfer {
 public:
  const char* operation = "";
  std::vector<MPI_Request> requests;
  std::vector<RequestRole> roles;
  double timeout_seconds = kDefaultCommunicationTimeoutSeconds;
  std::shared_ptr<const FamilyHealth> communicator_health;  // a failure: its peers were given up on

  ~MpiPendingTransfer() override;
};

// Polls `requests` until all complete or `timeout_seconds` pass; true when they completed.
// Polling (not MPI_Waitall) is what lets a rank give up on a peer that never comes.
bool complete_within(std::vector<MPI_Request>& requests, double timeout_seconds, const char* operation) {
  const Clock::time_point deadline =
      Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout_seconds));
  for (;;) {
    int done = 0;
    check_mpi(MPI_Testall(static_cast<int>(requests.size()), requests.data(), &done, MPI_STATUSES_IGNORE),
              operation);
    if (done) return true;
    if (Clock::now() > deadline) return false;
    std::this_thread::yield();  // ranks may share cores (oversubscribed): let the peer run
  }
}

// After a timeout: point-to-point requests are cancelled (receives) or handed back to MPI
// (sends) so that nothing writes into the caller's buffers later. A nonblocking collective can be
// neither cancelled nor freed (MPI forbids both), so its request is left behind with the
// communicator, which is never used again.
void abandon(std::vector<MPI_Request>& requests, const std::vector<RequestRole>& roles) {
  for (std::size_t i = 0; i < requests.size(); ++i) {
    if (requests[i] == MPI_REQUEST_NULL || roles[i].kind == RequestRole::Kind::collective) continue;
    if (roles[i].kind == RequestRole::Kind::receive) MPI_Cancel(&requests[i]);
    MPI_Request_free(&requests[i]);
  }
  requests.clear();
}

// "2 sends to rank 1, a receive from rank 2" (or the collective) for the requests still pending.
std::string pending_description(std::vector<MPI_Request>& requests, const std::vector<RequestRole>& roles,
                                const char* operation, int ranks) {
  struct Waiting {
    RequestRole::Kind kind;
    int peer;
    int count;
  };
  std::vector<Waiting> waiting;  // in first-seen order
  for (std::size_t i = 0; i < requests.size(); ++i) {
    int done = 0;
    if (requests[i] != MPI_REQUEST_NULL) MPI_Request_get_status(requests[i], &done, MPI_STATUS_IGNORE);
    if (done) continue;
    auto same = std::find_if(waiting.begin(), waiting.end(), [&](const Waiting& entry) {
      return entry.kind == roles[i].kind && entry.peer == roles[i].peer;
    });
    if (same == waiting.end()) waiting.push_back({roles[i].kind, roles[i].peer, 1});
    else ++same->count;
  }
  std::ostringstream text;
  for (std::size_t i = 0; i < waiting.size(); ++i) {
    const Waiting& entry = waiting[i];
    text << (i ? ", " : "");
    if (entry.kind == RequestRole::Kind::collective) {
      text << operation << " over " << ranks << " ranks";
      continue;
    }
    const bool receive = entry.kind == RequestRole::Kind::receive;
    if (entry.count == 1) text << (receive ? "a receive from" : "a send to");
    else text << entry.count << (receive ? " receives from" : " sends to");
    text << " rank " << entry.peer;
  }
  return text.str();
}

MpiPendingTransfer::~MpiPendingTransfer() {
  // A transfer dropped without wait() (an exception unwound past it) must not leave MPI writing
  // into freed buffers: complete it, or abandon it when its peers do not come.
  if (requests.empty()) return;
  try {
    // Once its communicator gave up on a peer, waiting again would only add a timeout per transfer.
    if (communicator_health->failure().empty() && complete_within(requests, timeout_seconds, operation)) return;
  } catch (const Error&) {  // an MPI error: nothing more to complete
  }
  abandon(requests, roles);
}

// spattn's point-to-point traffic uses one tag; order between two ranks is MPI's FIFO order.
constexpr int kTransferTag = 7301;

}  // namespace

struct MpiCommunicator::State {
  MPI_Comm comm = MPI_COMM_NULL;
  int rank = 0;
  int size = 1;
  int process_rank = 0;  // in MPI_COMM_WORLD: the rank SPATTN_FAULT names
  double timeout_seconds = kDefaultCommunicationTimeoutSeconds;
  std::shared_ptr<FaultPlan> fault;  // shared with the communicators split from this one
  // Why this communicator cannot be used again, after a timeout; shared with the communicators
  // split from it (and theirs).
  std::shared_ptr<FamilyHealth> health = std::make_shared<FamilyHealth>();

  void check_usable() const {
    health->check([](const std::string& failure) {
      return "this MPI communicator (or one split from the same one) gave up on its peers earlier and cannot be "
             "used again (" +
             failure + "); make a new one";
    });
  }

  // A new transfer of `operation` with this communicator's timeout, counted for SPATTN_FAULT (which
  // is carried out here when it is this one).
  std::unique_ptr<MpiPendingTransfer> begin_transfer(const char* operation) {
    check_usable();
    before_transfer(fault.get(), process_rank);
    auto pending = std::make_unique<MpiPendingTransfer>();
    pending->operation = operation;
    pending->timeout_seconds = timeout_seconds;
    pending->communicator_health = health;
    return pending;
  }

  void complete(std::vector<MPI_Request>& requests, const std::vector<RequestRole>& roles, const char* operation) {
    if (requests.empty() || complete_within(requests, timeout_seconds, operation)) {
      requests.clear();
      return;
    }
    const std::string message = timeout_message(describe_rank(rank, size), timeout_seconds,
                                                pending_description(requests, roles, operation, size));
    abandon(requests, roles);
    health->record(message, FailureKind::timeout);
    detail::throw_timeout_error(message);
  }

  void share_settings_with(State& child) const {
    child.timeout_seconds = timeout_seconds;
    child.fault = fault;
    child.health = health;
  }
};

namespace {

void ensure_mpi_initialized() {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (initialized) return;
  int provided = 0;
  check_mpi(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided), "MPI_Init_thread");
  // We initialized MPI, so we finalize it at exit (after every communicator is gone). Not after
  // giving up on a peer: MPI_Finalize waits for every process of the job (Open MPI fences), so it
  // would wait for that peer too; the process ends without it and the launcher ends the job.
  std::atexit([] {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized && !process_gave_up_on_a_peer()) MPI_Finalize();
  });
}

}  // namespace

MpiCommunicator::MpiCommunicator() : MpiCommunicator(nullptr) {}

MpiCommunicator::MpiCommunicator(void* mpi_comm_handle) : state_(std::make_unique<State>()) {
  state_->timeout_seconds = communication_timeout_seconds();
  state_->fault = fault_plan_from_environment();
  ensure_mpi_initialized();
  MPI_Comm parent = mpi_comm_handle ? *static_cast<MPI_Comm*>(mpi_comm_handle) : MPI_COMM_WORLD;
  check_mpi(MPI_Comm_dup(parent, &state_->comm), "MPI_Comm_dup");
  // Errors come back as return codes so that they become spattn::Error, not an abort.
  MPI_Comm_set_errhandler(state_->comm, MPI_ERRORS_RETURN);
  MPI_Comm_rank(state_->comm, &state_->rank);
  MPI_Comm_size(state_->comm, &state_->size);
  MPI_Comm_rank(MPI_COMM_WORLD, &state_->process_rank);
}

MpiCommunicator::~MpiCommunicator() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  // A communicator that gave up may still have a collective in flight: freeing it could wait.
  if (!finalized && state_->comm != MPI_COMM_NULL && state_->health->failure().empty()) MPI_Comm_free(&state_->comm);
}

int MpiCommunicator::rank() const { return state_->rank; }
int MpiCommunicator::size() const { return state_->size; }

double MpiCommunicator::timeout_seconds() const { return state_->timeout_seconds; }

void MpiCommunicator::set_timeout_seconds(double seconds) {
  check_timeout_seconds(seconds, "timeout_seconds of the MPI communicator");
  state_->timeout_seconds = seconds;
}

std::unique_ptr<PendingTransfer> MpiCommunicator::start(const TransferBatch& batch) {
  auto pending = state_->begin_transfer("a batch of sends and receives");
  pending->requests.reserve(batch.sends.size() + batch.receives.size());
  // Receives are posted first so that matching sends find them waiting.
  for (const PeerBuffer& receive : batch.receives) {
    SPATTN_CHECK(receive.peer >= 0 && receive.peer < state_->size,
                 "receive from rank " << receive.peer << "; ranks are 0.." << state_->size - 1);
    MPI_Request request;
    check_mpi(MPI_Irecv(receive.data, checked_count(receive.bytes), MPI_BYTE, receive.peer, kTransferTag,
                        state_->comm, &request),
              "MPI_Irecv");
    pending->requests.push_back(request);
    pending->roles.push_back({RequestRole::Kind::receive, receive.peer});
  }
  for (const PeerBuffer& send : batch.sends) {
    SPATTN_CHECK(send.peer >= 0 && send.peer < state_->size,
                 "send to rank " << send.peer << "; ranks are 0.." << state_->size - 1);
    MPI_Request request;
    check_mpi(MPI_Isend(send.data, checked_count(send.bytes), MPI_BYTE, send.peer, kTransferTag, state_->comm,
                        &request),
              "MPI_Isend");
    pending->requests.push_back(request);
    pending->roles.push_back({RequestRole::Kind::send, send.peer});
  }
  return pending;
}

namespace {

// Starts one nonblocking collective through `start` (which fills the request) as `pending`.
template <typename Start>
std::unique_ptr<MpiPendingTransfer> start_collective(std::unique_ptr<MpiPendingTransfer> pending, Start&& start) {
  MPI_Request request;
  check_mpi(start(&request), pending->operation);
  pending->requests.push_back(request);
  pending->roles.push_back({RequestRole::Kind::collective, -1});
  return pending;
}

}  // namespace

std::unique_ptr<PendingTransfer> MpiCommunicator::start_all_to_all(const void* send, void* receive,
                                                                   std::size_t bytes_per_rank) {
  auto pending = state_->begin_transfer("MPI_Ialltoall");
  const int count = checked_count(bytes_per_rank);
  return start_collective(std::move(pending), [&](MPI_Request* request) {
    return MPI_Ialltoall(send, count, MPI_BYTE, receive, count, MPI_BYTE, state_->comm, request);
  });
}

std::unique_ptr<PendingTransfer> MpiCommunicator::start_all_gather(const void* send, void* receive,
                                                                   std::size_t bytes_per_rank) {
  auto pending = state_->begin_transfer("MPI_Iallgather");
  const int count = checked_count(bytes_per_rank);
  return start_collective(std::move(pending), [&](MPI_Request* request) {
    return MPI_Iallgather(send, count, MPI_BYTE, receive, count, MPI_BYTE, state_->comm, request);
  });
}

std::unique_ptr<PendingTransfer> MpiCommunicator::start_reduce_scatter_sum(const float* send, float* receive,
                                                                          std::size_t floats_per_rank) {
  auto pending = state_->begin_transfer("MPI_Ireduce_scatter_block");
  const int count = checked_count(floats_per_rank * sizeof(float)) / static_cast<int>(sizeof(float));
  return start_collective(std::move(pending), [&](MPI_Request* request) {
    return MPI_Ireduce_scatter_block(send, receive, count, MPI_FLOAT, MPI_SUM, state_->comm, request);
  });
}

std::unique_ptr<Communicator> MpiCommunicator::split(int color, int key) {
  state_->check_usable();
  MPI_Comm part = MPI_COMM_NULL;
  check_mpi(MPI_Comm_split(state_->comm, color, key, &part), "MPI_Comm_split");
  auto communicator = std::make_unique<MpiCommunicator>(&part);
  // The new communicator holds its own duplicate; this handle is ours to free.
  MPI_Comm_free(&part);
  state_->share_settings_with(*communicator->state_);
  return communicator;
}

std::unique_ptr<MpiCommunicator> MpiCommunicator::over_ranks(const std::vector<int>& ranks) {
  state_->check_usable();
  std::vector<bool> listed(static_cast<std::size_t>(state_->size), false);
  for (const int rank : ranks) {
    SPATTN_CHECK(rank >= 0 && rank < state_->size,
                 "rank " << rank << " in the list is not a rank of this communicator; allowed: 0 to " << state_->size - 1);
    SPATTN_CHECK(!listed[static_cast<std::size_t>(rank)], "rank " << rank << " is listed twice; each rank at most once");
    listed[static_cast<std::size_t>(rank)] = true;
  }
  SPATTN_CHECK(listed[static_cast<std::size_t>(state_->rank)],
               "this rank (" << state_->rank << ") is not in the list of " << ranks.size()
                             << " ranks: only the listed ranks call over_ranks");
  MPI_Group all = MPI_GROUP_NULL;
  MPI_Group chosen = MPI_GROUP_NULL;
  MPI_Comm part = MPI_COMM_NULL;
  check_mpi(MPI_Comm_group(state_->comm, &all), "MPI_Comm_group");
  int status = MPI_Group_incl(all, static_cast<int>(ranks.size()), ranks.data(), &chosen);
  if (status == MPI_SUCCESS) status = MPI_Comm_create_group(state_->comm, chosen, kTransferTag, &part);
  MPI_Group_free(&all);
  if (chosen != MPI_GROUP_NULL) MPI_Group_free(&chosen);
  check_mpi(status, "MPI_Comm_create_group");
  auto communicator = std::make_unique<MpiCommunicator>(&part);
  // The new communicator holds its own duplicate; this handle is ours to free.
  MPI_Comm_free(&part);
  state_->share_settings_with(*communicator->state_);
  return communicator;
}

void MpiCommunicator::wait(PendingTransfer& transfer) {
  state_->check_usable();
  auto& pending = dynamic_cast<MpiPendingTransfer&>(transfer);
  state_->complete(pending.requests, pending.roles, pending.operation);
}

void MpiCommunicator::barrier() {
  state_->check_usable();
  std::vector<MPI_Request> requests(1);
  check_mpi(MPI_Ibarrier(state_->comm, requests.data()), "MPI_Ibarrier");
  state_->complete(requests, {{RequestRole::Kind::collective, -1}}, "MPI_Ibarrier");
}

void MpiCommunicator::host_all_gather(const void* send, void* receive, std::size_t bytes_per_rank) {
  state_->check_usable();
  const int count = checked_count(bytes_per_rank);
  std::vector<MPI_Request> requests(1);
  check_mpi(MPI_Iallgather(send, count, MPI_BYTE, receive, count, MPI_BYTE, state_->comm, requests.data()),
            "MPI_Iallgather");
  // The agreement that starts every call: a rank that never arrives is reported here.
  state_->complete(requests, {{RequestRole::Kind::collective, -1}}, "the agreement of ranks (MPI_Iallgather)");
}

}  // namespace spattn
