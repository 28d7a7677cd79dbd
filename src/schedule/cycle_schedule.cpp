// The ring, the two-level cycles and the routing derived from any set of cycles (the
// decompositions of K*_n are in hamiltonian_decomposition.cpp).

#include "schedule/cycle_schedule.hpp"

#include <numeric>
#include <sstream>
#include <utility>

#include "schedule/zigzag_path.hpp"
#include "spattn/error.hpp"

namespace spattn {
namespace {

int wrap(int value, int modulus) { return (value % modulus + modulus) % modulus; }

}  // namespace

RankCycles ring_cycles(int ranks) {
  SPATTN_CHECK(ranks >= 1, "ranks must be at least 1 for a ring (got " << ranks << ")");
  std::vector<int> ring(static_cast<std::size_t>(ranks));
  std::iota(ring.begin(), ring.end(), 0);
  return {ring};
}

std::string two_level_error(int ranks_per_node, int nodes) {
  std::ostringstream message;
  if (ranks_per_node < 1) {
    message << "ranks per node must be at least 1 for the two-level scheme (got " << ranks_per_node << ")";
  } else if (nodes < 1) {
    message << "nodes must be at least 1 for the two-level scheme (got " << nodes << ")";
  } else if (ranks_per_node % 2 == 1 && ranks_per_node != 1) {
    message << "the two-level scheme needs an even number of ranks per node, or 1 (got " << ranks_per_node
            << "): only then do the node's zig-zag paths cover each link once; use the hamilton algorithm";
  } else if (nodes == 1 && ranks_per_node > 1) {
    // The m node paths already use all m(m-1) links of the node, so closing each path within the
    // node would send two slots over some link at every step.
    message << "the two-level scheme needs at least 2 nodes when a node has more than one rank (got 1 node of "
            << ranks_per_node << " ranks); use the hamilton algorithm on a single node";
  }
  return message.str();
}

// Cycle i runs the zig-zag path i through node 0, then the same path through node 1, ..., node
// u-1, and back to node 0. Its inter-node arcs leave the path's end l = i + m/2 for the next
// node's path start i: rank b*m + l sends slot (l - m/2) mod m to ((b+1) mod u)*m + (l - m/2)
// mod m, and receives slot l from ((b-1) mod u)*m + (l + m/2) mod m.
RankCycles two_level_cycles(int ranks_per_node, int nodes) {
  const std::string error = two_level_error(ranks_per_node, nodes);
  SPATTN_CHECK(error.empty(), error);
  RankCycles cycles;
  for (int start = 0; start < ranks_per_node; ++start) {
    const std::vector<int> node_path = zigzag_path(ranks_per_node, start);
    std::vector<int> cycle;
    for (int node = 0; node < nodes; ++node)
      for (int local_rank : node_path) cycle.push_back(node * ranks_per_node + local_rank);
    cycles.push_back(cycle);
  }
  return cycles;
}

CycleSchedule::CycleSchedule(RankCycles cycles, int ranks) : cycles_(std::move(cycles)), ranks_(ranks) {
  SPATTN_CHECK(ranks >= 1, "a cycle schedule needs at least 1 rank (got " << ranks << ")");
  // arc_cycle[from * n + to]: the cycle that uses arc from -> to, so that no link carries two slots.
  std::vector<int> arc_cycle(static_cast<std::size_t>(ranks) * static_cast<std::size_t>(ranks), -1);
  for (int c = 0; c < slots(); ++c) {
    const std::vector<int>& cycle = cycles_[static_cast<std::size_t>(c)];
    SPATTN_CHECK(static_cast<int>(cycle.size()) == ranks, "cycle " << c << " must visit each of the " << ranks
                                                                   << " ranks exactly once but has " << cycle.size()
                                                                   << " entries");
    std::vector<int> position(static_cast<std::size_t>(ranks), -1);
    for (int index = 0; index < ranks; ++index) {
      const int rank = cycle[static_cast<std::size_t>(index)];
      SPATTN_CHECK(rank >= 0 && rank < ranks,
                   "cycle " << c << " lists rank " << rank << " at index " << index << "; ranks are 0.." << ranks - 1);
      SPATTN_CHECK(position[static_cast<std::size_t>(rank)] < 0, "cycle " << c << " must visit each of the " << ranks
                                                                          << " ranks exactly once but lists rank "
                                                                          << rank << " twice");
      position[static_cast<std::size_t>(rank)] = index;
    }
    // A single rank's cycle (0) is a self-loop: no link, nothing sent.
    for (int index = 0; ranks > 1 && index < ranks; ++index) {
      const int from = cycle[static_cast<std::size_t>(index)];
      const int to = cycle[static_cast<std::size_t>((index + 1) % ranks)];
      int& owner = arc_cycle[static_cast<std::size_t>(from * ranks + to)];
      SPATTN_CHECK(owner < 0, "cycles " << owner << " and " << c << " both send from rank " << from << " to rank "
                                        << to << "; the cycles must be arc-disjoint so that each link carries one slot");
      owner = c;
    }
    position_.push_back(position);
  }
}

// The ranks one place after and one place before `rank` on the cycle.
int CycleSchedule::successor(int cycle, int rank) const { return source(cycle, rank, -1); }

int CycleSchedule::predecessor(int cycle, int rank) const { return source(cycle, rank, 1); }

// Slot `cycle` moves one hop forward per step, so after `step` steps rank r holds the slot of
// the rank `step` places before it: cycle[(pos(r) - step) mod n].
int CycleSchedule::source(int cycle, int rank, int step) const {
  SPATTN_CHECK(cycle >= 0 && cycle < slots(), "cycle " << cycle << " is outside 0.." << slots() - 1);
  SPATTN_CHECK(rank >= 0 && rank < ranks_, "rank " << rank << " is outside 0.." << ranks_ - 1);
  const int position = position_[static_cast<std::size_t>(cycle)][static_cast<std::size_t>(rank)];
  return cycles_[static_cast<std::size_t>(cycle)][static_cast<std::size_t>(wrap(position - step, ranks_))];
}

int CycleSchedule::arrival_step(int cycle, int owner, int holder) const {
  SPATTN_CHECK(cycle >= 0 && cycle < slots(), "cycle " << cycle << " is outside 0.." << slots() - 1);
  SPATTN_CHECK(owner >= 0 && owner < ranks_ && holder >= 0 && holder < ranks_,
               "ranks " << owner << " and " << holder << " must be in 0.." << ranks_ - 1);
  const std::vector<int>& position = position_[static_cast<std::size_t>(cycle)];
  return wrap(position[static_cast<std::size_t>(holder)] - position[static_cast<std::size_t>(owner)], ranks_);
}

const std::vector<int>& CycleSchedule::positions(int cycle) const {
  SPATTN_CHECK(cycle >= 0 && cycle < slots(), "cycle " << cycle << " is outside 0.." << slots() - 1);
  return position_[static_cast<std::size_t>(cycle)];
}

std::vector<std::vector<int>> CycleSchedule::out_mapping() const {
  std::vector<std::vector<int>> out(static_cast<std::size_t>(ranks_), std::vector<int>(static_cast<std::size_t>(ranks_), -1));
  for (int c = 0; c < slots(); ++c)
    for (int rank = 0; rank < ranks_; ++rank) {
      const int to = successor(c, rank);
      if (to != rank) out[static_cast<std::size_t>(rank)][static_cast<std::size_t>(to)] = c;
    }
  return out;
}

// in[r][p] = c exactly when p = predecessor_c(r), i.e. r = successor_c(p): out[p][r] = c.
std::vector<std::vector<int>> CycleSchedule::in_mapping() const {
  const std::vector<std::vector<int>> out = out_mapping();
  std::vector<std::vector<int>> in(out.size(), std::vector<int>(out.size()));
  for (std::size_t rank = 0; rank < out.size(); ++rank)
    for (std::size_t peer = 0; peer < out.size(); ++peer) in[rank][peer] = out[peer][rank];
  return in;
}

}  // namespace spattn
