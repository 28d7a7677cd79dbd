#pragma once
// The accuracy criterion of spattn: for each output, the distributed result's max error against
// the fp64 reference is at most 2x the max error of a same-dtype single-rank run of the same
// inputs (the block kernels on the whole sequence, no strategy), plus a tiny floor. Any element left unwritten (NaN poison) or non-finite fails.

#include <string>
#include <vector>

#include "spattn/reference_attention.hpp"
#include "strategy_runner.hpp"

namespace spattn {

struct OutputError {
  std::string name;            // out, lse, dq, dk, dv
  double distributed = 0;      // max |distributed - reference|
  double single_rank = 0;      // max |single rank - reference|
  double bound = 0;            // 2 * single_rank + floor
  bool pass = false;
};

/// One entry per output present in `distributed` (out and lse; dq, dk, dv after backward).
std::vector<OutputError> compare_with_reference(const AttentionOutputs& distributed,
                                                const AttentionOutputs& single_rank,
                                                const ReferenceResult& reference);

bool all_pass(const std::vector<OutputError>& errors);

/// The largest |value| among the finite `values` (0 when none): what errors are measured against,
/// gradients against the largest of out, dq, dk and dv together.
double max_finite_magnitude(const std::vector<double>& values);

}  // namespace spattn
