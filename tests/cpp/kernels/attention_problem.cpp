#include "attention_problem.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>

namespace spattn::test {
namespace {

constexpr float kMinusInfinity = -std::numeric_limits<float>::infinity();

std::string mask_name(const AttentionOptions& options) {
  std::ostringstream name;
  if (options.causal) name << "causal";
  if (options.window_left >= 0 || options.window_right >= 0) {
    auto bound = [](int64_t value) { return value < 0 ? std::string("inf") : std::to_string(value); };
    name << (options.causal ? "_" : "") << "window" << bound(options.window_left) << "_"
         << bound(options.window_right);
  }
  return name.str().empty() ? "nomask" : name.str();
}

std::string decomposition_name(Decomposition decomposition) {
  switch (decomposition) {
    case Decomposition::whole: return "whole";
    case Decomposition::two_segments: return "twosegments";
    case Decomposition::zigzag: return "zigzag";
  }
  return "unknown";
}

}  // namespace

std::string AttentionCase::name() const {
  std::ostringstream text;
  text << "B" << batch << "_S" << sequence << "_H" << heads << "_KV" << kv_heads << "_D" << head_dim << "_"
       << dtype_name(dtype) << "_" << mask_name(options) << "_" << decomposition_name(decomposition)
       << (packed_qkv ? "_packed" : "");
  return text.str();
}

void PrintTo(const AttentionCase& attention_case, std::ostream* stream) { *stream << attention_case.name(); }

std::vector<AttentionCase> attention_cases() {
  const std::vector<AttentionOptions> masks = {
      AttentionOptions{false, -1, -1}, AttentionOptions{true, -1, -1}, AttentionOptions{false, 0, 0},
      AttentionOptions{false, 3, -1},  AttentionOptions{false, -1, 5}, AttentionOptions{false, 16, 16},
      AttentionOptions{true, 16, -1}};
  std::vector<AttentionCase> cases;
  // Every mask under every decomposition, GQA 4:2, odd length and head dim.
  for (const AttentionOptions& options : masks)
    for (Decomposition decomposition : {Decomposition::whole, Decomposition::two_segments, Decomposition::zigzag}) {
      AttentionCase c;
      c.batch = 2, c.sequence = 100, c.heads = 4, c.kv_heads = 2, c.head_dim = 40;
      c.options = options, c.decomposition = decomposition;
      cases.push_back(c);
    }
  // Lengths across tile boundaries and head dims.
  const int64_t lengths[] = {1, 7, 33, 257};
  const int64_t head_dims[] = {64, 32, 128, 80};
  for (int i = 0; i < 4; ++i)
    for (bool causal : {false, true}) {
      AttentionCase c;
      c.batch = 1, c.sequence = lengths[i], c.heads = 8, c.kv_heads = 2, c.head_dim = head_dims[i];
      c.options = AttentionOptions{causal, -1, -1};
      c.decomposition = lengths[i] >= 4 ? Decomposition::zigzag : Decomposition::whole;
      cases.push_back(c);
    }
  // GQA 4:1 and MHA, fp16 and bf16 inputs, packed (strided) q, k, v.
  for (DType dtype : {DType::f16, DType::bf16})
    for (const AttentionOptions& options : {masks[1], masks[5]}) {
      AttentionCase c;
      c.batch = 2, c.sequence = 65, c.heads = 4, c.kv_heads = 1, c.head_dim = 64, c.dtype = dtype;
      c.options = options, c.decomposition = Decomposition::zigzag;
      cases.push_back(c);
    }
  for (const AttentionOptions& options : {masks[0], masks[1], masks[4]}) {
    AttentionCase c;
    c.batch = 1, c.sequence = 130, c.heads = 2, c.kv_heads = 2, c.head_dim = 64, c.dtype = DType::bf16;
    c.options = options, c.decomposition = Decomposition::two_segments, c.packed_qkv = true;
    cases.push_back(c);
  }
  // Long enough for several tiles per block: tiles hidden by the mask, tiles fully visible.
  for (const AttentionOptions& options : {masks[1], masks[5], masks[6]}) {
    AttentionCase c;
    c.batch = 1, c.sequence = 600, c.heads = 2, c.kv_heads = 1, c.head_dim = 64;
    c.options = options, c.decomposition = Decomposition::zigzag;
    cases.push_back(c);
  }
  return cases;
}

double relative_error(const std::vector<double>& actual, const std::vector<double>& reference) {
  if (actual.size() != reference.size()) return 1.0;
  double max_reference = 0.0, max_difference = 0.0;
  for (std::size_t i = 0; i < actual.size(); ++i) {
    if (std::isfinite(reference[i]) != std::isfinite(actual[i])) return 1.0;
    if (!std::isfinite(reference[i])) {
      if (actual[i] != reference[i]) return 1.0;
      continue;
    }
    max_reference = std::max(max_reference, std::abs(reference[i]));
    max_difference = std::max(max_difference, std::abs(actual[i] - reference[i]));
  }
  return max_reference == 0.0 ? max_difference : max_difference / max_reference;
}

AttentionProblem::AttentionProblem(const AttentionCase& attention_case, uint32_t seed)
    : case_(attention_case),
      dout_(attention_case.dtype, {attention_case.batch, attention_case.sequence, attention_case.heads,
                                   attention_case.head_dim}) {
  const AttentionCase& c = case_;
  std::mt19937 generator(seed);
  if (c.packed_qkv) {
    packed_ = std::make_unique<HostTensor>(c.dtype,
                                           std::initializer_list<int64_t>{c.batch, c.sequence,
                                                                          c.heads + 2 * c.kv_heads, c.head_dim});
    EXPECT_TRUE(c.qk_deviation == 1.0 && c.v_deviation == 1.0) << "packed q, k, v are standard normal only";
    packed_->randomize(generator);
    q_ = packed_->view().slice(2, 0, c.heads);
    k_ = packed_->view().slice(2, c.heads, c.kv_heads);
    v_ = packed_->view().slice(2, c.heads + c.kv_heads, c.kv_heads);
  } else {
    q_storage_ = std::make_unique<HostTensor>(c.dtype, std::initializer_list<int64_t>{c.batch, c.sequence, c.heads, c.head_dim});
    k_storage_ = std::make_unique<HostTensor>(c.dtype, std::initializer_list<int64_t>{c.batch, c.sequence, c.kv_heads, c.head_dim});
    v_storage_ = std::make_unique<HostTensor>(c.dtype, std::initializer_list<int64_t>{c.batch, c.sequence, c.kv_heads, c.head_dim});
    q_storage_->randomize(generator, c.qk_deviation);
    k_storage_->randomize(generator, c.qk_deviation);
    v_storage_->randomize(generator, c.v_deviation);
    q_ = q_storage_->view();
    k_ = k_storage_->view();
    v_ = v_storage_->view();
  }
  dout_.randomize(generator);
}

float AttentionProblem::scale() const {
  return case_.options.softmax_scale ? *case_.options.softmax_scale
                                     : 1.0f / std::sqrt(static_cast<float>(case_.head_dim));
}

ReferenceResult AttentionProblem::reference(bool with_gradients) const {
  TensorView no_dout;
  return reference_attention(q_, k_, v_, with_gradients ? dout_.view() : no_dout, case_.options);
}

std::vector<AttentionProblem::Block> AttentionProblem::blocks() const {
  const int64_t sequence = case_.sequence;
  switch (case_.decomposition) {
    case Decomposition::whole: return {Block{0, sequence, {{0, sequence}}}};
    case Decomposition::two_segments: {
      const int64_t half = sequence / 2;
      return {Block{0, sequence, {{half, sequence - half}, {0, half}}}};
    }
    case Decomposition::zigzag: {
      // Uneven chunk boundaries, as an odd length gives; chunk c is [bound[c], bound[c + 1]).
      int64_t bound[5];
      for (int c = 0; c <= 4; ++c) bound[c] = c * sequence / 4;
      auto chunk = [&](int c) { return std::make_pair(bound[c], bound[c + 1] - bound[c]); };
      std::vector<Block> result;
      for (int query_chunk = 0; query_chunk < 4; ++query_chunk)
        for (int pair = 0; pair < 2; ++pair)
          result.push_back(Block{bound[query_chunk], bound[query_chunk + 1] - bound[query_chunk],
                                 {chunk(pair), chunk(3 - pair)}});
      return result;
    }
  }
  return {};
}

void AttentionProblem::run_forward(BlockKernels& kernels, std::vector<double>& out, std::vector<double>& lse) const {
  const AttentionCase& c = case_;
  HostTensor running_out(DType::f32, {c.batch, c.sequence, c.heads, c.head_dim});
  HostTensor running_lse(DType::f32, {c.batch, c.heads, c.sequence});
  running_out.fill(0.0f);
  running_lse.fill(kMinusInfinity);
  for (const Block& block : blocks()) {
    HostTensor partial_out(DType::f32, {c.batch, block.query_length, c.heads, c.head_dim});
    HostTensor partial_lse(DType::f32, {c.batch, c.heads, block.query_length});
    partial_out.poison();
    partial_lse.poison();
    ForwardBlock forward;
    forward.q = q_.slice(1, block.query_begin, block.query_length);
    forward.q_position = block.query_begin;
    for (const auto& [begin, length] : block.key_chunks)
      forward.segments.push_back(KvSegment{k_.slice(1, begin, length), v_.slice(1, begin, length), begin});
    forward.mask = AttentionMask::from_options(c.options);
    forward.scale = scale();
    forward.out = partial_out.view();
    forward.lse = partial_lse.view();
    kernels.forward(forward);
    for (int64_t i = 0; i < partial_out.numel(); ++i) {
      ASSERT_TRUE(std::isfinite(partial_out.at(i))) << "partial out element " << i << " not written or not finite";
    }
    for (int64_t i = 0; i < partial_lse.numel(); ++i) {
      const float value = partial_lse.at(i);
      ASSERT_TRUE(std::isfinite(value) || value == kMinusInfinity) << "partial lse element " << i << " is " << value;
    }
    // Rows that saw no key: out = 0.
    for (int64_t b = 0; b < c.batch; ++b)
      for (int64_t h = 0; h < c.heads; ++h)
        for (int64_t s = 0; s < block.query_length; ++s) {
          if (partial_lse.at((b * c.heads + h) * block.query_length + s) != kMinusInfinity) continue;
          for (int64_t d = 0; d < c.head_dim; ++d)
            ASSERT_EQ(partial_out.at(((b * block.query_length + s) * c.heads + h) * c.head_dim + d), 0.0f);
        }
    kernels.merge(partial_out.view(), partial_lse.view(),
                  running_out.view().slice(1, block.query_begin, block.query_length),
                  running_lse.view().slice(2, block.query_begin, block.query_length));
  }
  out = running_out.values();
  lse = running_lse.values();
}

void AttentionProblem::run_backward(BlockKernels& kernels, const ReferenceResult& reference, std::vector<double>& dq,
                                    std::vector<double>& dk, std::vector<double>& dv) const {
  const AttentionCase& c = case_;
  HostTensor out(DType::f32, {c.batch, c.sequence, c.heads, c.head_dim});
  HostTensor lse(DType::f32, {c.batch, c.heads, c.sequence});
  for (int64_t i = 0; i < out.numel(); ++i) out.set(i, static_cast<float>(reference.out[static_cast<std::size_t>(i)]));
  for (int64_t i = 0; i < lse.numel(); ++i) lse.set(i, static_cast<float>(reference.lse[static_cast<std::size_t>(i)]));
  HostTensor delta(DType::f32, {c.batch, c.heads, c.sequence});
  delta.poison();
  kernels.softmax_delta(out.view(), dout_.view(), delta.view());

  HostTensor query_gradient(DType::f32, {c.batch, c.sequence, c.heads, c.head_dim});
  HostTensor key_gradient(DType::f32, {c.batch, c.sequence, c.kv_heads, c.head_dim});
  HostTensor value_gradient(DType::f32, {c.batch, c.sequence, c.kv_heads, c.head_dim});
  kernels.fill(query_gradient.view(), 0.0f);
  kernels.fill(key_gradient.view(), 0.0f);
  kernels.fill(value_gradient.view(), 0.0f);
  for (const Block& block : blocks()) {
    BackwardBlock backward;
    backward.q = q_.slice(1, block.query_begin, block.query_length);
    backward.q_position = block.query_begin;
    for (const auto& [begin, length] : block.key_chunks)
      backward.segments.push_back(KvGradSegment{KvSegment{k_.slice(1, begin, length), v_.slice(1, begin, length), begin},
                                                key_gradient.view().slice(1, begin, length),
                                                value_gradient.view().slice(1, begin, length)});
    backward.dout = dout_.view().slice(1, block.query_begin, block.query_length);
    backward.lse = lse.view().slice(2, block.query_begin, block.query_length);
    backward.delta = delta.view().slice(2, block.query_begin, block.query_length);
    backward.mask = AttentionMask::from_options(c.options);
    backward.scale = scale();
    backward.dq = query_gradient.view().slice(1, block.query_begin, block.query_length);
    kernels.backward(backward);
  }
  dq = query_gradient.values();
  dk = key_gradient.values();
  dv = value_gradient.values();
}

}  // namespace spattn::test
