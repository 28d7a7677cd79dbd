#include "spattn/mpi_communicator.hpp"

#include <mpi.h>

#include <climits>
#include <vector>

#include "spattn/error.hpp"

namespace spattn {

namespace {

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

// MPI requests of one started batch or collective.
class MpiPendingTransfer final : public PendingTransfer {
 public:
  std::vector<MPI_Request> requests;
  ~MpiPendingTransfer() override {
    // A transfer dropped without wait() (an exception unwound past it) must not leave MPI
    // writing into freed buffers: complete it.
    if (!requests.empty()) MPI_Waitall(static_cast<int>(requests.size()), requests.data(), MPI_STATUSES_IGNORE);
  }
};

// spattn's point-to-point traffic uses one tag; order between two ranks is MPI's FIFO order.
constexpr int kTransferTag = 7301;

}  // namespace

struct MpiCommunicator::State {
  MPI_Comm comm = MPI_COMM_NULL;
  int rank = 0;
  int size = 1;
};

namespace {

void ensure_mpi_initialized() {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (initialized) return;
  int provided = 0;
  check_mpi(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided), "MPI_Init_thread");
  // We initialized MPI, so we finalize it at exit (after every communicator is gone).
  std::atexit([] {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) MPI_Finalize();
  });
}

}  // namespace

MpiCommunicator::MpiCommunicator() : MpiCommunicator(nullptr) {}

MpiCommunicator::MpiCommunicator(void* mpi_comm_handle) : state_(std::make_unique<State>()) {
  ensure_mpi_initialized();
  MPI_Comm parent = mpi_comm_handle ? *static_cast<MPI_Comm*>(mpi_comm_handle) : MPI_COMM_WORLD;
  check_mpi(MPI_Comm_dup(parent, &state_->comm), "MPI_Comm_dup");
  // Errors come back as return codes so that they become spattn::Error, not an abort.
  MPI_Comm_set_errhandler(state_->comm, MPI_ERRORS_RETURN);
  MPI_Comm_rank(state_->comm, &state_->rank);
  MPI_Comm_size(state_->comm, &state_->size);
}

MpiCommunicator::~MpiCommunicator() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized && state_->comm != MPI_COMM_NULL) MPI_Comm_free(&state_->comm);
}

int MpiCommunicator::rank() const { return state_->rank; }
int MpiCommunicator::size() const { return state_->size; }

std::unique_ptr<PendingTransfer> MpiCommunicator::start(const TransferBatch& batch) {
  auto pending = std::make_unique<MpiPendingTransfer>();
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
  }
  for (const PeerBuffer& send : batch.sends) {
    SPATTN_CHECK(send.peer >= 0 && send.peer < state_->size,
                 "send to rank " << send.peer << "; ranks are 0.." << state_->size - 1);
    MPI_Request request;
    check_mpi(MPI_Isend(send.data, checked_count(send.bytes), MPI_BYTE, send.peer, kTransferTag, state_->comm,
                        &request),
              "MPI_Isend");
    pending->requests.push_back(request);
  }
  return pending;
}

namespace {

// Starts one nonblocking collective through `start` (which fills the request) as a transfer.
template <typename Start>
std::unique_ptr<PendingTransfer> start_collective(const char* operation, Start&& start) {
  auto pending = std::make_unique<MpiPendingTransfer>();
  MPI_Request request;
  check_mpi(start(&request), operation);
  pending->requests.push_back(request);
  return pending;
}

}  // namespace

std::unique_ptr<PendingTransfer> MpiCommunicator::start_all_to_all(const void* send, void* receive,
                                                                   std::size_t bytes_per_rank) {
  const int count = checked_count(bytes_per_rank);
  return start_collective("MPI_Ialltoall", [&](MPI_Request* request) {
    return MPI_Ialltoall(send, count, MPI_BYTE, receive, count, MPI_BYTE, state_->comm, request);
  });
}

std::unique_ptr<PendingTransfer> MpiCommunicator::start_all_gather(const void* send, void* receive,
                                                                   std::size_t bytes_per_rank) {
  const int count = checked_count(bytes_per_rank);
  return start_collective("MPI_Iallgather", [&](MPI_Request* request) {
    return MPI_Iallgather(send, count, MPI_BYTE, receive, count, MPI_BYTE, state_->comm, request);
  });
}

std::unique_ptr<PendingTransfer> MpiCommunicator::start_reduce_scatter_sum(const float* send, float* receive,
                                                                          std::size_t floats_per_rank) {
  const int count = checked_count(floats_per_rank * sizeof(float)) / static_cast<int>(sizeof(float));
  return start_collective("MPI_Ireduce_scatter_block", [&](MPI_Request* request) {
    return MPI_Ireduce_scatter_block(send, receive, count, MPI_FLOAT, MPI_SUM, state_->comm, request);
  });
}

std::unique_ptr<Communicator> MpiCommunicator::split(int color, int key) {
  MPI_Comm part = MPI_COMM_NULL;
  check_mpi(MPI_Comm_split(state_->comm, color, key, &part), "MPI_Comm_split");
  auto communicator = std::make_unique<MpiCommunicator>(&part);
  // The new communicator holds its own duplicate; this handle is ours to free.
  MPI_Comm_free(&part);
  return communicator;
}

std::unique_ptr<MpiCommunicator> MpiCommunicator::over_ranks(const std::vector<int>& ranks) {
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
  return communicator;
}

void MpiCommunicator::wait(PendingTransfer& transfer) {
  auto& pending = dynamic_cast<MpiPendingTransfer&>(transfer);
  std::vector<MPI_Request> requests;
  requests.swap(pending.requests);
  if (requests.empty()) return;
  check_mpi(MPI_Waitall(static_cast<int>(requests.size()), requests.data(), MPI_STATUSES_IGNORE), "MPI_Waitall");
}

void MpiCommunicator::barrier() { check_mpi(MPI_Barrier(state_->comm), "MPI_Barrier"); }

void MpiCommunicator::host_all_gather(const void* send, void* receive, std::size_t bytes_per_rank) {
  const int count = checked_count(bytes_per_rank);
  check_mpi(MPI_Allgather(send, count, MPI_BYTE, receive, count, MPI_BYTE, state_->comm), "MPI_Allgather");
}

}  // namespace spattn
