#include "spattn/oneccl_communicator.hpp"

#include <oneapi/ccl.hpp>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "comm/family_health.hpp"
#include "comm/fault_injection.hpp"
#include "comm/rendezvous.hpp"
#include "comm/timeout_message.hpp"
#include "spattn/communication_timeout.hpp"
#include "spattn/error.hpp"
#include "spattn/launch_environment.hpp"

namespace spattn {

namespace {

using Clock = std::chrono::steady_clock;

// oneCCL reports failures by exceptions of its own (ccl::exception, a std::exception).
template <class Call>
auto checked(const char* operation, Call&& call) {
  try {
    return call();
  } catch (const Error&) {
    throw;
  } catch (const std::exception& failure) {
    SPATTN_FAIL("oneCCL " << operation << " failed: " << failure.what());
  }
}

void initialize_oneccl_once() {
  static std::once_flag once;
  std::call_once(once, [] {
    // Before oneCCL loads libfabric (its transport): Debian's libfabric links libinfinipath,
    // whose handler of fatal signals turns a process's exit after a timeout into a hang unless
    // IPATH_NO_BACKTRACE is set; and oneCCL's warnings about its own environment stay quiet
    // (spattn reports what fails). Values the user set are kept.
    setenv("IPATH_NO_BACKTRACE", "1", 0);
    setenv("CCL_LOG_LEVEL", "error", 0);
    checked("init", [] { ccl::init(); });
  });
}

// One message of a batch. oneCCL does not keep the order of messages between two ranks (two
// sends to one peer in flight at once may meet the peer's receives swapped), so each rank keeps,
// per peer and direction, a queue of its messages and lets only the first be in flight: the n-th
// send from A to B then meets B's n-th receive from A, the order MPI guarantees.
struct Message {
  void* data = nullptr;
  std::size_t bytes = 0;
  int peer = -1;
  bool receive = false;
  bool done = false;
};

// The messages to or from one peer not yet completed, in the order they were started.
struct PeerQueue {
  std::deque<std::shared_ptr<Message>> messages;
  ccl::event in_flight;  // of the first message, once posted
  bool posted = false;
};

// A oneCCL communicator of `size` ranks, this one `rank`, whose key-value store rank 0 opens and
// announces through `announce` (an all-gather of the 256-byte address over the same ranks).
template <class Announce>
ccl::communicator create_communicator(int size, int rank, Announce&& announce) {
  initialize_oneccl_once();
  ccl::kvs::address_type address{};
  ccl::shared_ptr_class<ccl::kvs> store;
  if (rank == 0) {
    store = checked("create_main_kvs", [] { return ccl::create_main_kvs(); });
    address = store->get_address();
  }
  address = announce(address);
  if (rank != 0) store = checked("create_kvs", [&] { return ccl::create_kvs(address); });
  return checked("create_communicator", [&] { return ccl::create_communicator(size, rank, store); });
}

}  // namespace

struct OnecclCommunicator::State {
  // On the heap and never freed after a failure: a oneCCL communicator with transfers in flight
  // must neither be destroyed (it would wait for them) nor let them write into freed memory.
  ccl::communicator* communicator = nullptr;
  int rank = 0;
  int size = 1;
  int process_rank = 0;  // of the bootstrap communicator that made the first one: the rank SPATTN_FAULT names
  double timeout_seconds = kDefaultCommunicationTimeoutSeconds;
  std::shared_ptr<FaultPlan> fault;  // shared with the communicators split from this one
  // Why this communicator cannot be used again, after a timeout; shared with those split from it.
  std::shared_ptr<FamilyHealth> health = std::make_shared<FamilyHealth>();
  std::vector<PeerQueue> sends, receives;  // by peer
  // Events given up on, kept alive with their communicator (destroying them would wait).
  std::vector<ccl::event> abandoned;

  void make_queues() {
    sends.resize(static_cast<std::size_t>(size));
    receives.resize(static_cast<std::size_t>(size));
  }

  void check_usable() const {
    health->check([](const std::string& failure) {
      return "this oneCCL communicator (or one split from the same one) gave up on its peers earlier and cannot "
             "be used again (" +
             failure + "); make a new one";
    });
  }

  void post_first(PeerQueue& queue) {
    Message& message = *queue.messages.front();
    queue.in_flight = message.receive ? checked("recv", [&] {
      return ccl::recv(message.data, message.bytes, ccl::datatype::int8, message.peer, *communicator);
    })
                                      : checked("send", [&] {
                                          return ccl::send(message.data, message.bytes, ccl::datatype::int8,
                                                           message.peer, *communicator);
                                        });
    queue.posted = true;
  }

  void enqueue(const std::shared_ptr<Message>& message) {
    PeerQueue& queue = (message->receive ? receives : sends)[static_cast<std::size_t>(message->peer)];
    queue.messages.push_back(message);
    if (queue.messages.size() == 1) post_first(queue);
  }

  // Marks what oneCCL has finished as done and posts each queue's next message.
  void progress() {
    for (std::vector<PeerQueue>* direction : {&sends, &receives})
      for (PeerQueue& queue : *direction)
        while (queue.posted && checked("test", [&] { return queue.in_flight.test(); })) {
          queue.messages.front()->done = true;
          queue.messages.pop_front();
          queue.posted = false;
          if (!queue.messages.empty()) post_first(queue);
        }
  }

  // After giving up: nothing queued is posted any more, and what is in flight is kept alive.
  void abandon_queues() {
    for (std::vector<PeerQueue>* direction : {&sends, &receives})
      for (PeerQueue& queue : *direction) {
        if (queue.posted) abandoned.push_back(std::move(queue.in_flight));
        queue = PeerQueue{};
      }
  }
};

namespace {

// The messages and collective of one started batch or collective.
class OnecclPendingTransfer final : public PendingTransfer {
 public:
  OnecclCommunicator::State* state = nullptr;  // of the communicator that started it, which outlives it
  const char* operation = "";
  std::vector<std::shared_ptr<Message>> messages;
  std::vector<ccl::event> collective;  // at most one

  // Completes everything within the timeout; true when it did.
  bool complete_within(double timeout_seconds) {
    const Clock::time_point deadline =
        Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout_seconds));
    for (;;) {
      state->progress();
      if (!collective.empty() && checked(operation, [&] { return collective.front().test(); })) collective.clear();
      const bool messages_done =
          std::all_of(messages.begin(), messages.end(), [](const std::shared_ptr<Message>& m) { return m->done; });
      if (messages_done && collective.empty()) {
        messages.clear();
        return true;
      }
      if (Clock::now() > deadline) return false;
      std::this_thread::yield();  // ranks may share cores (oversubscribed): let the peer run
    }
  }

  // "2 sends to rank 1, a receive from rank 2" (or the collective) for what is still awaited.
  std::string still_awaited() const {
    struct Waiting {
      bool receive;
      int peer;
      int count;
    };
    std::vector<Waiting> waiting;  // in first-seen order
    for (const std::shared_ptr<Message>& message : messages) {
      if (message->done) continue;
      auto same = std::find_if(waiting.begin(), waiting.end(), [&](const Waiting& entry) {
        return entry.receive == message->receive && entry.peer == message->peer;
      });
      if (same == waiting.end())
        waiting.push_back({message->receive, message->peer, 1});
      else
        ++same->count;
    }
    std::ostringstream text;
    if (!collective.empty()) text << operation << " over " << state->size << " ranks";
    for (std::size_t i = 0; i < waiting.size(); ++i) {
      const Waiting& entry = waiting[i];
      text << (i || !collective.empty() ? ", " : "");
      if (entry.count == 1)
        text << (entry.receive ? "a receive from" : "a send to");
      else
        text << entry.count << (entry.receive ? " receives from" : " sends to");
      text << " rank " << entry.peer;
    }
    return text.str();
  }

  // Gives up: the communicator cannot be used again, and nothing of it writes into the caller's
  // buffers later (queued messages are dropped, those in flight kept alive).
  void give_up(const std::string& failure) {
    state->health->record(failure, FailureKind::timeout);
    for (ccl::event& event : collective) state->abandoned.push_back(std::move(event));
    collective.clear();
    messages.clear();
    state->abandon_queues();
  }

  ~OnecclPendingTransfer() override {
    // A transfer dropped without wait() (an exception unwound past it) must not leave oneCCL
    // writing into freed buffers: complete it, or give up on its peers.
    if (messages.empty() && collective.empty()) return;
    try {
      if (state->health->failure().empty() && complete_within(state->timeout_seconds)) return;
    } catch (const Error&) {  // a oneCCL error: nothing more to complete
    }
    give_up("a transfer was dropped before it completed, and its peers did not come");
  }
};

}  // namespace

namespace {

// Which operations SPATTN_FAULT counts: the data plane's transfers, not the control plane's
// agreement and barriers (as with MPI).
enum class Plane { data, control };

// A transfer of `operation` on `state`'s communicator; on the data plane counted for SPATTN_FAULT
// (which is carried out here when it is this one).
std::unique_ptr<OnecclPendingTransfer> begin_transfer(OnecclCommunicator::State& state, const char* operation,
                                                      Plane plane = Plane::data) {
  state.check_usable();
  if (plane == Plane::data) before_transfer(state.fault.get(), state.process_rank);
  auto pending = std::make_unique<OnecclPendingTransfer>();
  pending->state = &state;
  pending->operation = operation;
  return pending;
}

// Waits for `pending` within the timeout, or gives up on its peers and throws the timeout error.
void complete(OnecclPendingTransfer& pending) {
  OnecclCommunicator::State& state = *pending.state;
  if (pending.complete_within(state.timeout_seconds)) return;
  const std::string message =
      timeout_message(describe_rank(state.rank, state.size), state.timeout_seconds, pending.still_awaited());
  pending.give_up(message);
  detail::throw_timeout_error(message);
}

// A collective, started by `issue` (which returns its event) once the communicator is known usable
// and SPATTN_FAULT has had its turn, as a pending transfer.
template <class Issue>
std::unique_ptr<OnecclPendingTransfer> collective(OnecclCommunicator::State& state, const char* operation,
                                                  Issue&& issue, Plane plane = Plane::data) {
  auto pending = begin_transfer(state, operation, plane);
  pending->collective.push_back(checked(operation, issue));
  return pending;
}

}  // namespace

OnecclCommunicator::OnecclCommunicator(Communicator& bootstrap)
    : OnecclCommunicator(bootstrap.rank(), bootstrap.size(), [&](const std::string& mine) {
        std::vector<char> everyone(mine.size() * static_cast<std::size_t>(bootstrap.size()));
        bootstrap.host_all_gather(mine.data(), everyone.data(), mine.size());
        return std::string(everyone.data(), mine.size());
      }) {}

OnecclCommunicator::OnecclCommunicator(int rank, int size, const AddressShare& share)
    : state_(std::make_unique<State>()) {
  SPATTN_CHECK(size >= 1, "a oneCCL communicator needs size >= 1, got " << size);
  SPATTN_CHECK(rank >= 0 && rank < size, "a oneCCL communicator of " << size << " ranks takes rank 0 to " << size - 1
                                                                      << ", got " << rank);
  state_->timeout_seconds = communication_timeout_seconds();
  state_->fault = fault_plan_from_environment();
  state_->rank = rank;
  state_->size = size;
  state_->process_rank = rank;
  ccl::communicator made = create_communicator(size, rank, [&](const ccl::kvs::address_type& mine) {
    const std::string shared = share(std::string(mine.data(), mine.size()));
    SPATTN_CHECK(shared.size() == mine.size(), "rank 0's key-value store address came as "
                                                   << shared.size() << " bytes; oneCCL's is " << mine.size());
    ccl::kvs::address_type address{};
    std::copy_n(shared.begin(), address.size(), address.begin());
    return address;
  });
  state_->communicator = new ccl::communicator(std::move(made));
  state_->make_queues();
}

std::unique_ptr<OnecclCommunicator> OnecclCommunicator::from_environment() {
  const LaunchEnvironment launch = launch_environment();
  // The rendezvous, bounded by the timeout, runs before oneCCL connects anything: once it returns,
  // every rank has come and rank 0's store listens, so oneCCL's own connection to it succeeds at
  // once. oneCCL bounds that connection only by its CCL_KVS_CONNECTION_TIMEOUT, after which it may
  // end the process, and its communicator's creation not at all: a rank that dies between the
  // rendezvous and the end of create_communicator can still leave the others waiting.
  const double timeout_seconds = communication_timeout_seconds();
  return std::make_unique<OnecclCommunicator>(launch.rank, launch.world_size, [&](const std::string& mine) {
    return share_from_rank_zero(launch, mine, timeout_seconds);
  });
}

OnecclCommunicator::OnecclCommunicator(std::unique_ptr<State> state) : state_(std::move(state)) {}

OnecclCommunicator::~OnecclCommunicator() {
  // After giving up on a peer, nothing of oneCCL's is destroyed: its events and communicator would
  // wait for the transfers still in flight, which never end.
  if (!state_->health->failure().empty()) {
    state_.release();
    return;
  }
  delete state_->communicator;
}

int OnecclCommunicator::rank() const { return state_->rank; }
int OnecclCommunicator::size() const { return state_->size; }

double OnecclCommunicator::timeout_seconds() const { return state_->timeout_seconds; }

void OnecclCommunicator::set_timeout_seconds(double seconds) {
  check_timeout_seconds(seconds, "timeout_seconds of the oneCCL communicator");
  state_->timeout_seconds = seconds;
}

std::unique_ptr<PendingTransfer> OnecclCommunicator::start(const TransferBatch& batch) {
  auto pending = begin_transfer(*state_, "a batch of sends and receives");
  for (const PeerBuffer& buffer : batch.receives)
    SPATTN_CHECK(buffer.peer >= 0 && buffer.peer < state_->size,
                 "receive from rank " << buffer.peer << "; ranks are 0.." << state_->size - 1);
  for (const PeerBuffer& buffer : batch.sends)
    SPATTN_CHECK(buffer.peer >= 0 && buffer.peer < state_->size,
                 "send to rank " << buffer.peer << "; ranks are 0.." << state_->size - 1);
  // Transfers to this rank itself are copies, matched in order (as MPI matches them); empty ones
  // move nothing and are left out on both sides alike.
  std::vector<const PeerBuffer*> to_self, from_self;
  const auto queue = [&](const PeerBuffer& buffer, bool receive) {
    if (buffer.bytes == 0) return;
    if (buffer.peer == state_->rank) {
      (receive ? from_self : to_self).push_back(&buffer);
      return;
    }
    auto message = std::make_shared<Message>();
    *message = {buffer.data, buffer.bytes, buffer.peer, receive, false};
    pending->messages.push_back(message);
    state_->enqueue(message);
  };
  for (const PeerBuffer& receive : batch.receives) queue(receive, true);
  for (const PeerBuffer& send : batch.sends) queue(send, false);
  SPATTN_CHECK(to_self.size() == from_self.size(), "a batch sends " << to_self.size() << " buffers to this rank itself "
                                                                    << "but receives " << from_self.size());
  for (std::size_t i = 0; i < to_self.size(); ++i) {
    SPATTN_CHECK(to_self[i]->bytes == from_self[i]->bytes,
                 "send " << i << " to this rank itself has " << to_self[i]->bytes << " bytes, its receive "
                         << from_self[i]->bytes);
    std::memcpy(from_self[i]->data, to_self[i]->data, to_self[i]->bytes);
  }
  return pending;
}

std::unique_ptr<PendingTransfer> OnecclCommunicator::start_all_to_all(const void* send, void* receive,
                                                                      std::size_t bytes_per_rank) {
  return collective(*state_, "ccl::alltoall", [&] {
    return ccl::alltoall(send, receive, bytes_per_rank, ccl::datatype::int8, *state_->communicator);
  });
}

std::unique_ptr<PendingTransfer> OnecclCommunicator::start_all_gather(const void* send, void* receive,
                                                                      std::size_t bytes_per_rank) {
  return collective(*state_, "ccl::allgather", [&] {
    return ccl::allgather(send, receive, bytes_per_rank, ccl::datatype::int8, *state_->communicator);
  });
}

std::unique_ptr<PendingTransfer> OnecclCommunicator::start_reduce_scatter_sum(const float* send, float* receive,
                                                                              std::size_t floats_per_rank) {
  return collective(*state_, "ccl::reduce_scatter", [&] {
    return ccl::reduce_scatter(send, receive, floats_per_rank, ccl::datatype::float32, ccl::reduction::sum,
                               *state_->communicator);
  });
}

void OnecclCommunicator::wait(PendingTransfer& transfer) {
  state_->check_usable();
  complete(dynamic_cast<OnecclPendingTransfer&>(transfer));
}

std::unique_ptr<Communicator> OnecclCommunicator::split(int color, int key) {
  state_->check_usable();
  struct Member {
    int color;
    int key;
    int rank;
  };
  const Member mine{color, key, state_->rank};
  std::vector<Member> everyone(static_cast<std::size_t>(state_->size));
  host_all_gather(&mine, everyone.data(), sizeof(Member));
  std::vector<Member> group;
  for (const Member& member : everyone)
    if (member.color == color) group.push_back(member);
  std::sort(group.begin(), group.end(),
            [](const Member& a, const Member& b) { return std::tie(a.key, a.rank) < std::tie(b.key, b.rank); });
  const auto me = std::find_if(group.begin(), group.end(), [&](const Member& m) { return m.rank == state_->rank; });
  auto state = std::make_unique<State>();
  state->rank = static_cast<int>(me - group.begin());
  state->size = static_cast<int>(group.size());
  state->process_rank = state_->process_rank;
  state->timeout_seconds = state_->timeout_seconds;
  state->fault = state_->fault;
  state->health = state_->health;
  // Every rank announces its group's store address (its group's rank 0 the real one) over this
  // communicator; each takes the one of its group's first member.
  const int leader = group.front().rank;
  ccl::communicator made = create_communicator(state->size, state->rank, [&](const ccl::kvs::address_type& address) {
    std::vector<ccl::kvs::address_type> addresses(static_cast<std::size_t>(state_->size));
    host_all_gather(address.data(), addresses.data(), address.size());
    return addresses[static_cast<std::size_t>(leader)];
  });
  state->communicator = new ccl::communicator(std::move(made));
  state->make_queues();
  return std::unique_ptr<Communicator>(new OnecclCommunicator(std::move(state)));
}

void OnecclCommunicator::barrier() {
  complete(*collective(*state_, "ccl::barrier", [&] { return ccl::barrier(*state_->communicator); }, Plane::control));
}

void OnecclCommunicator::host_all_gather(const void* send, void* receive, std::size_t bytes_per_rank) {
  // The agreement that starts every call: a rank that never arrives is reported here.
  complete(*collective(
      *state_, "the agreement of ranks (ccl::allgather)",
      [&] { return ccl::allgather(send, receive, bytes_per_rank, ccl::datatype::int8, *state_->communicator); },
      Plane::control));
}

}  // namespace spattn
