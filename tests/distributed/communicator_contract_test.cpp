// The Communicator contract, checked on every host communicator of this build (MPI, and oneCCL
// where it was built, bootstrapped over MPI and from torchrun's variables) at the rank count of
// this run: batches of sends and receives in any peer
// order complete without deadlock, messages to one peer keep their order, the collectives put
// every block in its place, split makes independent groups, and bad peers are errors.

#include <gtest/gtest.h>

#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "distributed_world.hpp"
#include "spattn/error.hpp"
#ifdef SPATTN_WITH_ONECCL
#include "free_tcp_port.hpp"
#include "scoped_environment.hpp"
#include "spattn/oneccl_communicator.hpp"
#endif

namespace spattn {
namespace {

#ifdef SPATTN_WITH_ONECCL
// An OnecclCommunicator made as in a job started without mpirun, from the variables torchrun would
// set for this run's ranks and a port free on rank 0's machine (MPI only carries that port).
std::unique_ptr<OnecclCommunicator> oneccl_from_torchrun_variables() {
  const int my_port = world().rank() == 0 ? test::free_tcp_port() : 0;
  std::vector<int> ports(static_cast<std::size_t>(world().size()));
  world().host_all_gather(&my_port, ports.data(), sizeof my_port);
  const ScopedEnvironment rank("RANK", std::to_string(world().rank()));
  const ScopedEnvironment world_size("WORLD_SIZE", std::to_string(world().size()));
  const ScopedEnvironment master_addr("MASTER_ADDR", "127.0.0.1");
  const ScopedEnvironment master_port("MASTER_PORT", std::to_string(ports.front()));
  return OnecclCommunicator::from_environment();
}
#endif

/// The test parameter: which communicator, made once per process over every rank of the run.
class CommunicatorContract : public ::testing::TestWithParam<std::string> {
 protected:
  static Communicator& communicator() {
#ifdef SPATTN_WITH_ONECCL
    if (GetParam() == "oneccl") {
      static OnecclCommunicator oneccl(world());
      return oneccl;
    }
    if (GetParam() == "oneccl-from-environment") {
      static const std::unique_ptr<OnecclCommunicator> oneccl = oneccl_from_torchrun_variables();
      return *oneccl;
    }
#endif
    return world();
  }
};

// A value that says who sent it to whom, and which message of the batch it was.
int stamp(int from, int to, int message) { return from * 10000 + to * 100 + message; }

// Every rank sends to and receives from every rank (itself included) in one batch, with the
// peers listed in a different order on each rank: the batch must still complete.
TEST_P(CommunicatorContract, AllPairsBatchCompletes) {
  Communicator& comm = communicator();
  const int ranks = comm.size();
  const int me = comm.rank();
  std::vector<int> outgoing(static_cast<std::size_t>(ranks)), incoming(static_cast<std::size_t>(ranks), -1);
  TransferBatch batch;
  for (int offset = 0; offset < ranks; ++offset) {
    const int peer = (me + (me % 2 ? ranks - offset : offset)) % ranks;
    outgoing[static_cast<std::size_t>(peer)] = stamp(me, peer, 0);
    batch.sends.push_back({&outgoing[static_cast<std::size_t>(peer)], sizeof(int), peer});
    batch.receives.push_back({&incoming[static_cast<std::size_t>(peer)], sizeof(int), peer});
  }
  auto transfer = comm.start(batch);
  comm.wait(*transfer);
  for (int peer = 0; peer < ranks; ++peer) EXPECT_EQ(incoming[static_cast<std::size_t>(peer)], stamp(peer, me, 0));
}

// Two messages to the same peer in one batch arrive in order; a ring shift of large buffers
// (beyond eager limits) completes too.
TEST_P(CommunicatorContract, RingShiftKeepsMessageOrder) {
  Communicator& comm = communicator();
  const int ranks = comm.size();
  const int me = comm.rank();
  const int next = (me + 1) % ranks, previous = (me + ranks - 1) % ranks;
  const std::size_t count = 1 << 18;  // 1 MiB of ints per message
  std::vector<int> first(count), second(count), first_in(count, -1), second_in(count, -1);
  std::iota(first.begin(), first.end(), stamp(me, next, 0));
  std::iota(second.begin(), second.end(), stamp(me, next, 1));
  TransferBatch batch;
  batch.sends = {{first.data(), count * sizeof(int), next}, {second.data(), count * sizeof(int), next}};
  batch.receives = {{first_in.data(), count * sizeof(int), previous}, {second_in.data(), count * sizeof(int), previous}};
  auto transfer = comm.start(batch);
  comm.wait(*transfer);
  EXPECT_EQ(first_in.front(), stamp(previous, me, 0));
  EXPECT_EQ(first_in.back(), stamp(previous, me, 0) + static_cast<int>(count) - 1);
  EXPECT_EQ(second_in.front(), stamp(previous, me, 1));
}

// Messages of mixed sizes to one peer, in two batches in flight at once (a strategy starts the
// next step's transfers before it waits on the last one's): each arrives whole, in order.
TEST_P(CommunicatorContract, BatchesInFlightTogetherKeepEachPeersOrder) {
  Communicator& comm = communicator();
  const int ranks = comm.size();
  const int me = comm.rank();
  const int next = (me + 1) % ranks, previous = (me + ranks - 1) % ranks;
  const std::vector<std::size_t> counts = {3, 1 << 17, 1, 1 << 16, 7, 1 << 18};
  std::vector<std::vector<int>> outgoing, incoming;
  for (std::size_t message = 0; message < counts.size(); ++message) {
    outgoing.emplace_back(counts[message]);
    std::iota(outgoing.back().begin(), outgoing.back().end(), stamp(me, next, static_cast<int>(message)));
    incoming.emplace_back(counts[message], -1);
  }
  TransferBatch first, second;
  for (std::size_t message = 0; message < counts.size(); ++message) {
    TransferBatch& batch = message < counts.size() / 2 ? first : second;
    batch.sends.push_back({outgoing[message].data(), counts[message] * sizeof(int), next});
    batch.receives.push_back({incoming[message].data(), counts[message] * sizeof(int), previous});
  }
  auto first_transfer = comm.start(first);
  auto second_transfer = comm.start(second);
  comm.wait(*first_transfer);
  comm.wait(*second_transfer);
  for (std::size_t message = 0; message < counts.size(); ++message) {
    EXPECT_EQ(incoming[message].front(), stamp(previous, me, static_cast<int>(message))) << "message " << message;
    EXPECT_EQ(incoming[message].back(), stamp(previous, me, static_cast<int>(message)) + static_cast<int>(counts[message]) - 1)
        << "message " << message;
  }
}

TEST_P(CommunicatorContract, AllToAllPutsBlockIAtRankI) {
  Communicator& comm = communicator();
  const int ranks = comm.size();
  const int me = comm.rank();
  const int per_rank = 3;
  std::vector<int> send(static_cast<std::size_t>(ranks * per_rank)), receive(send.size(), -1);
  for (int to = 0; to < ranks; ++to)
    for (int i = 0; i < per_rank; ++i) send[static_cast<std::size_t>(to * per_rank + i)] = stamp(me, to, i);
  auto transfer = comm.start_all_to_all(send.data(), receive.data(), per_rank * sizeof(int));
  comm.wait(*transfer);
  for (int from = 0; from < ranks; ++from)
    for (int i = 0; i < per_rank; ++i)
      EXPECT_EQ(receive[static_cast<std::size_t>(from * per_rank + i)], stamp(from, me, i));
}

TEST_P(CommunicatorContract, AllGatherPutsRankJsBlockAtJ) {
  Communicator& comm = communicator();
  const int ranks = comm.size();
  const int mine[2] = {stamp(comm.rank(), 0, 0), stamp(comm.rank(), 0, 1)};
  std::vector<int> everyone(static_cast<std::size_t>(2 * ranks), -1);
  auto transfer = comm.start_all_gather(mine, everyone.data(), sizeof mine);
  comm.wait(*transfer);
  for (int rank = 0; rank < ranks; ++rank) {
    EXPECT_EQ(everyone[static_cast<std::size_t>(2 * rank)], stamp(rank, 0, 0));
    EXPECT_EQ(everyone[static_cast<std::size_t>(2 * rank + 1)], stamp(rank, 0, 1));
  }
  comm.barrier();
}

TEST_P(CommunicatorContract, ReduceScatterSumsBlockJOntoRankJ) {
  Communicator& comm = communicator();
  const int ranks = comm.size();
  const int per_rank = 5;
  std::vector<float> send(static_cast<std::size_t>(ranks * per_rank)), receive(per_rank, -1.0f);
  for (int block = 0; block < ranks; ++block)
    for (int i = 0; i < per_rank; ++i)
      send[static_cast<std::size_t>(block * per_rank + i)] = static_cast<float>(comm.rank() + 1) * (block * 10 + i);
  auto transfer = comm.start_reduce_scatter_sum(send.data(), receive.data(), per_rank);
  comm.wait(*transfer);
  const float rank_sum = static_cast<float>(ranks * (ranks + 1) / 2);  // sum of (rank + 1)
  for (int i = 0; i < per_rank; ++i)
    EXPECT_EQ(receive[static_cast<std::size_t>(i)], rank_sum * (comm.rank() * 10 + i));
}

// Split by parity, ordered backwards: each part is its own world with its own ranks.
TEST_P(CommunicatorContract, SplitMakesIndependentGroups) {
  Communicator& comm = communicator();
  const int color = comm.rank() % 2;
  std::unique_ptr<Communicator> part = comm.split(color, -comm.rank());
  const int expected_size = (comm.size() + 1 - color) / 2;
  ASSERT_EQ(part->size(), expected_size);
  // Ordered by key = -rank: the highest world rank of the colour is rank 0 of the part.
  const int highest_of_colour = comm.size() - 1 - ((comm.size() - 1 - color) % 2);
  EXPECT_EQ(part->rank(), (highest_of_colour - comm.rank()) / 2);
  std::vector<int> members(static_cast<std::size_t>(part->size()));
  const int me = comm.rank();
  part->host_all_gather(&me, members.data(), sizeof me);
  for (int member : members) EXPECT_EQ(member % 2, color);
}

TEST_P(CommunicatorContract, EmptyBatchAndSecondWaitAreHarmless) {
  auto transfer = communicator().start(TransferBatch{});
  communicator().wait(*transfer);
  communicator().wait(*transfer);
}

TEST_P(CommunicatorContract, BadPeerIsAnErrorNotACrash) {
  int value = 0;
  TransferBatch batch;
  batch.sends = {{&value, sizeof value, communicator().size()}};
  EXPECT_THROW(communicator().start(batch), Error);
}


#ifdef SPATTN_WITH_ONECCL
INSTANTIATE_TEST_SUITE_P(HostCommunicators, CommunicatorContract,
                         ::testing::Values("mpi", "oneccl", "oneccl-from-environment"));
#else
INSTANTIATE_TEST_SUITE_P(HostCommunicators, CommunicatorContract, ::testing::Values("mpi"));
#endif

}  // namespace
}  // namespace spattn
