// CPU kernel benchmark: this machine's fp32 FMA peak, then the block forward and backward at
// one head size, as GFLOP/s and % of that peak.
//
//   spattn_cpu_kernel_bench [--batch 1] [--heads 4] [--kv-heads H] [--seq 4096] [--head-dim 128]
//                           [--causal | --non-causal] [--iters 3] [--no-backward]
//
// FLOP counted as flash-attn does: forward 4 B H S^2 D (half with causal), backward 2.5x that.

#include <omp.h>

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/block_kernels.hpp"

namespace {

struct BenchOptions {
  int64_t batch = 1;
  int64_t heads = 4;
  int64_t kv_heads = 0;  // 0: same as heads
  int64_t sequence = 4096;
  int64_t head_dim = 128;
  bool run_non_causal = true;
  bool run_causal = true;
  bool run_backward = true;
  int iterations = 3;
};

[[noreturn]] void usage(const char* program) {
  std::fprintf(stderr,
               "usage: %s [--batch B] [--heads H] [--kv-heads HK] [--seq S] [--head-dim D]\n"
               "          [--causal | --non-causal] [--iters N] [--no-backward]\n",
               program);
  std::exit(2);
}

BenchOptions parse(int argc, char** argv) {
  BenchOptions options;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    auto value = [&]() -> int64_t {
      if (i + 1 >= argc) usage(argv[0]);
      return std::atoll(argv[++i]);
    };
    if (flag == "--batch") options.batch = value();
    else if (flag == "--heads") options.heads = value();
    else if (flag == "--kv-heads") options.kv_heads = value();
    else if (flag == "--seq") options.sequence = value();
    else if (flag == "--head-dim") options.head_dim = value();
    else if (flag == "--iters") options.iterations = static_cast<int>(value());
    else if (flag == "--causal") options.run_non_causal = false;
    else if (flag == "--non-causal") options.run_causal = false;
    else if (flag == "--no-backward") options.run_backward = false;
    else usage(argv[0]);
  }
  if (options.kv_heads == 0) options.kv_heads = options.heads;
  if (options.batch < 1 || options.heads < 1 || options.sequence < 1 || options.head_dim < 1 ||
      options.iterations < 1 || options.heads % options.kv_heads != 0)
    usage(argv[0]);
  return options;
}

/// fp32 FLOP/s of fused multiply-adds on every OpenMP thread: independent accumulator chains,
/// more of them than FMA latency x FMA ports, so the units never wait on a result.
double measure_fma_peak() {
  constexpr int64_t kRepetitions = 20'000'000;
  constexpr int kAccumulators = 12;
  double best_seconds = 1e30;
  int threads = 1;
  for (int trial = 0; trial < 3; ++trial) {
    double seconds = 0.0;
#pragma omp parallel reduction(max : seconds)
    {
#pragma omp single
      threads = omp_get_num_threads();
      float sink = 0.0f;
#pragma omp barrier
      const double start = omp_get_wtime();
#if defined(__AVX2__) && defined(__FMA__)
      // acc = acc * 0.999999 + 1e-6 stays near 1: no overflow, no denormals.
      const __m256 multiplier = _mm256_set1_ps(0.999999f);
      const __m256 addend = _mm256_set1_ps(1e-6f);
      __m256 accumulators[kAccumulators];
      for (__m256& accumulator : accumulators) accumulator = _mm256_set1_ps(1.0f);
      for (int64_t r = 0; r < kRepetitions; ++r)
        for (__m256& accumulator : accumulators) accumulator = _mm256_fmadd_ps(accumulator, multiplier, addend);
      for (__m256& accumulator : accumulators) {
        float lanes[8];
        _mm256_storeu_ps(lanes, accumulator);
        for (float lane : lanes) sink += lane;
      }
      constexpr int kLanes = 8;
#else
      constexpr int kLanes = 1;
      float accumulators[kAccumulators];
      for (float& accumulator : accumulators) accumulator = 1.0f;
      for (int64_t r = 0; r < kRepetitions; ++r)
        for (float& accumulator : accumulators) accumulator = accumulator * 0.999999f + 1e-6f;
      for (float accumulator : accumulators) sink += accumulator;
#endif
      seconds = omp_get_wtime() - start;
      if (sink == 42.0f) std::printf(" ");  // keeps the loop observable
      (void)kLanes;
    }
    best_seconds = std::min(best_seconds, seconds);
  }
#if defined(__AVX2__) && defined(__FMA__)
  const double lanes = 8.0;
#else
  const double lanes = 1.0;
#endif
  // 2 FLOP per lane per FMA.
  const double flop = 2.0 * lanes * kAccumulators * static_cast<double>(kRepetitions) * threads;
  std::printf("fma peak: %.1f GFLOP/s fp32 on %d threads (%s)\n", flop / best_seconds * 1e-9, threads,
              lanes == 8.0 ? "AVX2 FMA" : "scalar fallback: not a real peak");
  return flop / best_seconds;
}

std::vector<float> random_values(int64_t count, std::mt19937& generator) {
  std::normal_distribution<float> distribution(0.0f, 1.0f);
  std::vector<float> values(static_cast<std::size_t>(count));
  for (float& value : values) value = distribution(generator);
  return values;
}

/// Best of `iterations` wall-clock seconds of `run`, after one warm-up call.
template <typename Run>
double best_seconds(int iterations, Run run) {
  run();
  double best = 1e30;
  for (int i = 0; i < iterations; ++i) {
    const double start = omp_get_wtime();
    run();
    best = std::min(best, omp_get_wtime() - start);
  }
  return best;
}

void bench_attention(const BenchOptions& options, bool causal, double peak) {
  using spattn::DType;
  using spattn::TensorView;
  const int64_t b = options.batch, s = options.sequence, h = options.heads, hk = options.kv_heads,
                d = options.head_dim;
  std::mt19937 generator(1);
  std::vector<float> q = random_values(b * s * h * d, generator), k = random_values(b * s * hk * d, generator),
                     v = random_values(b * s * hk * d, generator), dout = random_values(b * s * h * d, generator);
  std::vector<float> out(q.size()), lse(static_cast<std::size_t>(b * h * s)), delta(lse.size());
  std::vector<float> dq(q.size()), dk(k.size()), dv(v.size());
  auto view = [](std::vector<float>& values, std::initializer_list<int64_t> shape) {
    return TensorView::contiguous(values.data(), DType::f32, shape);
  };
  spattn::AttentionOptions attention_options;
  attention_options.causal = causal;
  const spattn::AttentionMask mask = spattn::AttentionMask::from_options(attention_options);
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  const spattn::KvSegment segment{view(k, {b, s, hk, d}), view(v, {b, s, hk, d}), 0};
  auto kernels = spattn::make_cpu_block_kernels();

  const spattn::ForwardBlock forward{view(q, {b, s, h, d}), 0, {segment}, mask, scale, view(out, {b, s, h, d}),
                                     view(lse, {b, h, s})};
  const double forward_seconds = best_seconds(options.iterations, [&] { kernels->forward(forward); });
  const double forward_flop = 4.0 * b * h * static_cast<double>(s) * s * d * (causal ? 0.5 : 1.0);
  std::printf("forward  %-10s B=%ld H=%ld HK=%ld S=%ld D=%ld: %8.2f ms  %7.1f GFLOP/s  %5.1f%% of peak\n",
              causal ? "causal" : "non-causal", static_cast<long>(b), static_cast<long>(h), static_cast<long>(hk),
              static_cast<long>(s), static_cast<long>(d), forward_seconds * 1e3, forward_flop / forward_seconds * 1e-9,
              100.0 * forward_flop / forward_seconds / peak);
  if (!options.run_backward) return;

  kernels->softmax_delta(view(out, {b, s, h, d}), view(dout, {b, s, h, d}), view(delta, {b, h, s}));
  spattn::BackwardBlock backward;
  backward.q = view(q, {b, s, h, d});
  backward.segments = {spattn::KvGradSegment{segment, view(dk, {b, s, hk, d}), view(dv, {b, s, hk, d})}};
  backward.dout = view(dout, {b, s, h, d});
  backward.lse = view(lse, {b, h, s});
  backward.delta = view(delta, {b, h, s});
  backward.mask = mask;
  backward.scale = scale;
  backward.dq = view(dq, {b, s, h, d});
  const double backward_seconds = best_seconds(options.iterations, [&] { kernels->backward(backward); });
  const double backward_flop = 2.5 * forward_flop;
  std::printf("backward %-10s B=%ld H=%ld HK=%ld S=%ld D=%ld: %8.2f ms  %7.1f GFLOP/s  %5.1f%% of peak\n",
              causal ? "causal" : "non-causal", static_cast<long>(b), static_cast<long>(h), static_cast<long>(hk),
              static_cast<long>(s), static_cast<long>(d), backward_seconds * 1e3,
              backward_flop / backward_seconds * 1e-9, 100.0 * backward_flop / backward_seconds / peak);
}

}  // namespace

int main(int argc, char** argv) {
  const BenchOptions options = parse(argc, argv);
  const double peak = measure_fma_peak();
  if (options.run_non_causal) bench_attention(options, false, peak);
  if (options.run_causal) bench_attention(options, true, peak);
  return 0;
}
