#include "spattn/reference_attention.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "core/dtype_conversion.hpp"
#include "spattn/error.hpp"

// Row by row in fp64: for each query, the scores of all keys, their softmax, then the output
// and (with dout) the gradients. Straightforward on purpose: this is the ground truth.

namespace spattn {
namespace {

constexpr double kMinusInfinity = -std::numeric_limits<double>::infinity();

/// The tensor's values as stored, in fp64, contiguous (B, S, H, D).
std::vector<double> to_double(const TensorView& tensor, const char* name) {
  SPATTN_CHECK(tensor.device == Device::cpu(), name << " " << tensor.describe() << " must be on the cpu");
  SPATTN_CHECK(tensor.ndim == 4, name << " is " << tensor.describe() << ", expected (B, S, H, D)");
  std::vector<double> values(static_cast<std::size_t>(tensor.numel()));
  std::size_t next = 0;
  for (int64_t b = 0; b < tensor.size(0); ++b)
    for (int64_t s = 0; s < tensor.size(1); ++s)
      for (int64_t h = 0; h < tensor.size(2); ++h)
        for (int64_t d = 0; d < tensor.size(3); ++d) {
          const void* element = tensor.element_pointer({b, s, h, d});
          switch (tensor.dtype) {
            case DType::f32: values[next++] = *static_cast<const float*>(element); break;
            case DType::f16: values[next++] = fp16_to_float(*static_cast<const uint16_t*>(element)); break;
            case DType::bf16: values[next++] = bf16_to_float(*static_cast<const uint16_t*>(element)); break;
          }
        }
  return values;
}

void check_shape(const TensorView& tensor, const char* name, int64_t batch, int64_t sequence, int64_t heads,
                 int64_t head_dim) {
  SPATTN_CHECK(tensor.ndim == 4 && tensor.size(0) == batch && tensor.size(1) == sequence &&
                   tensor.size(2) == heads && tensor.size(3) == head_dim,
               name << " is " << tensor.describe() << ", expected (" << batch << ", " << sequence << ", " << heads
                    << ", " << head_dim << ")");
}

}  // namespace

ReferenceResult reference_attention(const TensorView& q, const TensorView& k, const TensorView& v,
                                     const TensorView& dout, const AttentionOptions& options) {
  SPATTN_CHECK(q.ndim == 4, "q is " << q.describe() << ", expected (B, S, H, D)");
  const int64_t batch = q.size(0), sequence = q.size(1), heads = q.size(2), head_dim = q.size(3);
  SPATTN_CHECK(k.ndim == 4, "k is " << k.describe() << ", expected (B, S, HK, D)");
  const int64_t kv_heads = k.size(2);
  check_shape(k, "k", batch, sequence, kv_heads, head_dim);
  check_shape(v, "v", batch, sequence, kv_heads, head_dim);
  SPATTN_CHECK(kv_heads >= 1 && heads % kv_heads == 0,
               "heads (" << heads << ") must be divisible by kv_heads (" << kv_heads << ")");
  const bool with_gradients = dout.data != nullptr;
  if (with_gradients) check_shape(dout, "dout", batch, sequence, heads, head_dim);

  const std::vector<double> query = to_double(q, "q");
  const std::vector<double> key = to_double(k, "k");
  const std::vector<double> value = to_double(v, "v");
  const std::vector<double> out_gradient = with_gradients ? to_double(dout, "dout") : std::vector<double>{};
  const AttentionMask mask = AttentionMask::from_options(options);
  // The keys of query i's document: [document_begin[i], document_end[i]).
  const std::string documents_error = packed_documents_error(options.document_lengths, sequence);
  SPATTN_CHECK(documents_error.empty(), documents_error << " (q is " << q.describe() << ")");
  std::vector<int64_t> document_begin(static_cast<std::size_t>(sequence), 0),
      document_end(static_cast<std::size_t>(sequence), sequence);
  int64_t begin = 0;
  for (int64_t length : options.document_lengths) {
    std::fill(document_begin.begin() + begin, document_begin.begin() + begin + length, begin);
    std::fill(document_end.begin() + begin, document_end.begin() + begin + length, begin + length);
    begin += length;
  }
  const double scale = options.softmax_scale ? *options.softmax_scale : 1.0 / std::sqrt(static_cast<double>(head_dim));
  const int64_t group = heads / kv_heads;

  ReferenceResult result;
  const std::size_t q_elements = query.size(), kv_elements = key.size();
  result.out.assign(q_elements, 0.0);
  result.lse.assign(static_cast<std::size_t>(batch * heads * sequence), kMinusInfinity);
  if (with_gradients) {
    result.dq.assign(q_elements, 0.0);
    result.dk.assign(kv_elements, 0.0);
    result.dv.assign(kv_elements, 0.0);
  }
  // Flat offsets into the contiguous (B, S, H, D) and (B, S, HK, D) copies.
  auto q_row = [&](int64_t b, int64_t s, int64_t h) { return ((b * sequence + s) * heads + h) * head_dim; };
  auto kv_row = [&](int64_t b, int64_t s, int64_t h) { return ((b * sequence + s) * kv_heads + h) * head_dim; };

  // max_d |x| of each (B, S, heads, D) row.
  const auto row_maxima = [head_dim](const std::vector<double>& x) {
    std::vector<double> maxima(x.size() / static_cast<std::size_t>(head_dim), 0.0);
    for (std::size_t row = 0; row < maxima.size(); ++row)
      for (int64_t d = 0; d < head_dim; ++d)
        maxima[row] =
            std::max(maxima[row], std::abs(x[row * static_cast<std::size_t>(head_dim) + static_cast<std::size_t>(d)]));
    return maxima;
  };
  const std::vector<double> key_maxima = row_maxima(key);
  const std::vector<double> query_maxima = row_maxima(query);
  const std::vector<double> value_maxima = row_maxima(value);
  const std::vector<double> out_gradient_maxima = with_gradients ? row_maxima(out_gradient) : std::vector<double>{};
  double out_terms = 0.0, dq_terms = 0.0, dk_terms = 0.0, dv_terms = 0.0;

  // One (batch, kv head) per thread: dk and dv of a kv head sum over its query heads.
#pragma omp parallel for collapse(2) schedule(dynamic) reduction(max : out_terms, dq_terms, dk_terms, dv_terms)
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t kv_head = 0; kv_head < kv_heads; ++kv_head) {
      std::vector<double> probabilities(static_cast<std::size_t>(sequence));
      std::vector<double> weights(static_cast<std::size_t>(sequence));  // conditioning, then its weight
      for (int64_t h = kv_head * group; h < (kv_head + 1) * group; ++h)
        for (int64_t i = 0; i < sequence; ++i) {
          const auto row = static_cast<std::size_t>(i);
          const int64_t first = std::max<int64_t>(mask.first_visible_key(i), document_begin[row]);
          const int64_t last = std::min<int64_t>(mask.last_visible_key(i), document_end[row] - 1);
          if (first > last) continue;  // sees no key: out = 0, lse = -inf, no gradient
          const double* q_i = &query[static_cast<std::size_t>(q_row(b, i, h))];
          // s_j = scale * q_i . k_j
          double max_score = kMinusInfinity;
          for (int64_t j = first; j <= last; ++j) {
            const double* k_j = &key[static_cast<std::size_t>(kv_row(b, j, kv_head))];
            double dot = 0.0, dot_terms = 0.0;
            for (int64_t d = 0; d < head_dim; ++d) {
              dot += q_i[d] * k_j[d];
              dot_terms += std::abs(q_i[d] * k_j[d]);
            }
            probabilities[static_cast<std::size_t>(j)] = scale * dot;
            weights[static_cast<std::size_t>(j)] = scale * dot_terms;
            max_score = std::max(max_score, scale * dot);
          }
          // lse = m + log sum_j exp(s_j - m) ;  p_j = exp(s_j - lse)
          double sum = 0.0;
          for (int64_t j = first; j <= last; ++j) sum += std::exp(probabilities[static_cast<std::size_t>(j)] - max_score);
          const double lse = max_score + std::log(sum);
          result.lse[static_cast<std::size_t>((b * heads + h) * sequence + i)] = lse;
          double* out_i = &result.out[static_cast<std::size_t>(q_row(b, i, h))];
          for (int64_t j = first; j <= last; ++j) {
            double& p = probabilities[static_cast<std::size_t>(j)];
            p = std::exp(p - lse);
            // In the forward P moves, relative, by (1 + |score terms| + |lse|) units of round-off;
            // the floor's 1e-6 (16 fp32 units) of the magnitude covers 16 of them, the weight the
            // rest. The backward computes the score again, and where its block is cut otherwise
            // than the forward's (a distributed run fuses other blocks in each pass; the BLAS
            // rounds by the block's shape) that score's rounding comes on top of the one that lse
            // holds: its gradients' weight counts the score terms twice.
            double& weight = weights[static_cast<std::size_t>(j)];
            const auto weight_of = [&](double score_terms) {
              return std::max(1.0, (1.0 + score_terms + std::abs(lse)) / 16.0);
            };
            const double out_weight = weight_of(weight);
            weight = weight_of(2.0 * weight);
            const std::size_t kv = static_cast<std::size_t>(kv_row(b, j, kv_head));
            out_terms = std::max(out_terms, p * out_weight * value_maxima[kv / static_cast<std::size_t>(head_dim)]);
            const double* v_j = &value[kv];
            for (int64_t d = 0; d < head_dim; ++d) out_i[d] += p * v_j[d];
          }
          if (!with_gradients) continue;
          const double* dout_i = &out_gradient[static_cast<std::size_t>(q_row(b, i, h))];
          // delta = dout_i . out_i
          double delta = 0.0, delta_terms = 0.0;
          for (int64_t d = 0; d < head_dim; ++d) {
            delta += dout_i[d] * out_i[d];
            delta_terms += std::abs(dout_i[d] * out_i[d]);
          }
          double* dq_i = &result.dq[static_cast<std::size_t>(q_row(b, i, h))];
          const auto query_row = static_cast<std::size_t>(q_row(b, i, h) / head_dim);
          for (int64_t j = first; j <= last; ++j) {
            const std::size_t kv = static_cast<std::size_t>(kv_row(b, j, kv_head));
            const std::size_t key_row = kv / static_cast<std::size_t>(head_dim);
            const double p = probabilities[static_cast<std::size_t>(j)];
            // dp_j = dout_i . v_j ;  ds_j = p_j (dp_j - delta)
            double dp = 0.0, dp_terms = 0.0;
            for (int64_t d = 0; d < head_dim; ++d) {
              dp += dout_i[d] * value[kv + static_cast<std::size_t>(d)];
              dp_terms += std::abs(dout_i[d] * value[kv + static_cast<std::size_t>(d)]);
            }
            const double ds = p * (dp - delta);
            const double weight = weights[static_cast<std::size_t>(j)];
            const double ds_terms = scale * p * weight * (dp_terms + delta_terms);
            dq_terms = std::max(dq_terms, ds_terms * key_maxima[key_row]);
            dk_terms = std::max(dk_terms, ds_terms * query_maxima[query_row]);
            dv_terms = std::max(dv_terms, p * weight * out_gradient_maxima[query_row]);
            // dq_i += scale ds_j k_j ;  dk_j += scale ds_j q_i ;  dv_j += p_j dout_i
            for (int64_t d = 0; d < head_dim; ++d) {
              const std::size_t e = kv + static_cast<std::size_t>(d);
              dq_i[d] += scale * ds * key[e];
              result.dk[e] += scale * ds * q_i[d];
              result.dv[e] += p * dout_i[d];
            }
          }
        }
    }
  result.out_terms = out_terms;
  if (with_gradients) {
    result.dq_terms = dq_terms;
    result.dk_terms = dk_terms;
    result.dv_terms = dv_terms;
  }
  return result;
}

}  // namespace spattn
