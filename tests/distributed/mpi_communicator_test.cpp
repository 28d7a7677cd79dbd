// The MPI communicator at the rank count of this run: batches of sends and receives in any peer
// order complete without deadlock, and the collectives put every block in its place.

#include <gtest/gtest.h>

#include <numeric>
#include <vector>

#include "distributed_world.hpp"
#include "spattn/error.hpp"

namespace spattn {
namespace {

// A value that says who sent it to whom, and which message of the batch it was.
int stamp(int from, int to, int message) { return from * 10000 + to * 100 + message; }

// Every rank sends to and receives from every rank (itself included) in one batch, with the
// peers listed in a different order on each rank: the batch must still complete.
TEST(MpiCommunicator, AllPairsBatchCompletes) {
  MpiCommunicator& comm = world();
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
TEST(MpiCommunicator, RingShiftKeepsMessageOrder) {
  MpiCommunicator& comm = world();
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

TEST(MpiCommunicator, AllToAllPutsBlockIAtRankI) {
  MpiCommunicator& comm = world();
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

TEST(MpiCommunicator, AllGatherPutsRankJsBlockAtJ) {
  MpiCommunicator& comm = world();
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

TEST(MpiCommunicator, ReduceScatterSumsBlockJOntoRankJ) {
  MpiCommunicator& comm = world();
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
TEST(MpiCommunicator, SplitMakesIndependentGroups) {
  MpiCommunicator& comm = world();
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

// The odd ranks, last first, make a communicator among themselves while the even ranks do not
// take part (they would hang in a collective over the world); the even ranks use it afterwards.
TEST(MpiCommunicator, OverRanksNeedsOnlyTheListedRanks) {
  MpiCommunicator& comm = world();
  std::vector<int> odd_ranks_last_first;
  for (int rank = comm.size() - 1; rank >= 0; --rank) {
    if (rank % 2 == 1) odd_ranks_last_first.push_back(rank);
  }
  if (comm.rank() % 2 == 1) {
    std::unique_ptr<MpiCommunicator> part = comm.over_ranks(odd_ranks_last_first);
    ASSERT_EQ(part->size(), static_cast<int>(odd_ranks_last_first.size()));
    EXPECT_EQ(odd_ranks_last_first[static_cast<std::size_t>(part->rank())], comm.rank());
    std::vector<int> members(static_cast<std::size_t>(part->size()));
    const int me = comm.rank();
    part->host_all_gather(&me, members.data(), sizeof me);
    EXPECT_EQ(members, odd_ranks_last_first);
  }
  comm.barrier();
}

TEST(MpiCommunicator, OverRanksRejectsBadLists) {
  MpiCommunicator& comm = world();
  const int other = (comm.rank() + 1) % comm.size();
  EXPECT_THROW(comm.over_ranks({comm.rank(), comm.size()}), Error);
  EXPECT_THROW(comm.over_ranks({comm.rank(), comm.rank()}), Error);
  if (other != comm.rank()) EXPECT_THROW(comm.over_ranks({other}), Error);
}

TEST(MpiCommunicator, EmptyBatchAndSecondWaitAreHarmless) {
  auto transfer = world().start(TransferBatch{});
  world().wait(*transfer);
  world().wait(*transfer);
}

TEST(MpiCommunicator, BadPeerIsAnErrorNotACrash) {
  int value = 0;
  TransferBatch batch;
  batch.sends = {{&value, sizeof value, world().size()}};
  EXPECT_THROW(world().start(batch), Error);
}

}  // namespace
}  // namespace spattn
