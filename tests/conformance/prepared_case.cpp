#include "prepared_case.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <utility>

#include "accuracy_report.hpp"
#include "elementwise_reference.hpp"

namespace spattn::test {
namespace {

constexpr double kMinusInfinity = -std::numeric_limits<double>::infinity();

/// A seed of `text` (FNV-1a): each case its own inputs, the same ones at every run.
uint32_t seed_of(const std::string& text) {
  uint32_t hash = 2166136261u;
  for (unsigned char character : text) hash = (hash ^ character) * 16777619u;
  return hash;
}

HostTensor random_tensor(DType dtype, std::initializer_list<int64_t> shape, std::mt19937& generator) {
  HostTensor tensor(dtype, shape);
  tensor.randomize(generator);
  return tensor;
}

HostTensor poisoned_tensor(DType dtype, std::initializer_list<int64_t> shape) {
  HostTensor tensor(dtype, shape);
  tensor.poison();
  return tensor;
}

std::size_t add_tensor(PreparedCase& prepared, HostTensor tensor) {
  prepared.tensors.push_back(std::move(tensor));
  return prepared.tensors.size() - 1;
}

// ---- attention ------------------------------------------------------------------------------------

/// make_problem's inputs (q, dout, and k, v of each segment, standard normal) without its fp64
/// results, for the perf mode.
BlockProblem inputs_only(const BlockCase& block, DType dtype, int64_t head_dim, std::mt19937& generator) {
  BlockProblem problem;
  problem.q = random_tensor(dtype, {block.batch, block.q_rows, block.heads, head_dim}, generator);
  problem.dout = random_tensor(dtype, {block.batch, block.q_rows, block.heads, head_dim}, generator);
  for (const SegmentSpec& segment : block.segments) {
    problem.k.push_back(random_tensor(dtype, {block.batch, segment.keys, block.kv_heads, head_dim}, generator));
    problem.v.push_back(random_tensor(dtype, {block.batch, segment.keys, block.kv_heads, head_dim}, generator));
  }
  return problem;
}

/// Where a block's inputs sit in PreparedCase::tensors, and what its calls need besides.
struct BlockInputs {
  BlockCase block;
  float scale;
  std::size_t q, dout;
  std::vector<std::size_t> k, v;  // per segment

  /// Segments [first, end) over the device copies.
  std::vector<KvSegment> segments(const std::vector<DeviceTensor>& on_device, std::size_t first,
                                  std::size_t end) const {
    std::vector<KvSegment> result;
    for (std::size_t s = first; s < end; ++s)
      result.push_back({on_device[k[s]].view(), on_device[v[s]].view(), block.segments[s].position});
    return result;
  }
};

/// For every element of a (B, S, H, D) tensor: whether its row's lse (B, H, S) is -inf, a row
/// that sees no key.
std::vector<bool> rows_without_keys(const std::vector<double>& lse, const BlockCase& block, int64_t head_dim) {
  const int64_t rows = block.q_rows, heads = block.heads;
  std::vector<bool> flags(static_cast<std::size_t>(block.batch * rows * heads * head_dim));
  for (std::size_t element = 0; element < flags.size(); ++element) {
    const int64_t row = static_cast<int64_t>(element) / head_dim;  // (b * rows + s) * heads + h
    const int64_t b = row / (rows * heads), s = row / heads % rows, h = row % heads;
    flags[element] = lse[static_cast<std::size_t>((b * heads + h) * rows + s)] == kMinusInfinity;
  }
  return flags;
}

/// For every element of segment `s`'s (B, Sk, HK, D) key gradient: whether no query row of the
/// block sees its key.
std::vector<bool> keys_no_row_sees(const BlockCase& block, std::size_t s, int64_t head_dim) {
  const SegmentSpec& segment = block.segments[s];
  const int64_t per_key = block.kv_heads * head_dim;
  std::vector<bool> flags(static_cast<std::size_t>(block.batch * segment.keys * per_key));
  for (std::size_t element = 0; element < flags.size(); ++element) {
    const int64_t key = segment.position + static_cast<int64_t>(element) / per_key % segment.keys;
    flags[element] = !block.mask.any_visible(block.q_position, block.q_position + block.q_rows, key, key + 1);
  }
  return flags;
}

void prepare_forward(const BlockKernelCase& c, const BlockInputs& inputs, const BlockProblem& problem,
                     bool with_expectations, PreparedCase& prepared) {
  const int64_t B = c.block.batch, S = c.block.q_rows, H = c.block.heads, D = c.head_dim;
  const std::size_t out = add_tensor(prepared, poisoned_tensor(DType::f32, {B, S, H, D}));
  const std::size_t lse = add_tensor(prepared, poisoned_tensor(DType::f32, {B, H, S}));
  const bool to_final_out = c.operation == Operation::forward_final_out;
  const std::size_t final_out = to_final_out ? add_tensor(prepared, poisoned_tensor(c.dtype, {B, S, H, D})) : 0;
  const bool accumulate = c.operation == Operation::forward_accumulate;
  prepared.run = [inputs, out, lse, to_final_out, final_out, accumulate](BlockKernels& kernels,
                                                                        const std::vector<DeviceTensor>& on_device) {
    ForwardBlock block;
    block.q = on_device[inputs.q].view();
    block.q_position = inputs.block.q_position;
    block.mask = inputs.block.mask;
    block.scale = inputs.scale;
    block.out = on_device[out].view();
    block.lse = on_device[lse].view();
    if (to_final_out) block.final_out = on_device[final_out].view();
    const std::size_t segments = inputs.k.size();
    if (accumulate) {
      // The first segment written, the others merged onto it as a strategy's later steps are.
      block.segments = inputs.segments(on_device, 0, 1);
      kernels.forward(block);
      block.accumulate = true;
      block.segments = inputs.segments(on_device, 1, segments);
    } else {
      block.segments = inputs.segments(on_device, 0, segments);
    }
    kernels.forward(block);
  };
  if (!with_expectations) return;
  std::vector<bool> lse_without_keys;
  for (double value : problem.lse) lse_without_keys.push_back(value == kMinusInfinity);
  prepared.outputs.push_back({to_final_out ? "final_out" : "out", to_final_out ? final_out : out, OutputKind::attention,
                              problem.out, max_finite_magnitude(problem.out), false,
                              rows_without_keys(problem.lse, c.block, D)});
  prepared.outputs.push_back(
      {"lse", lse, OutputKind::lse, problem.lse, max_finite_magnitude(problem.lse), false, lse_without_keys});
}

void prepare_backward(const BlockKernelCase& c, const BlockInputs& inputs, const BlockProblem& problem,
                      bool with_expectations, std::mt19937& generator, PreparedCase& prepared) {
  const int64_t B = c.block.batch, S = c.block.q_rows, H = c.block.heads, HK = c.block.kv_heads, D = c.head_dim;
  // The final out and lse of the whole attention: the reference's; in the perf mode random out and
  // lse 0, which keeps every probability exp(score) of plausible size.
  HostTensor final_out = with_expectations ? host_f32(problem.out, {B, S, H, D})
                                           : random_tensor(DType::f32, {B, S, H, D}, generator);
  HostTensor final_lse(DType::f32, {B, H, S});
  if (with_expectations)
    final_lse = host_f32(problem.lse, {B, H, S});
  else
    final_lse.fill(0.0);
  const std::size_t out = add_tensor(prepared, std::move(final_out));
  const std::size_t lse = add_tensor(prepared, std::move(final_lse));
  // Kernels that recompute delta from out never write it: it stays NaN, and must not be read.
  const std::size_t delta = add_tensor(prepared, poisoned_tensor(DType::f32, {B, H, S}));
  const std::size_t dq = add_tensor(prepared, random_tensor(DType::f32, {B, S, H, D}, generator));
  std::vector<std::size_t> dk, dv;
  for (const SegmentSpec& segment : c.block.segments) {
    dk.push_back(add_tensor(prepared, random_tensor(DType::f32, {B, segment.keys, HK, D}, generator)));
    dv.push_back(add_tensor(prepared, random_tensor(DType::f32, {B, segment.keys, HK, D}, generator)));
  }
  prepared.run = [inputs, out, lse, delta, dq, dk, dv](BlockKernels& kernels,
                                                       const std::vector<DeviceTensor>& on_device) {
    // The calls a strategy makes for one block of its backward.
    kernels.prepare_backward_delta(on_device[out].view(), on_device[inputs.dout].view(), on_device[delta].view());
    BackwardBlock block;
    block.q = on_device[inputs.q].view();
    block.q_position = inputs.block.q_position;
    const std::vector<KvSegment> segments = inputs.segments(on_device, 0, inputs.k.size());
    for (std::size_t s = 0; s < segments.size(); ++s)
      block.segments.push_back({segments[s], on_device[dk[s]].view(), on_device[dv[s]].view()});
    block.dout = on_device[inputs.dout].view();
    block.out = on_device[out].view();
    block.lse = on_device[lse].view();
    block.delta = on_device[delta].view();
    block.mask = inputs.block.mask;
    block.scale = inputs.scale;
    block.dq = on_device[dq].view();
    kernels.backward(block);
  };
  if (!with_expectations) return;
  double gradient_magnitude = std::max(max_finite_magnitude(problem.out), max_finite_magnitude(problem.dq));
  for (std::size_t s = 0; s < dk.size(); ++s)
    gradient_magnitude =
        std::max({gradient_magnitude, max_finite_magnitude(problem.dk[s]), max_finite_magnitude(problem.dv[s])});
  prepared.outputs.push_back({"dq", dq, OutputKind::attention, problem.dq, gradient_magnitude, true,
                              rows_without_keys(problem.lse, c.block, D)});
  for (std::size_t s = 0; s < dk.size(); ++s) {
    const std::string segment = " of segment " + std::to_string(s);
    const std::vector<bool> unseen = keys_no_row_sees(c.block, s, D);
    prepared.outputs.push_back(
        {"dk" + segment, dk[s], OutputKind::attention, problem.dk[s], gradient_magnitude, true, unseen});
    prepared.outputs.push_back(
        {"dv" + segment, dv[s], OutputKind::attention, problem.dv[s], gradient_magnitude, true, unseen});
  }
}

/// The attention operations. FLOP as flash-attention counts them: 4 B H D per (query, key) pair,
/// so 4 B H Sq Sk D without a mask and half of it for a causal diagonal block; counted here over
/// the pairs the mask lets see (AttentionMask::visible_pairs), which says the same for any mask
/// and position. The backward is 2.5 times its forward.
void prepare_attention(const BlockKernelCase& c, bool with_expectations, std::mt19937& generator,
                       PreparedCase& prepared) {
  const BlockCase& block = c.block;
  const bool backward = c.operation == Operation::backward;
  BlockInputs inputs{block, 1.0f / std::sqrt(static_cast<float>(c.head_dim)), 0, 0, {}, {}};
  const BlockProblem problem = with_expectations
                                   ? make_problem(block, c.dtype, c.head_dim, inputs.scale, generator, backward)
                                   : inputs_only(block, c.dtype, c.head_dim, generator);
  inputs.q = add_tensor(prepared, problem.q);
  inputs.dout = add_tensor(prepared, problem.dout);
  for (std::size_t s = 0; s < block.segments.size(); ++s) {
    inputs.k.push_back(add_tensor(prepared, problem.k[s]));
    inputs.v.push_back(add_tensor(prepared, problem.v[s]));
  }
  double visible_pairs = 0;
  for (const SegmentSpec& segment : block.segments)
    visible_pairs += static_cast<double>(block.mask.visible_pairs(block.q_position, block.q_position + block.q_rows,
                                                                  segment.position, segment.position + segment.keys));
  const double forward_flops = 4.0 * static_cast<double>(block.batch * block.heads * c.head_dim) * visible_pairs;
  prepared.flops = backward ? 2.5 * forward_flops : forward_flops;
  if (backward)
    prepare_backward(c, inputs, problem, with_expectations, generator, prepared);
  else
    prepare_forward(c, inputs, problem, with_expectations, prepared);
}

// ---- element-wise operations -------------------------------------------------------------------------

/// The (running, partial) lse of merge's row `row`, taking turns through the rows merge must get
/// right: neither side saw a key, only one side did, gaps of about 100 (one weight is below
/// fp32's normal range), ordinary rows.
std::pair<double, double> merge_row_lse(int64_t row, std::mt19937& generator) {
  std::uniform_real_distribution<double> ordinary(-4.0, 4.0);
  switch (row % 6) {
    case 0: return {kMinusInfinity, kMinusInfinity};
    case 1: return {kMinusInfinity, ordinary(generator)};
    case 2: return {ordinary(generator), kMinusInfinity};
    case 3: return {60.0 + ordinary(generator), -40.0 + ordinary(generator)};
    case 4: return {-40.0 + ordinary(generator), 60.0 + ordinary(generator)};
    default: return {ordinary(generator), ordinary(generator)};
  }
}

/// Values of magnitude 2^-28 to 2^18 and either sign: fp16's subnormals, its underflow to 0 and
/// its overflow to infinity beside ordinary values.
HostTensor wide_range_tensor(DType dtype, std::initializer_list<int64_t> shape, std::mt19937& generator) {
  std::uniform_real_distribution<double> significand(1.0, 2.0);
  std::uniform_int_distribution<int> exponent(-28, 17);
  std::bernoulli_distribution negative(0.5);
  HostTensor tensor(dtype, shape);
  for (int64_t i = 0; i < tensor.numel(); ++i)
    tensor.set(i, (negative(generator) ? -1.0 : 1.0) * std::ldexp(significand(generator), exponent(generator)));
  return tensor;
}

/// `count` values, value_of(i) rounded once to `dtype` each.
template <typename Value>
std::vector<double> rounded_values(int64_t count, DType dtype, Value value_of) {
  std::vector<double> values(static_cast<std::size_t>(count));
  for (int64_t i = 0; i < count; ++i) values[static_cast<std::size_t>(i)] = rounded_to(dtype, value_of(i));
  return values;
}

/// An output every element of which must come out exactly as `expected`.
CheckedOutput exact_output(std::string name, std::size_t tensor, std::vector<double> expected) {
  const std::size_t count = expected.size();
  return {std::move(name), tensor, OutputKind::exact, std::move(expected), 0.0, false, std::vector<bool>(count, true)};
}

constexpr double kFp32Bytes = 4.0;

double bytes_of(int64_t count, DType dtype) {
  return static_cast<double>(count) * static_cast<double>(dtype_size(dtype));
}

void prepare_merge(const BlockKernelCase& c, bool with_expectations, std::mt19937& generator, PreparedCase& prepared) {
  const int64_t B = c.block.batch, S = c.block.q_rows, H = c.block.heads, D = c.head_dim, elements = B * S * H * D;
  HostTensor partial_out = random_tensor(c.dtype, {B, S, H, D}, generator);
  HostTensor running_out = random_tensor(DType::f32, {B, S, H, D}, generator);
  HostTensor partial_lse(DType::f32, {B, H, S}), running_lse(DType::f32, {B, H, S});
  std::vector<bool> empty_rows(static_cast<std::size_t>(B * H * S)), out_of_empty_rows;
  const double nan = std::numeric_limits<double>::quiet_NaN();
  for (int64_t b = 0; b < B; ++b)
    for (int64_t s = 0; s < S; ++s)
      for (int64_t h = 0; h < H; ++h) {
        const int64_t row = (b * H + h) * S + s;
        const auto [running, partial] = merge_row_lse(row, generator);
        running_lse.set(row, running);
        partial_lse.set(row, partial);
        empty_rows[static_cast<std::size_t>(row)] = running == kMinusInfinity && partial == kMinusInfinity;
        // A side that saw no key weighs 0: NaN in its out must never reach the result.
        for (int64_t d = 0; d < D; ++d) {
          const int64_t element = ((b * S + s) * H + h) * D + d;
          if (running == kMinusInfinity) running_out.set(element, nan);
          if (partial == kMinusInfinity) partial_out.set(element, nan);
          out_of_empty_rows.push_back(empty_rows[static_cast<std::size_t>(row)]);
        }
      }
  const std::size_t partial_out_index = add_tensor(prepared, std::move(partial_out));
  const std::size_t partial_lse_index = add_tensor(prepared, std::move(partial_lse));
  const std::size_t running_out_index = add_tensor(prepared, std::move(running_out));
  const std::size_t running_lse_index = add_tensor(prepared, std::move(running_lse));
  prepared.run = [=](BlockKernels& kernels, const std::vector<DeviceTensor>& on_device) {
    kernels.merge(on_device[partial_out_index].view(), on_device[partial_lse_index].view(),
                  on_device[running_out_index].view(), on_device[running_lse_index].view());
  };
  if (with_expectations) {
    const std::vector<HostTensor>& before = prepared.tensors;
    MergedRows merged = merged_rows(before[partial_out_index], before[partial_lse_index], before[running_out_index],
                                    before[running_lse_index]);
    const double out_magnitude = max_finite_magnitude(merged.out), lse_magnitude = max_finite_magnitude(merged.lse);
    prepared.outputs.push_back({"merged out", running_out_index, OutputKind::fp32_arithmetic, std::move(merged.out),
                                out_magnitude, false, std::move(out_of_empty_rows)});
    prepared.outputs.push_back({"merged lse", running_lse_index, OutputKind::fp32_arithmetic, std::move(merged.lse),
                                lse_magnitude, false, empty_rows});
  }
  // Partial out and lse read; running out and lse read and written.
  prepared.bytes = bytes_of(elements, c.dtype) + (2 * elements + 3 * B * H * S) * kFp32Bytes;
}

void prepare_softmax_delta(const BlockKernelCase& c, bool with_expectations, std::mt19937& generator,
                           PreparedCase& prepared) {
  const int64_t B = c.block.batch, S = c.block.q_rows, H = c.block.heads, D = c.head_dim, elements = B * S * H * D;
  const std::size_t out = add_tensor(prepared, random_tensor(c.dtype, {B, S, H, D}, generator));
  const std::size_t dout = add_tensor(prepared, random_tensor(c.dtype, {B, S, H, D}, generator));
  const std::size_t delta = add_tensor(prepared, poisoned_tensor(DType::f32, {B, H, S}));
  prepared.run = [=](BlockKernels& kernels, const std::vector<DeviceTensor>& on_device) {
    kernels.softmax_delta(on_device[out].view(), on_device[dout].view(), on_device[delta].view());
  };
  prepared.bytes = 2 * bytes_of(elements, c.dtype) + static_cast<double>(B * H * S) * kFp32Bytes;
  if (!with_expectations) return;
  std::vector<double> expected = row_sums_of_products(prepared.tensors[out], prepared.tensors[dout]);
  const double magnitude = max_finite_magnitude(expected);
  prepared.outputs.push_back({"delta", delta, OutputKind::fp32_arithmetic, std::move(expected), magnitude, false, {}});
}

void prepare_copy(const BlockKernelCase& c, bool with_expectations, std::mt19937& generator, PreparedCase& prepared) {
  const int64_t B = c.block.batch, S = c.block.q_rows, H = c.block.heads, D = c.head_dim, elements = B * S * H * D;
  const std::size_t source = add_tensor(prepared, wide_range_tensor(c.dtype, {B, S, H, D}, generator));
  const std::size_t destination = add_tensor(prepared, poisoned_tensor(c.destination_dtype, {B, S, H, D}));
  prepared.run = [=](BlockKernels& kernels, const std::vector<DeviceTensor>& on_device) {
    kernels.copy(on_device[source].view(), on_device[destination].view());
  };
  prepared.bytes = bytes_of(elements, c.dtype) + bytes_of(elements, c.destination_dtype);
  if (!with_expectations) return;
  const HostTensor& values = prepared.tensors[source];
  prepared.outputs.push_back(exact_output(
      "copy", destination, rounded_values(elements, c.destination_dtype, [&](int64_t i) { return values.at(i); })));
}

void prepare_fill(const BlockKernelCase& c, bool with_expectations, std::mt19937& generator, PreparedCase& prepared) {
  const int64_t B = c.block.batch, S = c.block.q_rows, H = c.block.heads, D = c.head_dim, elements = B * S * H * D;
  std::uniform_real_distribution<float> magnitude(0.5f, 4.0f);
  const float value = std::bernoulli_distribution(0.5)(generator) ? -magnitude(generator) : magnitude(generator);
  const std::size_t destination = add_tensor(prepared, poisoned_tensor(c.dtype, {B, S, H, D}));
  prepared.run = [=](BlockKernels& kernels, const std::vector<DeviceTensor>& on_device) {
    kernels.fill(on_device[destination].view(), value);
  };
  prepared.bytes = bytes_of(elements, c.dtype);
  if (with_expectations)
    prepared.outputs.push_back(
        exact_output("fill", destination, rounded_values(elements, c.dtype, [&](int64_t) { return value; })));
}

void prepare_add(const BlockKernelCase& c, bool with_expectations, std::mt19937& generator, PreparedCase& prepared) {
  const int64_t B = c.block.batch, S = c.block.q_rows, H = c.block.heads, D = c.head_dim, elements = B * S * H * D;
  const std::size_t source = add_tensor(prepared, random_tensor(c.dtype, {B, S, H, D}, generator));
  const std::size_t destination = add_tensor(prepared, random_tensor(DType::f32, {B, S, H, D}, generator));
  prepared.run = [=](BlockKernels& kernels, const std::vector<DeviceTensor>& on_device) {
    kernels.add(on_device[source].view(), on_device[destination].view());
  };
  prepared.bytes = bytes_of(elements, c.dtype) + 2 * elements * kFp32Bytes;
  if (!with_expectations) return;
  const HostTensor &added = prepared.tensors[source], &before = prepared.tensors[destination];
  prepared.outputs.push_back(exact_output(
      "add", destination,
      rounded_values(elements, DType::f32, [&](int64_t i) { return before.at(i) + added.at(i); })));
}

}  // namespace

PreparedCase prepare_case(const BlockKernelCase& c, bool with_expectations) {
  std::mt19937 generator(seed_of(c.name()));
  PreparedCase prepared;
  switch (c.operation) {
    case Operation::forward:
    case Operation::forward_accumulate:
    case Operation::forward_final_out:
    case Operation::backward: prepare_attention(c, with_expectations, generator, prepared); break;
    case Operation::merge: prepare_merge(c, with_expectations, generator, prepared); break;
    case Operation::softmax_delta: prepare_softmax_delta(c, with_expectations, generator, prepared); break;
    case Operation::copy: prepare_copy(c, with_expectations, generator, prepared); break;
    case Operation::fill: prepare_fill(c, with_expectations, generator, prepared); break;
    case Operation::add: prepare_add(c, with_expectations, generator, prepared); break;
  }
  return prepared;
}

std::vector<DeviceTensor> place_on(const std::vector<HostTensor>& tensors, const Device& device) {
  std::vector<DeviceTensor> placed;
  placed.reserve(tensors.size());
  for (const HostTensor& tensor : tensors) placed.emplace_back(tensor, device);
  return placed;
}

}  // namespace spattn::test
