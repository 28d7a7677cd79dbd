// See block_reference.hpp.

#include "block_reference.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

namespace spattn::test {

namespace {
constexpr double kMinusInfinity = -std::numeric_limits<double>::infinity();
}  // namespace

BlockProblem make_problem(const BlockCase& c, DType dtype, int64_t head_dim, float scale, std::mt19937& generator,
                          bool with_backward) {
  const int64_t batch = c.batch, heads = c.heads, kv_heads = c.kv_heads;
  BlockProblem p;
  p.q = HostTensor(dtype, {batch, c.q_rows, heads, head_dim});
  p.dout = HostTensor(dtype, {batch, c.q_rows, heads, head_dim});
  p.q.randomize(generator);
  p.dout.randomize(generator);
  for (const SegmentSpec& s : c.segments) {
    p.k.emplace_back(dtype, std::initializer_list<int64_t>{batch, s.keys, kv_heads, head_dim});
    p.v.emplace_back(dtype, std::initializer_list<int64_t>{batch, s.keys, kv_heads, head_dim});
    p.k.back().randomize(generator);
    p.v.back().randomize(generator);
  }
  const int64_t S = c.q_rows, D = head_dim, group = heads / kv_heads;
  const auto qi = [&](int64_t b, int64_t i, int64_t h, int64_t d) { return ((b * S + i) * heads + h) * D + d; };
  p.out.assign(static_cast<std::size_t>(batch * S * heads * D), 0.0);
  p.dq.assign(p.out.size(), 0.0);
  p.lse.assign(static_cast<std::size_t>(batch * heads * S), kMinusInfinity);
  for (const SegmentSpec& s : c.segments) {
    p.dk.emplace_back(static_cast<std::size_t>(batch * s.keys * kv_heads * D), 0.0);
    p.dv.emplace_back(p.dk.back().size(), 0.0);
  }
  const std::vector<double> q = p.q.values(), dout = p.dout.values();
  std::vector<std::vector<double>> k, v;
  for (std::size_t s = 0; s < c.segments.size(); ++s) {
    k.push_back(p.k[s].values());
    v.push_back(p.v[s].values());
  }
  const auto ki = [&](int64_t b, std::size_t s, int64_t j, int64_t h, int64_t d) {
    return ((b * c.segments[s].keys + j) * kv_heads + h / group) * D + d;
  };
  const auto score = [&](int64_t b, int64_t i, int64_t h, std::size_t s, int64_t j) {
    double dot = 0;
    for (int64_t d = 0; d < D; ++d) dot += q[qi(b, i, h, d)] * k[s][ki(b, s, j, h, d)];
    return scale * dot;
  };
  const auto probability_grad = [&](int64_t b, int64_t i, int64_t h, std::size_t s, int64_t j) {
    double dp = 0;  // dP = dout . v_j
    for (int64_t d = 0; d < D; ++d) dp += dout[qi(b, i, h, d)] * v[s][ki(b, s, j, h, d)];
    return dp;
  };
  std::vector<double> delta(p.lse.size(), 0.0);  // (B, H, Sq): dout . out
  // Two passes, each element of the results written by one iteration, in the order a single loop
  // over the rows would add it (the same bits at any thread count): a row at a time its lse, out
  // and dq; then a key at a time its dk and dv, over the rows of its group's heads. In parallel:
  // on one core a GPU test's larger block took seconds here (4 s for 600 rows against 1500 keys at
  // D 128), most of the GPU tests' time on the device machines (16 cores).
#pragma omp parallel for schedule(dynamic)
  for (int64_t row = 0; row < batch * heads * S; ++row) {
    const int64_t b = row / (heads * S), h = row / S % heads, i = row % S;
    // scores of every visible key: (segment, key, scale * q.k)
    struct Score {
      std::size_t s;
      int64_t j;
      double value;
    };
    std::vector<Score> scores;
    double max_score = kMinusInfinity;
    for (std::size_t s = 0; s < c.segments.size(); ++s)
      for (int64_t j = 0; j < c.segments[s].keys; ++j) {
        if (!c.mask.visible(c.q_position + i, c.segments[s].position + j)) continue;
        scores.push_back({s, j, score(b, i, h, s, j)});
        max_score = std::max(max_score, scores.back().value);
      }
    if (scores.empty()) continue;
    double sum = 0;
    for (const Score& sc : scores) sum += std::exp(sc.value - max_score);
    const double lse = max_score + std::log(sum);
    p.lse[static_cast<std::size_t>(row)] = lse;
    // out = sum_j P_j v_j;  delta = dout . out;  dS_j = P_j (dout . v_j - delta)
    std::vector<double> out_row(static_cast<std::size_t>(D), 0.0);
    for (const Score& sc : scores) {
      const double probability = std::exp(sc.value - lse);
      for (int64_t d = 0; d < D; ++d) out_row[d] += probability * v[sc.s][ki(b, sc.s, sc.j, h, d)];
    }
    for (int64_t d = 0; d < D; ++d) {
      p.out[qi(b, i, h, d)] = out_row[d];
      delta[static_cast<std::size_t>(row)] += dout[qi(b, i, h, d)] * out_row[d];
    }
    if (!with_backward) continue;
    for (const Score& sc : scores) {
      const double ds = std::exp(sc.value - lse) * (probability_grad(b, i, h, sc.s, sc.j) - delta[row]);
      for (int64_t d = 0; d < D; ++d) p.dq[qi(b, i, h, d)] += scale * ds * k[sc.s][ki(b, sc.s, sc.j, h, d)];
    }
  }
  if (!with_backward) return p;
  for (std::size_t s = 0; s < c.segments.size(); ++s) {
    const int64_t keys = c.segments[s].keys;
#pragma omp parallel for schedule(dynamic)
    for (int64_t key = 0; key < batch * kv_heads * keys; ++key) {
      const int64_t b = key / (kv_heads * keys), kv_head = key / keys % kv_heads, j = key % keys;
      const int64_t base = ki(b, s, j, kv_head * group, 0);
      for (int64_t h = kv_head * group; h < (kv_head + 1) * group; ++h)
        for (int64_t i = 0; i < S; ++i) {
          if (!c.mask.visible(c.q_position + i, c.segments[s].position + j)) continue;
          const std::size_t row = static_cast<std::size_t>((b * heads + h) * S + i);
          const double probability = std::exp(score(b, i, h, s, j) - p.lse[row]);
          const double ds = probability * (probability_grad(b, i, h, s, j) - delta[row]);
          for (int64_t d = 0; d < D; ++d) {
            p.dv[s][base + d] += probability * dout[qi(b, i, h, d)];
            p.dk[s][base + d] += scale * ds * q[qi(b, i, h, d)];
          }
        }
    }
  }
  return p;
}

/// An fp32 host tensor of `values` in `shape` (the reference's out and lse handed to backward).
HostTensor host_f32(const std::vector<double>& values, std::initializer_list<int64_t> shape) {
  HostTensor tensor(DType::f32, shape);
  for (int64_t i = 0; i < tensor.numel(); ++i) tensor.set(i, values[static_cast<std::size_t>(i)]);
  return tensor;
}

/// |actual - expected| <= tolerance * (max |expected| + |expected|) + floor everywhere; -inf at
/// the same places; NaN anywhere (an element never written) fails. Prints the worst element.
double expect_near_reference(const std::vector<double>& expected, const HostTensor& actual, double tolerance,
                             const std::string& what) {
  EXPECT_EQ(static_cast<int64_t>(expected.size()), actual.numel()) << what;
  if (static_cast<int64_t>(expected.size()) != actual.numel()) return INFINITY;
  double scale = 0;
  for (double e : expected)
    if (std::isfinite(e)) scale = std::max(scale, std::abs(e));
  double worst = 0;
  int64_t worst_index = -1, unwritten = 0, misplaced_infinities = 0, over = 0;
  for (int64_t i = 0; i < actual.numel(); ++i) {
    const double a = actual.at(i), e = expected[static_cast<std::size_t>(i)];
    if (std::isnan(a)) { ++unwritten; continue; }
    if (std::isinf(e) || std::isinf(a)) { misplaced_infinities += (a != e); continue; }
    const double error = std::abs(a - e);
    if (error > tolerance * (scale + std::abs(e)) + 1e-6) ++over;
    if (error > worst) { worst = error; worst_index = i; }
  }
  EXPECT_EQ(unwritten, 0) << what << ": " << unwritten << " elements are NaN (never written?)";
  EXPECT_EQ(misplaced_infinities, 0) << what << ": -inf (rows that see no key) at other places than expected";
  EXPECT_EQ(over, 0) << what << ": " << over << " elements over tolerance " << tolerance << " x (max |expected| "
                     << scale << " + |expected|); worst error " << worst << " at element " << worst_index
                     << (worst_index >= 0 ? " (expected " + std::to_string(expected[worst_index]) + ", got " +
                                                std::to_string(actual.at(worst_index)) + ")"
                                          : std::string());
  return scale > 0 ? worst / scale : worst;
}

std::vector<double> values_of(const HostTensor& tensor) { return tensor.values(); }

}  // namespace spattn::test
