// What only the MPI communicator has: communicators over a list of ranks (over_ranks), made by
// those ranks alone. The Communicator contract it shares with the others: communicator_contract_test.cpp.

#include <gtest/gtest.h>

#include <vector>

#include "distributed_world.hpp"
#include "spattn/error.hpp"

namespace spattn {
namespace {

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

}  // namespace
}  // namespace spattn
