#pragma once
// The stable merge of two attention results over disjoint key sets (BlockKernels::merge), as the
// weights each side takes: stated once for the merge kernel and the own forward's epilogue.

#include <cmath>

namespace spattn::cuda {

struct MergeWeights {
  float lse;      // lse' = max + log1p(exp(min - max)); -inf when neither side saw a key
  float running;  // exp(lse_running - lse')
  float partial;  // exp(lse_partial - lse')
};

/// The weights of out' = out_running * running + out_partial * partial. lse - lse' is taken as
/// (lse - max) - gap rather than from the rounded lse' (whose rounding where |lse| is large would
/// leave the weights' sum off 1). A side of weight 0 (lse = -inf, or too far below) need not be
/// read, so whatever it holds never reaches the result; a row that saw no key gets out = 0.
__device__ inline MergeWeights merge_weights(float running_lse, float partial_lse) {
  const float high = fmaxf(running_lse, partial_lse);
  if (high == -INFINITY) return {-INFINITY, 0.0f, 0.0f};
  const float gap = log1pf(expf(fminf(running_lse, partial_lse) - high));
  return {high + gap, expf((running_lse - high) - gap), expf((partial_lse - high) - gap)};
}

}  // namespace spattn::cuda
