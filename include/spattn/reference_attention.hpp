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
  /// The scale of fp32 round-off in out, dq, dk and dv where their magnitude misses it: the
  /// largest single term of an element (P v; dS k, dS q with dS's two sums dP and delta; P dout),
  /// weighted by how far its probability moves when its score and lse round beyond the 16 units
  /// of round-off that a floor of 1e-6 of a magnitude covers (max(1, (1 + |score terms| + |lse|)
  /// / 16), the score terms twice for the gradients, whose backward rounds the score again, not
  /// always in the forward's order: at scores of 1e4 an ulp of a score moves P by 1e-3). A
  /// gradient can be far smaller than its terms (dS = P (dP - delta) of a one-hot softmax, times
  /// keys of 100); its round-off is not. The gradients' are 0 without gradients.
  double out_terms = 0;
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
