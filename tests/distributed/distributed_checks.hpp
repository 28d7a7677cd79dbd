#pragma once
// Checks the distributed tests share: the accuracy criterion over every rank, and catching the
// error a collective call throws.

#include <string>
#include <utility>

#include "spattn/distributed_attention.hpp"
#include "spattn/error.hpp"
#include "strategy_runner.hpp"

namespace spattn {

/// A mask the accuracy tests sweep, with its name in test names.
struct MaskCase {
  const char* name;
  AttentionOptions options;
};

/// none, causal, a two-sided window (9, 4), and causal with a left window of 11.
inline const MaskCase kMasks[] = {
    {"none", AttentionOptions{false, -1, -1, std::nullopt}},
    {"causal", AttentionOptions{true, -1, -1, std::nullopt}},
    {"window_9_4", AttentionOptions{false, 9, 4, std::nullopt}},
    {"causal_window_11", AttentionOptions{true, 11, -1, std::nullopt}},
};

/// How one algorithm runs at `ranks` ranks in the accuracy tests: its options and the unit its
/// sequence length must be a multiple of (the layout's chunks, times its slots for the
/// Hamiltonian schemes), or why it does not apply.
struct AlgorithmSetup {
  StrategyOptions options;
  int64_t length_unit = 1;
  std::string not_applicable;
};

/// hamilton2 takes the largest even node size that leaves at least two nodes (4 x 2 at 8 ranks,
/// 2 x 3 at 6, 2 x 2 at 4), else nodes of one rank.
AlgorithmSetup algorithm_setup(Algorithm algorithm, int ranks);

/// Runs `algorithm` on `problem` over every rank of world(); rank 0 compares the gathered out,
/// lse, dq, dk and dv with the fp64 reference and a single-device run (the 2x criterion), and
/// every rank learns its verdict, so that every rank passes or fails together.
void expect_accurate(Algorithm algorithm, const AttentionProblem& problem,
                     const StrategyOptions& strategy_options = {});

/// The same over `communicator` (the ranks of world(), on any device): the single-device
/// baseline runs on rank 0's device, so GPU strategies are held to the GPU kernels' own error.
void expect_accurate_on(Communicator& communicator, Algorithm algorithm, const AttentionProblem& problem,
                        const StrategyOptions& strategy_options = {});

/// A profile of a call with per-step timing adds up: positive total and compute, no negative
/// time anywhere, compute plus waiting within the total, `steps` entries whose sums are the totals.
void expect_consistent_profile(const Profile& profile, std::size_t steps);

/// Every element of out, lse and (when present) dq, dk, dv of two runs is bitwise equal.
void expect_identical_outputs(const AttentionOutputs& first, const AttentionOutputs& second);

/// What `call` throws as spattn::Error: its message ("" when the call succeeds) and whether it is
/// a TimeoutError (this rank gave up waiting for its peers).
struct ThrownError {
  std::string message;
  bool timeout = false;
};
template <typename Call>
ThrownError thrown_error_of(Call&& call) {
  try {
    call();
  } catch (const TimeoutError& error) {
    return {error.what(), true};
  } catch (const Error& error) {
    return {error.what(), false};
  }
  return {};
}

/// The message `call` throws as spattn::Error, or "" when it succeeds.
template <typename Call>
std::string error_of(Call&& call) {
  return thrown_error_of(std::forward<Call>(call)).message;
}

}  // namespace spattn
