#pragma once
// Checks the distributed tests share: the accuracy criterion over every rank, and catching the
// error a collective call throws.

#include <string>

#include "spattn/distributed_attention.hpp"
#include "spattn/error.hpp"
#include "strategy_runner.hpp"

namespace spattn {

/// Runs `algorithm` on `problem` over every rank of world(); rank 0 compares the gathered out,
/// lse, dq, dk and dv with the fp64 reference and a single-device run (the 2x criterion), and
/// every rank learns its verdict, so that every rank passes or fails together.
void expect_accurate(Algorithm algorithm, const AttentionProblem& problem,
                     const StrategyOptions& strategy_options = {});

/// The message `call` throws as spattn::Error, or "" when it succeeds.
template <typename Call>
std::string error_of(Call&& call) {
  try {
    call();
  } catch (const Error& error) {
    return error.what();
  }
  return "";
}

}  // namespace spattn
