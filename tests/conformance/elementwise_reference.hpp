#pragma once
// The fp64 reference of the element-wise BlockKernels operations, from the values their inputs
// hold (the attention operations' reference is make_problem's, tests/gpu/block_reference.hpp).

#include <vector>

#include "host_tensor.hpp"

namespace spattn::test {

/// `value` rounded to the nearest value of `dtype`, ties to even, overflowing to infinity as IEEE
/// rounding does: what a conversion (copy, fill) or an fp32 sum (add) must give, exactly.
double rounded_to(DType dtype, double value);

/// merge's closed form per (B, S, H, D) element and (B, H, S) row, in fp64:
///   lse' = log(exp(lse) + exp(lse_b)),  out' = out exp(lse - lse') + out_b exp(lse_b - lse');
/// a side whose lse is -inf weighs 0 (its out, NaN here, is never read), and a row where both
/// are -inf gets out 0, lse -inf.
struct MergedRows {
  std::vector<double> out;  // (B, S, H, D)
  std::vector<double> lse;  // (B, H, S)
};
MergedRows merged_rows(const HostTensor& partial_out,   // (B, S, H, D)
                       const HostTensor& partial_lse,   // (B, H, S)
                       const HostTensor& running_out,   // (B, S, H, D)
                       const HostTensor& running_lse);  // (B, H, S)

/// delta[b, h, s] = sum_d out[b, s, h, d] * dout[b, s, h, d], in fp64.
std::vector<double> row_sums_of_products(const HostTensor& out,    // (B, S, H, D)
                                         const HostTensor& dout);  // (B, S, H, D)

}  // namespace spattn::test
