#pragma once
// Rotation schedules as pure functions. A schedule is a set of directed cycles through all n
// ranks; every rank cuts its keys and values into one slot per cycle, and at every step slot c
// moves one hop along cycle c. Ring attention is the single cycle (0, 1, ..., n-1); Hamiltonian-
// cycle attention (TASP) uses the n-1 arc-disjoint Hamiltonian cycles of the complete directed
// graph K*_n, so that every link carries a slot at every step; the two-level scheme uses m
// cycles that cross between nodes once per node (see shared/design/hamilton.md).

#include <string>
#include <vector>

namespace spattn {

/// Directed cycles through all ranks: cycle c lists the n ranks in travel order, and its last
/// rank sends to its first.
using RankCycles = std::vector<std::vector<int>>;

/// The ring: one cycle 0 -> 1 -> ... -> n-1 -> 0.
RankCycles ring_cycles(int ranks);

/// Why K*_n has no decomposition into n-1 directed Hamiltonian cycles that spattn can build, or
/// "" when it has one: every n >= 1 except 4 and 6 (n = 1: no cycles, n = 2: the ring). The
/// message for 4 and 6 says that none exists and suggests ring, zigzag or ulysses.
std::string hamiltonian_decomposition_error(int ranks);

/// The n-1 arc-disjoint directed Hamiltonian cycles of K*_n: odd n by Walecki's construction
/// (each undirected cycle in both directions), n % 4 == 0 by the closed form of
/// hamilton.md, n % 4 == 2 (n >= 10) by a search over the closed form's shifts. Throws Error
/// with hamiltonian_decomposition_error's message when there is none.
RankCycles hamiltonian_decomposition(int ranks);

/// "" when the two-level scheme (m ranks per node, u nodes) exists, else why: m must be even
/// (or 1), both at least 1, and nodes at least 2 when m > 1 (on one node the m paths already use
/// every link of the node, so use hamilton there).
std::string two_level_error(int ranks_per_node, int nodes);

/// The m cycles of the two-level scheme "(m-K_m-m)^u" of hamilton.md over n = m * u ranks,
/// global rank = node * m + local rank: within a node the zig-zag Hamiltonian path i of K*_m,
/// then on to the next node. Each rank sends m-1 slots within its node and one across nodes
/// per step. Throws Error with two_level_error's message when it does not exist.
RankCycles two_level_cycles(int ranks_per_node, int nodes);

/// Routing derived from a set of cycles (validated at construction: each cycle visits every
/// rank exactly once; Error otherwise).
class CycleSchedule {
 public:
  CycleSchedule(RankCycles cycles, int ranks);

  int ranks() const { return ranks_; }
  /// Cycles, which is also the number of slots per rank.
  int slots() const { return static_cast<int>(cycles_.size()); }
  const RankCycles& cycles() const { return cycles_; }

  /// Where `rank` sends slot `cycle`, and where that slot arrives from.
  int successor(int cycle, int rank) const;
  int predecessor(int cycle, int rank) const;
  /// The rank whose slot `cycle` rank `rank` holds at `step` (step 0: its own).
  int source(int cycle, int rank, int step) const;
  /// The step at which `holder` holds slot `cycle` of `owner`: the inverse of source, which is
  /// (position of holder - position of owner) mod ranks in positions(cycle).
  int arrival_step(int cycle, int owner, int holder) const;
  /// Where each rank stands in cycle `cycle` (its index in cycles()[cycle]), for loops over ranks.
  const std::vector<int>& positions(int cycle) const;

  /// n x n tables of hamilton.md: out[r][p] = the slot r sends to p, in[r][p] = the slot r
  /// receives from p; -1 where no slot travels (the diagonal, and non-adjacent pairs when there
  /// are fewer than n-1 cycles).
  std::vector<std::vector<int>> out_mapping() const;
  std::vector<std::vector<int>> in_mapping() const;

 private:
  RankCycles cycles_;
  int ranks_;
  std::vector<std::vector<int>> position_;  // position_[c][r]: index of rank r in cycle c
};

}  // namespace spattn
