#pragma once
/// \file reference_attention.hpp
/// Exact attention in fp64 on one host, the ground truth of every accuracy check.

#include <vector>

#include "spattn/attention_options.hpp"
#include "spattn/tensor.hpp"

namespace spattn {

/// Results in fp64, contiguous: out, dq (B, S, H, D); dk, dv (B, S, HK, D); lse (B, H, S).
/// Gradients are empty when no dout was given. Rows that see no key: out = 0, lse = -inf.
struct ReferenceResult {
  std::vector<double> out;
  std::vector<double> lse;
  std::vector<double> dq;
  std::vector<double> dk;
  std::vector<double> dv;
  /// The largest sum of the magnitudes of the terms that make one element of dq, dk or dv. A
  /// gradient can be a near cancellation of much larger terms (dS = P (dP - delta) of a row whose
  /// softmax is one-hot, times keys of magnitude 100): fp32 round-off then scales with these
  /// sums, not with the gradient. 0 without gradients.
  double dq_terms = 0;
  double dk_terms = 0;
  double dv_terms = 0;
};

/// Attention of the full sequence in fp64 from inputs of any dtype on the host (their values as
/// stored, so fp16/bf16 rounding of the inputs is not counted as error). With
/// options.document_lengths the sequence is those documents packed, without padding (their sum
/// is S), and each query sees only its own document.
/// \param[in] q     (B, S, H, D)
/// \param[in] k, v  (B, S, HK, D)
/// \param[in] dout  (B, S, H, D), or a view with data == nullptr for forward only
ReferenceResult reference_attention(const TensorView& q, const TensorView& k, const TensorView& v,
                                     const TensorView& dout, const AttentionOptions& options);

}  // namespace spattn
