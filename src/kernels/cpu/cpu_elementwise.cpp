#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <vector>

#include "kernels/cpu/cpu_kernels.hpp"
#include "kernels/cpu/element_access.hpp"
#include "spattn/error.hpp"

namespace spattn::cpu {
namespace {

constexpr float kMinusInfinity = -std::numeric_limits<float>::infinity();

void check_same_shape(const TensorView& a, const char* a_name, const TensorView& b, const char* b_name) {
  bool same = a.ndim == b.ndim;
  for (int d = 0; same && d < a.ndim; ++d) same = a.size(d) == b.size(d);
  SPATTN_CHECK(same, a_name << " " << a.describe() << " and " << b_name << " " << b.describe()
                            << " must have the same shape");
}

void check_cpu(const TensorView& tensor, const char* name) {
  SPATTN_CHECK(tensor.device == Device::cpu(), name << " " << tensor.describe() << " must be on the cpu");
}

void check_fp32(const TensorView& tensor, const char* name) {
  SPATTN_CHECK(tensor.dtype == DType::f32, name << " is " << tensor.describe() << ", expected fp32");
}

/// Checks that `out` is (B, S, H, D) and `statistics` is its (B, H, S) fp32 row statistic.
void check_rows_and_statistics(const TensorView& out, const char* out_name, const TensorView& statistics,
                               const char* statistics_name) {
  check_cpu(out, out_name);
  check_cpu(statistics, statistics_name);
  SPATTN_CHECK(out.ndim == 4, out_name << " is " << out.describe() << ", expected (B, S, H, D)");
  SPATTN_CHECK(statistics.ndim == 3 && statistics.size(0) == out.size(0) && statistics.size(1) == out.size(2) &&
                   statistics.size(2) == out.size(1),
               statistics_name << " is " << statistics.describe() << ", expected (B, H, S) = (" << out.size(0)
                               << ", " << out.size(2) << ", " << out.size(1) << ")");
  check_fp32(statistics, statistics_name);
}

/// Pointer to the first element of row (b, s, h) of a (B, S, H, D) tensor.
void* row_pointer(const TensorView& tensor, int64_t batch, int64_t position, int64_t head) {
  return tensor.element_pointer({batch, position, head, 0});
}

float& statistic(const TensorView& statistics, int64_t batch, int64_t head, int64_t position) {
  return *static_cast<float*>(statistics.element_pointer({batch, head, position, 0}));
}

/// The index of the first element of run `flat` when a tensor is walked as runs along its last
/// dimension, outer dimensions in row-major order.
std::array<int64_t, TensorView::kMaxDims> run_start_index(const TensorView& tensor, int64_t flat) {
  std::array<int64_t, TensorView::kMaxDims> index{};
  for (int d = tensor.ndim - 2; d >= 0; --d) {
    index[static_cast<std::size_t>(d)] = flat % tensor.size(d);
    flat /= tensor.size(d);
  }
  return index;
}

/// Calls visit(source_index, chunk_begin, chunk_length) for every chunk of at most kRunChunk
/// elements along the last dimension of a tensor with `tensor`'s shape, in parallel when large.
constexpr int64_t kRunChunk = 256;

template <typename Visit>
void for_each_run_chunk(const TensorView& tensor, Visit visit) {
  const int64_t run = tensor.size(tensor.ndim - 1);
  const int64_t runs = run == 0 ? 0 : tensor.numel() / run;
#pragma omp parallel for schedule(static) if (tensor.numel() > (1 << 16))
  for (int64_t flat = 0; flat < runs; ++flat) {
    std::array<int64_t, TensorView::kMaxDims> index = run_start_index(tensor, flat);
    for (int64_t begin = 0; begin < run; begin += kRunChunk) {
      index[static_cast<std::size_t>(tensor.ndim - 1)] = begin;
      visit(index, std::min(kRunChunk, run - begin));
    }
  }
}

void check_elementwise_operand(const TensorView& tensor, const char* name) {
  check_cpu(tensor, name);
  SPATTN_CHECK(tensor.ndim >= 1 && tensor.ndim <= TensorView::kMaxDims,
               name << " " << tensor.describe() << " has " << tensor.ndim << " dimensions; allowed: 1 to "
                    << TensorView::kMaxDims);
}

void check_elementwise_pair(const TensorView& source, const TensorView& destination) {
  check_elementwise_operand(source, "source");
  check_elementwise_operand(destination, "destination");
  check_same_shape(source, "source", destination, "destination");
}

}  // namespace

void merge_partial(const TensorView& partial_out,  // (B, S, H, D) any dtype
                   const TensorView& partial_lse,  // (B, H, S) fp32
                   TensorView running_out,         // (B, S, H, D) fp32
                   TensorView running_lse) {       // (B, H, S) fp32
  check_rows_and_statistics(partial_out, "partial_out", partial_lse, "partial_lse");
  check_rows_and_statistics(running_out, "running_out", running_lse, "running_lse");
  check_same_shape(partial_out, "partial_out", running_out, "running_out");
  check_fp32(running_out, "running_out");
  const int64_t batch_size = running_out.size(0), sequence = running_out.size(1), heads = running_out.size(2),
                head_dim = running_out.size(3);
#pragma omp parallel
  {
    std::vector<float> partial_row(static_cast<std::size_t>(head_dim));
#pragma omp for collapse(2) schedule(static)
    for (int64_t batch = 0; batch < batch_size; ++batch)
      for (int64_t position = 0; position < sequence; ++position)
        for (int64_t head = 0; head < heads; ++head) {
          float& lse = statistic(running_lse, batch, head, position);
          const float lse_partial = statistic(partial_lse, batch, head, position);
          float* out = static_cast<float*>(row_pointer(running_out, batch, position, head));
          const int64_t out_stride = running_out.stride(3);
          const float high = std::max(lse, lse_partial);
          if (high == kMinusInfinity) {
            // Neither side saw a key.
            for (int64_t d = 0; d < head_dim; ++d) out[d * out_stride] = 0.0f;
            continue;
          }
          const float low = std::min(lse, lse_partial);
          // lse' = max + log1p(exp(min - max)) = max + gap
          const float gap = std::log1p(std::exp(low - high));
          const float merged = high + gap;
          // out' = out exp(lse - lse') + out_b exp(lse_b - lse'), with lse - lse' taken as
          // (lse - max) - gap rather than from the rounded lse': where |lse| is large its rounding
          // (an ulp of 1e4 is 1e-3) would scale both weights and leave their sum off 1. A side
          // with lse = -inf has weight 0 and is skipped, so its out never reaches the result.
          const float running_weight = std::exp((lse - high) - gap);
          const float partial_weight = std::exp((lse_partial - high) - gap);
          if (partial_weight == 0.0f) {
            for (int64_t d = 0; d < head_dim; ++d) out[d * out_stride] *= running_weight;
          } else {
            load_run_as_float(row_pointer(partial_out, batch, position, head), partial_out.dtype,
                              partial_out.stride(3), head_dim, partial_row.data());
            for (int64_t d = 0; d < head_dim; ++d) {
              const float running = running_weight == 0.0f ? 0.0f : out[d * out_stride] * running_weight;
              out[d * out_stride] = running + partial_row[static_cast<std::size_t>(d)] * partial_weight;
            }
          }
          lse = merged;
        }
  }
}

void softmax_delta(const TensorView& out,   // (B, S, H, D)
                   const TensorView& dout,  // (B, S, H, D)
                   TensorView delta) {      // (B, H, S) fp32
  check_rows_and_statistics(out, "out", delta, "delta");
  check_cpu(dout, "dout");
  check_same_shape(out, "out", dout, "dout");
  const int64_t batch_size = out.size(0), sequence = out.size(1), heads = out.size(2), head_dim = out.size(3);
#pragma omp parallel
  {
    std::vector<float> out_row(static_cast<std::size_t>(head_dim));
    std::vector<float> dout_row(static_cast<std::size_t>(head_dim));
#pragma omp for collapse(2) schedule(static)
    for (int64_t batch = 0; batch < batch_size; ++batch)
      for (int64_t position = 0; position < sequence; ++position)
        for (int64_t head = 0; head < heads; ++head) {
          load_run_as_float(row_pointer(out, batch, position, head), out.dtype, out.stride(3), head_dim,
                            out_row.data());
          load_run_as_float(row_pointer(dout, batch, position, head), dout.dtype, dout.stride(3), head_dim,
                            dout_row.data());
          // delta = sum_d out_d * dout_d
          float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
          for (int64_t d = 0; d < head_dim; ++d) sum += out_row[d] * dout_row[d];
          statistic(delta, batch, head, position) = sum;
        }
  }
}

void copy_converting(const TensorView& source, TensorView destination) {
  check_elementwise_pair(source, destination);
  const int last = source.ndim - 1;
  for_each_run_chunk(source, [&](const std::array<int64_t, TensorView::kMaxDims>& index, int64_t count) {
    float values[kRunChunk];
    load_run_as_float(source.element_pointer(index), source.dtype, source.stride(last), count, values);
    store_run_from_float(values, count, destination.element_pointer(index), destination.dtype,
                         destination.stride(last));
  });
}

void add_converting(const TensorView& source, TensorView destination) {
  check_elementwise_pair(source, destination);
  check_fp32(destination, "destination");
  const int last = source.ndim - 1;
  for_each_run_chunk(source, [&](const std::array<int64_t, TensorView::kMaxDims>& index, int64_t count) {
    float values[kRunChunk];
    load_run_as_float(source.element_pointer(index), source.dtype, source.stride(last), count, values);
    float* sums = static_cast<float*>(destination.element_pointer(index));
    for (int64_t i = 0; i < count; ++i) sums[i * destination.stride(last)] += values[i];
  });
}

void fill(TensorView destination, float value) {
  check_elementwise_operand(destination, "destination");
  float values[kRunChunk];
  std::fill(values, values + kRunChunk, value);
  const int last = destination.ndim - 1;
  for_each_run_chunk(destination, [&](const std::array<int64_t, TensorView::kMaxDims>& index, int64_t count) {
    store_run_from_float(values, count, destination.element_pointer(index), destination.dtype,
                         destination.stride(last));
  });
}

}  // namespace spattn::cpu
