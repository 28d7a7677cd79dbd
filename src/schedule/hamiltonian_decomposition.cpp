// Decompositions of the complete directed graph K*_n into n-1 arc-disjoint directed Hamiltonian
// cycles (hamilton.md): Walecki's cycles for odd n, and for even n >= 8 the construction that
// inserts a vertex B into rotated cycles of K*_{n-1}, with shifts in closed form (n % 4 == 0)
// or found by search (n % 4 == 2).

#include <algorithm>
#include <cstdint>
#include <map>
#include <mutex>
#include <numeric>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "schedule/cycle_schedule.hpp"
#include "schedule/zigzag_path.hpp"
#include "spattn/error.hpp"

namespace spattn {
namespace {

using Shifts = std::vector<int>;

// C_i = (apex, zigzag path on Z_m from i) for i = 0..m-1, apex = m, m even: a Hamiltonian
// decomposition of K*_{m+1}. The paths partition the arcs inside Z_m, and the apex arcs
// apex -> i, i + m/2 -> apex are all distinct. C_{i + m/2} is C_i reversed, so for odd n = m+1
// these are Walecki's m/2 undirected cycles, each in both directions.
RankCycles cycles_through_apex(int modulus) {
  RankCycles cycles;
  for (int start = 0; start < modulus; ++start) {
    std::vector<int> cycle{modulus};
    const std::vector<int> path = zigzag_path(modulus, start);
    cycle.insert(cycle.end(), path.begin(), path.end());
    cycles.push_back(cycle);
  }
  return cycles;
}

// Steps 3-5 of the construction in hamilton.md for even n, on Z_{n-2} plus A = n-2, B = n-1.
// Shift s_i rotates C_i left by s_i into R_i and cuts its closing arc x_i -> y_i
// (x_i = C_i[s_i - 1], y_i = C_i[s_i]); cycle i = (B, R_i) replaces that arc by x_i -> B -> y_i.
// The cut arcs must chain from A into one Hamiltonian path of K*_{n-1}: the last cycle is
// (B, A, cut(A), cut(cut(A)), ...), which uses every B -> y and x -> B that the others left.
RankCycles cycles_from_cut_shifts(int ranks, const Shifts& shifts) {
  const int modulus = ranks - 2;
  const int apex_a = modulus;
  const int apex_b = ranks - 1;
  std::vector<int> cut_successor(static_cast<std::size_t>(ranks - 1), -1);
  RankCycles cycles;
  RankCycles rotated = cycles_through_apex(modulus);
  for (int cycle = 0; cycle < modulus; ++cycle) {
    std::vector<int>& route = rotated[static_cast<std::size_t>(cycle)];
    std::rotate(route.begin(), route.begin() + shifts[static_cast<std::size_t>(cycle)], route.end());
    cut_successor[static_cast<std::size_t>(route.back())] = route.front();
    route.insert(route.begin(), apex_b);
    cycles.push_back(route);
  }
  std::vector<int> chain{apex_b, apex_a};
  std::vector<bool> chained(static_cast<std::size_t>(ranks - 1), false);
  chained[static_cast<std::size_t>(apex_a)] = true;
  for (int next = cut_successor[static_cast<std::size_t>(apex_a)]; next >= 0;
       next = cut_successor[static_cast<std::size_t>(next)]) {
    SPATTN_CHECK(!chained[static_cast<std::size_t>(next)],
                 "cut arcs of the " << ranks << "-rank decomposition close a cycle at rank " << next);
    chained[static_cast<std::size_t>(next)] = true;
    chain.push_back(next);
  }
  SPATTN_CHECK(static_cast<int>(chain.size()) == ranks, "cut arcs of the " << ranks << "-rank decomposition chain only "
                                                                           << chain.size() - 1 << " of "
                                                                           << ranks - 1 << " ranks from A");
  cycles.push_back(chain);
  return cycles;
}

// n % 4 == 0, n >= 8, k = n/4 - 1: s_0 = 1, s_{k+1} = 4k+2, s_{2k+2} = 3, s_{3k+2} = 4k, all
// others 2k (the authors' closed form, hamilton.md).
Shifts closed_form_shifts(int ranks) {
  const int k = ranks / 4 - 1;
  Shifts shifts(static_cast<std::size_t>(ranks - 2), 2 * k);
  shifts[0] = 1;
  shifts[static_cast<std::size_t>(k + 1)] = 4 * k + 2;
  shifts[static_cast<std::size_t>(2 * k + 2)] = 3;
  shifts[static_cast<std::size_t>(3 * k + 2)] = 4 * k;
  return shifts;
}

// Finds shifts for n % 4 == 2 (n >= 10) such that the cut arcs chain from A into one
// Hamiltonian path of {0..n-3, A}. Shift s_0 = 1 (arc A -> 0) is fixed: translating a solution
// moves whichever cycle cuts A's arc to cycle 0. For s >= 2 cycle i cuts P[s-2]+i -> P[s-1]+i,
// so a choice is valid when its tail has no cut arc out yet, its head none in, and it does not
// join a path fragment to its own start. Depth-first search picks the cycle with the fewest
// valid shifts next and tries one common shift first (most cycles share one in every solution
// found); a restart with new tie-breaks and a new common shift follows once a node budget is
// spent, because failures come from early choices that exhaustive backtracking never revisits.
class CutShiftSearch {
 public:
  explicit CutShiftSearch(int ranks)
      : ranks_(ranks), modulus_(ranks - 2), path_(zigzag_path(ranks - 2, 0)), random_(kSeed) {}

  Shifts find() {
    for (int restart = 0; restart < kMaxRestarts; ++restart) {
      reset();
      if (extend(modulus_ - 1)) return shifts_;
    }
    SPATTN_FAIL("no cut shifts found for " << ranks_ << " ranks after " << kMaxRestarts << " restarts of "
                                           << kNodeBudget << " search nodes");
  }

 private:
  static constexpr std::uint32_t kSeed = 20250926;  // fixed: the same cycles in every process
  static constexpr int kNodeBudget = 1000;          // per restart: a few milliseconds at 98 ranks
  static constexpr int kMaxRestarts = 100000;
  static constexpr int kUnset = -1;

  struct Arc {
    int tail;
    int head;
  };

  Arc cut_arc(int cycle, int shift) const {
    return {(path_[static_cast<std::size_t>(shift - 2)] + cycle) % modulus_,
            (path_[static_cast<std::size_t>(shift - 1)] + cycle) % modulus_};
  }

  bool can_cut(int cycle, int shift) const {
    const Arc arc = cut_arc(cycle, shift);
    return !has_out_[static_cast<std::size_t>(arc.tail)] && !has_in_[static_cast<std::size_t>(arc.head)] &&
           fragment_start_[static_cast<std::size_t>(arc.tail)] != arc.head;
  }

  void reset() {
    const int vertices = modulus_ + 1;  // Z_{n-2} and A
    const int apex_a = modulus_;
    has_out_.assign(static_cast<std::size_t>(vertices), false);
    has_in_.assign(static_cast<std::size_t>(vertices), false);
    fragment_start_.resize(static_cast<std::size_t>(vertices));
    fragment_end_.resize(static_cast<std::size_t>(vertices));
    std::iota(fragment_start_.begin(), fragment_start_.end(), 0);
    std::iota(fragment_end_.begin(), fragment_end_.end(), 0);
    shifts_.assign(static_cast<std::size_t>(modulus_), kUnset);
    join({apex_a, 0});
    shifts_[0] = 1;
    tie_break_.resize(static_cast<std::size_t>(modulus_));
    for (std::mt19937::result_type& priority : tie_break_) priority = random_();
    // The common shift's arcs x -> x + d alone (d = P[s-1] - P[s-2] = +-(s-1)) form one cycle
    // through all of Z_{n-2} when gcd(s-1, n-2) = 1, which a few other shifts break into the path.
    do {
      common_shift_ = 2 + static_cast<int>(random_() % static_cast<std::uint32_t>(modulus_ - 1));
    } while (std::gcd(common_shift_ - 1, modulus_) != 1);
    nodes_ = 0;
  }

  struct Fragment {
    int start;
    int end;
  };

  // Adds cut arc tail -> head: the fragment ending at tail and the one starting at head become
  // one fragment, which is returned for undo().
  Fragment join(Arc arc) {
    const Fragment joined{fragment_start_[static_cast<std::size_t>(arc.tail)],
                          fragment_end_[static_cast<std::size_t>(arc.head)]};
    has_out_[static_cast<std::size_t>(arc.tail)] = true;
    has_in_[static_cast<std::size_t>(arc.head)] = true;
    fragment_end_[static_cast<std::size_t>(joined.start)] = joined.end;
    fragment_start_[static_cast<std::size_t>(joined.end)] = joined.start;
    return joined;
  }

  // Interior vertices keep stale fragment entries, so restoring the two ends is enough.
  void undo(Arc arc, Fragment joined) {
    has_out_[static_cast<std::size_t>(arc.tail)] = false;
    has_in_[static_cast<std::size_t>(arc.head)] = false;
    fragment_end_[static_cast<std::size_t>(joined.start)] = arc.tail;
    fragment_start_[static_cast<std::size_t>(joined.end)] = arc.head;
  }

  // The unset cycle with the fewest valid shifts (ties by tie_break_), or kUnset when some
  // unset cycle has none.
  int most_constrained_cycle() const {
    int best_cycle = kUnset;
    int best_count = modulus_;
    for (int cycle = 1; cycle < modulus_; ++cycle) {
      if (shifts_[static_cast<std::size_t>(cycle)] != kUnset) continue;
      int count = 0;
      for (int shift = 2; shift <= modulus_; ++shift) count += can_cut(cycle, shift) ? 1 : 0;
      if (count == 0) return kUnset;
      if (best_cycle == kUnset || count < best_count ||
          (count == best_count &&
           tie_break_[static_cast<std::size_t>(cycle)] < tie_break_[static_cast<std::size_t>(best_cycle)])) {
        best_cycle = cycle;
        best_count = count;
      }
    }
    return best_cycle;
  }

  bool extend(int unset_cycles) {
    if (unset_cycles == 0) return true;
    if (++nodes_ > kNodeBudget) return false;
    const int cycle = most_constrained_cycle();
    if (cycle == kUnset) return false;
    // The common shift first, then the other shifts 2..n-2 from a random offset.
    const int shift_count = modulus_ - 1;
    const int offset = static_cast<int>(random_() % static_cast<std::uint32_t>(shift_count));
    for (int tried = -1; tried < shift_count; ++tried) {
      const int shift = tried < 0 ? common_shift_ : 2 + (tried + offset) % shift_count;
      if ((tried >= 0 && shift == common_shift_) || !can_cut(cycle, shift)) continue;
      const Arc arc = cut_arc(cycle, shift);
      const Fragment joined = join(arc);
      shifts_[static_cast<std::size_t>(cycle)] = shift;
      if (extend(unset_cycles - 1)) return true;
      shifts_[static_cast<std::size_t>(cycle)] = kUnset;
      undo(arc, joined);
      if (nodes_ > kNodeBudget) return false;
    }
    return false;
  }

  const int ranks_;
  const int modulus_;              // n - 2; A = modulus_
  const std::vector<int> path_;    // P, the zig-zag path on Z_{n-2} from 0
  std::mt19937 random_;            // fully specified by the standard: same draws everywhere
  std::vector<bool> has_out_, has_in_;  // per vertex: a cut arc leaves / enters it
  // fragment_start_[v] for v that ends a fragment of chained cut arcs, fragment_end_[v] for v
  // that starts one (a vertex without cut arcs is a fragment of its own).
  std::vector<int> fragment_start_, fragment_end_;
  Shifts shifts_;
  std::vector<std::mt19937::result_type> tie_break_;
  int common_shift_ = 2;
  int nodes_ = 0;
};

// The search runs once per rank count and process.
Shifts searched_shifts(int ranks) {
  static std::mutex mutex;
  static std::map<int, Shifts> found;
  const std::lock_guard<std::mutex> lock(mutex);
  auto it = found.find(ranks);
  if (it == found.end()) it = found.emplace(ranks, CutShiftSearch(ranks).find()).first;
  return it->second;
}

}  // namespace

std::string hamiltonian_decomposition_error(int ranks) {
  std::ostringstream message;
  if (ranks < 1) {
    message << "ranks must be at least 1 for a Hamiltonian decomposition (got " << ranks << ")";
  } else if (ranks == 4 || ranks == 6) {
    message << "no decomposition of the complete directed graph on " << ranks << " ranks into " << ranks - 1
            << " Hamiltonian cycles exists (n = 4 and 6 are the only exceptions); use the ring, zigzag or ulysses algorithm at "
            << ranks << " ranks, or hamilton at another rank count";
  }
  return message.str();
}

RankCycles hamiltonian_decomposition(int ranks) {
  const std::string error = hamiltonian_decomposition_error(ranks);
  SPATTN_CHECK(error.empty(), error);
  if (ranks == 1) return {};
  if (ranks == 2) return ring_cycles(2);
  if (ranks % 2 == 1) return cycles_through_apex(ranks - 1);
  return cycles_from_cut_shifts(ranks, ranks % 4 == 0 ? closed_form_shifts(ranks) : searched_shifts(ranks));
}

}  // namespace spattn
