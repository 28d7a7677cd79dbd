// Packed documents on one device (AttentionOptions::document_lengths): the fp64 reference is the
// attention of each document on its own, and local attention (the single-rank baseline of every
// accuracy check) matches it; lengths that do not fill the sequence are refused naming both.

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "attention_problem.hpp"
#include "host_tensor.hpp"
#include "spattn/error.hpp"
#include "spattn/local_attention.hpp"
#include "spattn/reference_attention.hpp"

namespace spattn::test {
namespace {

constexpr int64_t kBatch = 2, kHeads = 4, kKvHeads = 2, kHeadDim = 16;
const std::vector<int64_t> kLengths{1, 9, 4, 17};  // 31 tokens
constexpr int64_t kTokens = 31;

struct PackedInputs {
  HostTensor q{DType::f32, {kBatch, kTokens, kHeads, kHeadDim}};
  HostTensor k{DType::f32, {kBatch, kTokens, kKvHeads, kHeadDim}};
  HostTensor v{DType::f32, {kBatch, kTokens, kKvHeads, kHeadDim}};
  HostTensor dout{DType::f32, {kBatch, kTokens, kHeads, kHeadDim}};
  explicit PackedInputs(uint32_t seed) {
    std::mt19937 generator(seed);
    for (HostTensor* tensor : {&q, &k, &v, &dout}) tensor->randomize(generator);
  }
};

AttentionOptions causal_window_with_documents() {
  AttentionOptions options;
  options.causal = true;
  options.window_left = 6;
  options.document_lengths = kLengths;
  return options;
}

// The rows [begin, begin + length) of a contiguous (B, S, heads, D) result, or of (B, H, S) lse.
std::vector<double> rows_of(const std::vector<double>& values, int64_t begin, int64_t length, int64_t heads,
                            bool lse_layout) {
  std::vector<double> rows;
  for (int64_t b = 0; b < kBatch; ++b) {
    if (lse_layout) {
      for (int64_t h = 0; h < heads; ++h)
        for (int64_t s = begin; s < begin + length; ++s)
          rows.push_back(values[static_cast<std::size_t>((b * heads + h) * kTokens + s)]);
      continue;
    }
    for (int64_t s = begin; s < begin + length; ++s)
      for (int64_t e = 0; e < heads * kHeadDim; ++e)
        rows.push_back(values[static_cast<std::size_t>((b * kTokens + s) * heads * kHeadDim + e)]);
  }
  return rows;
}

TEST(PackedDocuments, ReferenceIsEachDocumentsOwnAttention) {
  const PackedInputs inputs(3);
  const AttentionOptions options = causal_window_with_documents();
  const ReferenceResult packed =
      reference_attention(inputs.q.view(), inputs.k.view(), inputs.v.view(), inputs.dout.view(), options);
  AttentionOptions one_document = options;
  one_document.document_lengths.clear();
  int64_t begin = 0;
  for (int64_t length : kLengths) {
    SCOPED_TRACE("document at " + std::to_string(begin) + " of " + std::to_string(length));
    const auto part = [&](const HostTensor& tensor) { return tensor.view().slice(1, begin, length); };
    const ReferenceResult alone =
        reference_attention(part(inputs.q), part(inputs.k), part(inputs.v), part(inputs.dout), one_document);
    EXPECT_EQ(rows_of(packed.out, begin, length, kHeads, false), alone.out);
    EXPECT_EQ(rows_of(packed.lse, begin, length, kHeads, true), alone.lse);
    EXPECT_EQ(rows_of(packed.dq, begin, length, kHeads, false), alone.dq);
    EXPECT_EQ(rows_of(packed.dk, begin, length, kKvHeads, false), alone.dk);
    EXPECT_EQ(rows_of(packed.dv, begin, length, kKvHeads, false), alone.dv);
    begin += length;
  }
}

TEST(PackedDocuments, LocalAttentionMatchesTheReference) {
  const PackedInputs inputs(4);
  const AttentionOptions options = causal_window_with_documents();
  const ReferenceResult reference =
      reference_attention(inputs.q.view(), inputs.k.view(), inputs.v.view(), inputs.dout.view(), options);
  HostTensor out(DType::f32, {kBatch, kTokens, kHeads, kHeadDim}), lse(DType::f32, {kBatch, kHeads, kTokens}),
      dq(DType::f32, {kBatch, kTokens, kHeads, kHeadDim}), dk(DType::f32, {kBatch, kTokens, kKvHeads, kHeadDim}),
      dv(DType::f32, {kBatch, kTokens, kKvHeads, kHeadDim});
  for (HostTensor* output : {&out, &lse, &dq, &dk, &dv}) output->poison();
  local_attention_forward(inputs.q.view(), inputs.k.view(), inputs.v.view(), out.view(), lse.view(), options);
  local_attention_backward(inputs.q.view(), inputs.k.view(), inputs.v.view(), out.view(), lse.view(),
                           inputs.dout.view(), dq.view(), dk.view(), dv.view(), options);
  // fp32 arithmetic on inputs exact in fp32 (tests/cpp/kernels/forward_test.cpp's bound).
  EXPECT_LE(relative_error(out.values(), reference.out), 1e-5);
  EXPECT_LE(relative_error(lse.values(), reference.lse), 1e-5);
  EXPECT_LE(relative_error(dq.values(), reference.dq), 1e-5);
  EXPECT_LE(relative_error(dk.values(), reference.dk), 1e-5);
  EXPECT_LE(relative_error(dv.values(), reference.dv), 1e-5);
}

TEST(PackedDocuments, LengthsThatDoNotFillTheSequenceAreRefused) {
  const PackedInputs inputs(5);
  AttentionOptions options;
  options.document_lengths = {10, 20};  // 30 of the 31 tokens
  HostTensor out(DType::f32, {kBatch, kTokens, kHeads, kHeadDim}), lse(DType::f32, {kBatch, kHeads, kTokens});
  const auto message = [&](auto&& call) -> std::string {
    try {
      call();
    } catch (const Error& error) {
      return error.what();
    }
    return "";
  };
  EXPECT_THAT(message([&] {
                reference_attention(inputs.q.view(), inputs.k.view(), inputs.v.view(), TensorView{}, options);
              }),
              ::testing::HasSubstr("the 2 documents have 30 tokens; the sequence has 31"));
  EXPECT_THAT(message([&] {
                local_attention_forward(inputs.q.view(), inputs.k.view(), inputs.v.view(), out.view(), lse.view(),
                                        options);
              }),
              ::testing::HasSubstr("the 2 documents have 30 tokens; the sequence has 31"));
}

}  // namespace
}  // namespace spattn::test
