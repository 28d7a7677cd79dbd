// Properties of the rotation cycles: every decomposition of K*_n for n = 1..64 uses each of the
// n(n-1) links exactly once, its routing tables are consistent, and simulating the slot moves
// step by step shows every rank holding every rank's slots exactly once (every query sees every
// key once); the two-level cycles cross between nodes exactly where hamilton.md's closed form
// says; and every unsupported input fails with a message that says what to do instead.

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "schedule/cycle_schedule.hpp"
#include "schedule/zigzag_path.hpp"
#include "spattn/error.hpp"

namespace spattn {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using Table = std::vector<std::vector<int>>;

std::size_t at(int index) { return static_cast<std::size_t>(index); }

// arc_uses[from][to]: how many cycles send from `from` to `to`.
Table arc_uses(const RankCycles& cycles, int ranks) {
  Table uses(at(ranks), std::vector<int>(at(ranks), 0));
  for (const std::vector<int>& cycle : cycles)
    for (std::size_t index = 0; index < cycle.size(); ++index)
      ++uses[at(cycle[index])][at(cycle[(index + 1) % cycle.size()])];
  return uses;
}

void expect_permutation_of_ranks(const std::vector<int>& cycle, int ranks) {
  std::vector<int> visits(at(ranks), 0);
  ASSERT_EQ(static_cast<int>(cycle.size()), ranks);
  for (int rank : cycle) {
    ASSERT_TRUE(rank >= 0 && rank < ranks) << rank;
    ++visits[at(rank)];
  }
  for (int count : visits) EXPECT_EQ(count, 1);
}

// out = transpose(in); each row of out holds every slot exactly once, -1 on the diagonal and
// -1 for every peer no slot goes to. A single rank sends nothing.
void expect_consistent_tables(const CycleSchedule& schedule) {
  const int ranks = schedule.ranks();
  const Table out = schedule.out_mapping();
  const Table in = schedule.in_mapping();
  if (ranks == 1) {
    EXPECT_EQ(out, (Table{{-1}}));
    EXPECT_EQ(in, (Table{{-1}}));
    return;
  }
  ASSERT_EQ(static_cast<int>(out.size()), ranks);
  for (int rank = 0; rank < ranks; ++rank) {
    std::vector<int> sends(at(schedule.slots()), 0);
    int idle_peers = 0;
    EXPECT_EQ(out[at(rank)][at(rank)], -1);
    for (int peer = 0; peer < ranks; ++peer) {
      const int slot = out[at(rank)][at(peer)];
      EXPECT_EQ(slot, in[at(peer)][at(rank)]) << "rank " << rank << " peer " << peer;
      if (slot < 0) {
        ++idle_peers;
      } else {
        ASSERT_LT(slot, schedule.slots());
        ++sends[at(slot)];
        EXPECT_EQ(schedule.successor(slot, rank), peer);
        EXPECT_EQ(schedule.predecessor(slot, peer), rank);
      }
    }
    for (int count : sends) EXPECT_EQ(count, 1) << "rank " << rank;
    EXPECT_EQ(idle_peers, ranks - schedule.slots()) << "rank " << rank;
  }
}

// Moves the slots as the engine does (rank r sends held slot out[r][p] to p, which stores it as
// slot in[p][r]) for steps 0..n-1. Every rank must hold every rank's slot c exactly once, and
// what it holds must be what source() predicts.
void expect_routing_covers_every_slot_once(const CycleSchedule& schedule) {
  const int ranks = schedule.ranks();
  const int slots = schedule.slots();
  const Table out = schedule.out_mapping();
  const Table in = schedule.in_mapping();
  Table owner(at(slots), std::vector<int>(at(ranks)));  // owner[c][r]: whose slot c rank r holds
  for (int slot = 0; slot < slots; ++slot)
    for (int rank = 0; rank < ranks; ++rank) owner[at(slot)][at(rank)] = rank;
  // seen[r][c][o]: steps at which rank r held slot c of rank o
  std::vector<Table> seen(at(ranks), Table(at(slots), std::vector<int>(at(ranks), 0)));
  for (int step = 0; step < ranks; ++step) {
    for (int rank = 0; rank < ranks; ++rank)
      for (int slot = 0; slot < slots; ++slot) {
        const int held = owner[at(slot)][at(rank)];
        ASSERT_EQ(schedule.source(slot, rank, step), held) << "slot " << slot << " rank " << rank << " step " << step;
        ++seen[at(rank)][at(slot)][at(held)];
      }
    if (step == ranks - 1) break;
    Table arrived(at(slots), std::vector<int>(at(ranks), -1));
    for (int rank = 0; rank < ranks; ++rank)
      for (int peer = 0; peer < ranks; ++peer) {
        const int slot = out[at(rank)][at(peer)];
        if (slot < 0) continue;
        const int stored_as = in[at(peer)][at(rank)];
        ASSERT_EQ(arrived[at(stored_as)][at(peer)], -1) << "two arrivals for slot " << stored_as << " at " << peer;
        arrived[at(stored_as)][at(peer)] = owner[at(slot)][at(rank)];
      }
    for (const std::vector<int>& slot_arrivals : arrived)
      for (int from : slot_arrivals) ASSERT_GE(from, 0) << "a rank received nothing for some slot";
    owner = arrived;
  }
  for (int rank = 0; rank < ranks; ++rank)
    for (int slot = 0; slot < slots; ++slot)
      for (int source = 0; source < ranks; ++source)
        EXPECT_EQ(seen[at(rank)][at(slot)][at(source)], 1)
            << "rank " << rank << " slot " << slot << " of rank " << source;
}

TEST(RingCycles, OneCycleInRankOrder) {
  for (int ranks = 1; ranks <= 9; ++ranks) {
    const RankCycles ring = ring_cycles(ranks);
    ASSERT_EQ(ring.size(), 1u);
    for (int index = 0; index < ranks; ++index) EXPECT_EQ(ring[0][at(index)], index);
    const CycleSchedule schedule(ring, ranks);
    for (int rank = 0; rank < ranks; ++rank) {
      EXPECT_EQ(schedule.successor(0, rank), (rank + 1) % ranks);
      EXPECT_EQ(schedule.predecessor(0, rank), (rank + ranks - 1) % ranks);
      for (int step = 0; step < ranks; ++step) EXPECT_EQ(schedule.source(0, rank, step), (rank - step + ranks) % ranks);
    }
    expect_consistent_tables(schedule);
    expect_routing_covers_every_slot_once(schedule);
  }
  EXPECT_THROW(ring_cycles(0), Error);
}

TEST(ZigzagPath, TranslatesPartitionTheArcsForEvenModuli) {
  EXPECT_EQ(zigzag_path(6, 0), (std::vector<int>{0, 1, 5, 2, 4, 3}));
  EXPECT_EQ(zigzag_path(6, 2), (std::vector<int>{2, 3, 1, 4, 0, 5}));
  EXPECT_EQ(zigzag_path(1, 0), (std::vector<int>{0}));
  for (int modulus = 2; modulus <= 12; modulus += 2) {
    Table uses(at(modulus), std::vector<int>(at(modulus), 0));
    for (int start = 0; start < modulus; ++start) {
      const std::vector<int> path = zigzag_path(modulus, start);
      expect_permutation_of_ranks(path, modulus);
      for (std::size_t index = 0; index + 1 < path.size(); ++index) ++uses[at(path[index])][at(path[index + 1])];
    }
    for (int from = 0; from < modulus; ++from)
      for (int to = 0; to < modulus; ++to) EXPECT_EQ(uses[at(from)][at(to)], from == to ? 0 : 1);
  }
}

// The decomposition of `ranks` exists and its N-1 Hamiltonian cycles use every directed link
// once; stops at the first fault (callers check HasFatalFailure).
void expect_every_link_used_once(int ranks, RankCycles& cycles) {
  ASSERT_EQ(hamiltonian_decomposition_error(ranks), "");
  cycles = hamiltonian_decomposition(ranks);
  ASSERT_EQ(static_cast<int>(cycles.size()), ranks - 1);
  for (const std::vector<int>& cycle : cycles) expect_permutation_of_ranks(cycle, ranks);
  const Table uses = arc_uses(cycles, ranks);
  for (int from = 0; from < ranks; ++from)
    for (int to = 0; to < ranks; ++to) ASSERT_EQ(uses[at(from)][at(to)], from == to ? 0 : 1) << from << " -> " << to;
}

TEST(HamiltonianDecomposition, EveryRankCountUpTo64UsesEveryLinkOnce) {
  for (int ranks = 1; ranks <= 64; ++ranks) {
    if (ranks == 4 || ranks == 6) continue;
    SCOPED_TRACE("ranks " + std::to_string(ranks));
    RankCycles cycles;
    expect_every_link_used_once(ranks, cycles);
    if (HasFatalFailure()) return;
    const CycleSchedule schedule(cycles, ranks);
    expect_consistent_tables(schedule);
    expect_routing_covers_every_slot_once(schedule);
  }
}

TEST(HamiltonianDecomposition, LargeRankCountsUpTo1024UseEveryLinkOnce) {
  // What `spattn plan --ranks N` prints for multi-node clusters (issue 19: up to 1024 ranks).
  for (const int ranks : {127, 128, 255, 256, 513, 1000, 1023, 1024}) {
    SCOPED_TRACE("ranks " + std::to_string(ranks));
    RankCycles cycles;
    expect_every_link_used_once(ranks, cycles);
    if (HasFatalFailure()) return;
  }
}

TEST(HamiltonianDecomposition, SmallRankCounts) {
  EXPECT_TRUE(hamiltonian_decomposition(1).empty());
  EXPECT_EQ(hamiltonian_decomposition(2), (RankCycles{{0, 1}}));
  EXPECT_EQ(hamiltonian_decomposition(3), (RankCycles{{2, 0, 1}, {2, 1, 0}}));
}

// Odd n: cycle i + (n-1)/2 is cycle i reversed (Walecki's undirected cycles in both directions).
TEST(HamiltonianDecomposition, OddRankCountsPairEachCycleWithItsReverse) {
  for (int ranks = 3; ranks <= 15; ranks += 2) {
    const RankCycles cycles = hamiltonian_decomposition(ranks);
    const std::size_t half = cycles.size() / 2;
    for (std::size_t c = 0; c < half; ++c) {
      const CycleSchedule schedule(cycles, ranks);
      for (int rank = 0; rank < ranks; ++rank)
        EXPECT_EQ(schedule.successor(static_cast<int>(c + half), rank), schedule.predecessor(static_cast<int>(c), rank));
    }
  }
}

TEST(HamiltonianDecomposition, EightRanksReproduceTheWorkedExample) {
  const RankCycles expected = {{7, 0, 1, 5, 2, 4, 3, 6}, {7, 2, 0, 3, 5, 4, 6, 1}, {7, 5, 6, 2, 3, 1, 4, 0},
                               {7, 4, 2, 5, 1, 0, 6, 3}, {7, 3, 0, 2, 1, 6, 4, 5}, {7, 1, 3, 2, 6, 5, 0, 4},
                               {7, 6, 0, 5, 3, 4, 1, 2}};
  EXPECT_EQ(hamiltonian_decomposition(8), expected);
}

TEST(HamiltonianDecomposition, FourAndSixRanksHaveNoneAndSayWhatToUse) {
  for (int ranks : {4, 6}) {
    const std::string error = hamiltonian_decomposition_error(ranks);
    EXPECT_THAT(error, AllOf(HasSubstr("no decomposition"), HasSubstr(std::to_string(ranks) + " ranks"),
                             HasSubstr(std::to_string(ranks - 1) + " Hamiltonian cycles"),
                             HasSubstr("ring, zigzag or ulysses")));
    try {
      hamiltonian_decomposition(ranks);
      ADD_FAILURE() << "no error for " << ranks << " ranks";
    } catch (const Error& thrown) {
      EXPECT_THAT(thrown.what(), HasSubstr(error));
    }
  }
}

TEST(HamiltonianDecomposition, RankCountsBelowOneNameTheValue) {
  for (int ranks : {0, -1}) {
    EXPECT_THAT(hamiltonian_decomposition_error(ranks),
                AllOf(HasSubstr("at least 1"), HasSubstr("(got " + std::to_string(ranks) + ")")));
    EXPECT_THROW(hamiltonian_decomposition(ranks), Error);
  }
}

TEST(TwoLevelCycles, HamiltonianArcDisjointAndOneInterNodeSlotPerStep) {
  for (int per_node : {1, 2, 4, 6, 8})
    for (int nodes : {1, 2, 3, 4}) {
      if (nodes == 1 && per_node > 1) continue;  // refused, see the next test
      SCOPED_TRACE("m " + std::to_string(per_node) + " u " + std::to_string(nodes));
      const int ranks = per_node * nodes;
      ASSERT_EQ(two_level_error(per_node, nodes), "");
      const RankCycles cycles = two_level_cycles(per_node, nodes);
      ASSERT_EQ(static_cast<int>(cycles.size()), per_node);
      for (const std::vector<int>& cycle : cycles) expect_permutation_of_ranks(cycle, ranks);
      const Table uses = arc_uses(cycles, ranks);
      for (int from = 0; from < ranks; ++from)
        for (int to = 0; to < ranks; ++to) ASSERT_LE(uses[at(from)][at(to)], from == to && ranks > 1 ? 0 : 1);
      const CycleSchedule schedule(cycles, ranks);
      for (int rank = 0; rank < ranks && nodes >= 2; ++rank) {
        const int node = rank / per_node;
        const int local = rank % per_node;
        int sends_within_node = 0;
        for (int slot = 0; slot < per_node; ++slot) {
          if (schedule.successor(slot, rank) / per_node == node) ++sends_within_node;
        }
        EXPECT_EQ(sends_within_node, per_node - 1) << "rank " << rank;
        // hamilton.md: send slot (l - m/2) mod m to ((b+1) mod u)*m + (l - m/2) mod m, receive
        // slot l from ((b-1) mod u)*m + (l + m/2) mod m.
        const int sent_slot = (local - per_node / 2 + per_node) % per_node;
        EXPECT_EQ(schedule.successor(sent_slot, rank), (node + 1) % nodes * per_node + sent_slot);
        EXPECT_EQ(schedule.predecessor(local, rank),
                  (node - 1 + nodes) % nodes * per_node + (local + per_node / 2) % per_node);
      }
      expect_consistent_tables(schedule);
      expect_routing_covers_every_slot_once(schedule);
    }
}

TEST(TwoLevelCycles, OneRankPerNodeIsTheRingOverNodes) {
  EXPECT_EQ(two_level_cycles(1, 4), ring_cycles(4));
  EXPECT_EQ(two_level_cycles(1, 1), ring_cycles(1));
}

TEST(TwoLevelCycles, RefusedInputsSayWhy) {
  EXPECT_THAT(two_level_error(3, 2), AllOf(HasSubstr("even"), HasSubstr("(got 3)")));
  EXPECT_THAT(two_level_error(0, 2), AllOf(HasSubstr("ranks per node"), HasSubstr("(got 0)")));
  EXPECT_THAT(two_level_error(2, 0), AllOf(HasSubstr("nodes"), HasSubstr("(got 0)")));
  // One node of m > 1 ranks: the node's m paths already use every link, so closing them would
  // send two slots over one link.
  EXPECT_THAT(two_level_error(4, 1), AllOf(HasSubstr("at least 2 nodes"), HasSubstr("hamilton")));
  for (const auto& [per_node, nodes] : std::vector<std::pair<int, int>>{{3, 2}, {0, 2}, {2, 0}, {4, 1}, {-2, 3}}) {
    try {
      two_level_cycles(per_node, nodes);
      ADD_FAILURE() << "no error for m " << per_node << " u " << nodes;
    } catch (const Error& thrown) {
      EXPECT_THAT(thrown.what(), HasSubstr(two_level_error(per_node, nodes)));
    }
  }
}

TEST(CycleSchedule, RejectsCyclesThatAreNotPermutationsOrShareALink) {
  const auto message = [](const RankCycles& cycles, int ranks) -> std::string {
    try {
      const CycleSchedule schedule(cycles, ranks);
    } catch (const Error& thrown) {
      return thrown.what();
    }
    return "";
  };
  EXPECT_THAT(message({{0, 1, 2}, {0, 2, 2}}, 3), AllOf(HasSubstr("cycle 1"), HasSubstr("rank 2 twice")));
  EXPECT_THAT(message({{0, 1}}, 3), AllOf(HasSubstr("cycle 0"), HasSubstr("has 2 entries")));
  EXPECT_THAT(message({{0, 3, 1}}, 3), AllOf(HasSubstr("rank 3"), HasSubstr("0..2")));
  EXPECT_THAT(message({{0, 1, 2}, {1, 2, 0}}, 3), AllOf(HasSubstr("cycles 0 and 1"), HasSubstr("arc-disjoint")));
  EXPECT_THAT(message({{0}}, 0), HasSubstr("at least 1 rank"));
}

}  // namespace
}  // namespace spattn
