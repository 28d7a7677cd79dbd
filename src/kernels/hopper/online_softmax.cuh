#pragma once
// The online softmax of one thread's rows of a query tile, over key tiles in turn (flash
// attention): fp32 throughout, with the softmax scale folded into exp2 (one FFMA per score).
// Scores and outputs are register tensors viewed as (rows, columns) (accumulator_rows_columns);
// the four consecutive lanes that share a row combine their maxima and sums by shuffles.

#include <cute/tensor.hpp>

#include <cmath>

namespace spattn::cuda::hopper {

/// The maximum (or sum) of `value` over the four lanes that hold one row of a wgmma accumulator.
template <class Combine>
__device__ inline float across_row_lanes(float value, Combine combine) {
  value = combine(value, __shfl_xor_sync(0xffffffffu, value, 1));
  return combine(value, __shfl_xor_sync(0xffffffffu, value, 2));
}

/// 2^x by one MUFU.EX2, results below 2^-126 flushed to zero. exp2f without fast math wraps
/// each exponential in three more instructions to keep such denormal results (a third more
/// instructions per score); they are below 2^-126 of the row's largest probability (which is 1),
/// so no fp32 sum can see them.
__device__ inline float exp2_flush_denormals(float x) {
  float result;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(result) : "f"(x));
  return result;
}

/// The maximum or sum of a row's columns in four independent chains, so that the reduction's
/// latency is a quarter of the row's length (the columns per thread are a multiple of 4).
template <class Row, class Combine>
__device__ inline float reduce_columns(const Row& row, float initial, Combine combine) {
  constexpr int kColumns = decltype(cute::size(row))::value;
  static_assert(kColumns % 4 == 0);
  float chain[4] = {initial, row(1), row(2), row(3)};
  chain[0] = combine(chain[0], row(0));
  CUTE_UNROLL
  for (int column = 4; column < kColumns; ++column) chain[column % 4] = combine(chain[column % 4], row(column));
  return combine(combine(chain[0], chain[1]), combine(chain[2], chain[3]));
}

template <int kRows>
struct OnlineSoftmax {
  float scale;                 // softmax scale
  float scale_log2;            // scale * log2(e): exp(scale s) = exp2(scale_log2 s)
  float row_max[kRows];        // of the raw scores seen so far; -inf while a row has seen no key
  float row_sum[kRows];        // this lane's share of sum_j exp(scale (s_j - row_max))
  float correction[kRows];     // what the last update multiplied earlier sums and outputs by

  __device__ explicit OnlineSoftmax(float scale_) : scale(scale_), scale_log2(scale_ * float(M_LOG2E)) {
    for (int row = 0; row < kRows; ++row) {
      row_max[row] = -INFINITY;
      row_sum[row] = 0.0f;
      correction[row] = 1.0f;
    }
  }

  /// Takes the next key tile's scores s (rows, columns; masked scores are -inf) and leaves
  /// p = exp(scale (s - m')) in their place, where m' is the new row maximum; earlier sums
  /// are rescaled here, earlier outputs must be rescaled by `correction` by the caller.
  template <class Scores>
  __device__ void update(Scores& s) {
    static_assert(decltype(cute::size<0>(s))::value == kRows);
    CUTE_UNROLL
    for (int row = 0; row < kRows; ++row) {
      const auto maximum = [](float a, float b) { return fmaxf(a, b); };
      const float new_max = across_row_lanes(reduce_columns(s(row, cute::_), row_max[row], maximum), maximum);
      // A row that has seen no visible key yet keeps max -inf: take 0 instead so that its
      // scores (all -inf) give exp2(-inf) = 0 and never -inf - (-inf) = NaN.
      const float max_scaled = new_max == -INFINITY ? 0.0f : new_max * scale_log2;
      // row_max -inf (nothing before): exp2(-inf) = 0 scales the empty sums and outputs.
      correction[row] = exp2_flush_denormals(row_max[row] * scale_log2 - max_scaled);
      row_max[row] = new_max;
      CUTE_UNROLL
      for (int column = 0; column < cute::size<1>(s); ++column)
        s(row, column) = exp2_flush_denormals(fmaf(s(row, column), scale_log2, -max_scaled));
      const auto plus = [](float a, float b) { return a + b; };
      row_sum[row] = reduce_columns(s(row, cute::_), row_sum[row] * correction[row], plus);
    }
  }

  /// Ends the compiler's basic block after the last update: a branch on its result that is never
  /// taken (a sum of exponentials is not negative). ptxas (CUDA 13.0) moves wgmma.wait_group as
  /// early in its block as it can, ahead of independent arithmetic: without a block boundary here,
  /// the wait for O's product lands before this tile's softmax, which then never overlaps the
  /// product (seen in the SASS of every instantiation; shuffles, named barriers and __syncwarp
  /// do not stop it, a branch does).
  __device__ void end_block_after_update() const {
    float smallest = row_sum[0];
    CUTE_UNROLL
    for (int row = 1; row < kRows; ++row) smallest = fminf(smallest, row_sum[row]);
    if (smallest < 0.0f) __nanosleep(0);
  }

  /// out *= correction row by row (after update, once the products that read the old
  /// probabilities have finished).
  template <class Output>
  __device__ void rescale(Output& out) const {
    CUTE_UNROLL
    for (int row = 0; row < kRows; ++row) {
      CUTE_UNROLL
      for (int column = 0; column < cute::size<1>(out); ++column) out(row, column) *= correction[row];
    }
  }

  /// After the last key tile: each row's lse = scale * max + log(sum) (natural log; -inf for a
  /// row that saw no key) into `lse`, and 1 / sum (0 for such a row) into `normalizer`.
  __device__ void finish(float (&lse)[kRows], float (&normalizer)[kRows]) const {
    CUTE_UNROLL
    for (int row = 0; row < kRows; ++row) {
      const float sum = across_row_lanes(row_sum[row], [](float a, float b) { return a + b; });
      const bool saw_keys = sum > 0.0f;
      lse[row] = saw_keys ? row_max[row] * scale + logf(sum) : -INFINITY;
      normalizer[row] = saw_keys ? 1.0f / sum : 0.0f;
    }
  }
};

}  // namespace spattn::cuda::hopper
