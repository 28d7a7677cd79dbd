#pragma once
// How close each output of each target must come to the fp64 reference: the one statement of the
// conformance suite's tolerances (error_bounds.cpp says where each number comes from).

#include "kernel_targets.hpp"
#include "spattn/dtype.hpp"

namespace spattn::test {

/// What computes an output, which decides its error.
enum class OutputKind {
  attention,        // out, final_out, dq, dk, dv: the block's products with a softmax between them
  lse,              // the block's log-sum-exp
  fp32_arithmetic,  // merged out and lse, delta: a few fp32 operations per element on every target
  exact,            // copy, fill, add: each element rounded once, as IEEE rounds
};

/// The largest error allowed, relative to the output's magnitude plus the element's own
/// (CheckedOutput::magnitude, prepared_case.hpp), of an output of `kind` that `target` computes
/// from inputs of `input_dtype` and stores in `stored_dtype`.
double allowed_error(const KernelTarget& target, DType input_dtype, OutputKind kind, DType stored_dtype);

}  // namespace spattn::test
