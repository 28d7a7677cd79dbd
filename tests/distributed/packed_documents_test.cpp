// Packed documents (AttentionOptions::document_lengths) at the rank count of this run: every
// strategy but stripe (usp over its groups), each document split on its own, and all-gather over
// the whole sequence split contiguously (Llama 3's), forward and backward, against the
// per-document fp64 reference with the 2x criterion (out, lse, dq, dk, dv of the real tokens,
// gathered through shard_documents / unshard_documents);
// padding rows of a plan's own shards hold out 0, lse -inf and no gradient; strategies and shapes
// that do not take the documents refuse them on every rank before any transfer.

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <numeric>
#include <string>
#include <tuple>
#include <vector>

#include "distributed_checks.hpp"
#include "distributed_world.hpp"
#include "host_tensor.hpp"
#include "spattn/distributed_attention.hpp"
#include "spattn/document_layout.hpp"
#include "strategy_runner.hpp"

namespace spattn {
namespace {

using ::testing::HasSubstr;

struct DocumentSet {
  const char* name;
  std::vector<int64_t> lengths;
};

const DocumentSet kDocumentSets[] = {
    // A single token, and lengths that split over no rank count but one.
    {"mixed", {1, 37, 6, 19}},
    // One document longer than all the others together.
    {"one_long", {3, 90, 5, 2}},
    // Many tiny documents: most ranks hold mostly padding.
    {"many_tiny", {1, 2, 1, 3, 1, 1, 2, 1, 1, 4, 1, 2}},
    // One token in all: every rank but one holds only padding.
    {"single_token", {1}},
};

int64_t total_tokens(const std::vector<int64_t>& lengths) {
  return std::accumulate(lengths.begin(), lengths.end(), int64_t{0});
}

using DocumentCase = std::tuple<Algorithm, int /*mask index*/, int /*document set*/>;

class PackedDocumentAccuracy : public ::testing::TestWithParam<DocumentCase> {};

TEST_P(PackedDocumentAccuracy, MatchesPerDocumentReferenceForwardAndBackward) {
  const auto [algorithm, mask_index, set_index] = GetParam();
  const AlgorithmSetup setup = algorithm_setup(algorithm, world().size());
  if (!setup.not_applicable.empty()) GTEST_SKIP() << setup.not_applicable;
  AttentionOptions options = kMasks[mask_index].options;
  options.document_lengths = kDocumentSets[set_index].lengths;
  // Ulysses gives every rank whole query heads: 4 over 2 kv heads each, which it moves and attends
  // in two stages (schedule/ulysses_stages.hpp).
  const bool ulysses = algorithm == Algorithm::ulysses;
  const int64_t heads = ulysses ? 4 * world().size() : 4, kv_heads = ulysses ? 2 * world().size() : 2;
  const AttentionShape shape{1, total_tokens(options.document_lengths), heads, kv_heads, 32, DType::bf16};
  const uint64_t seed = 5000 + static_cast<uint64_t>(mask_index) * 10 + static_cast<uint64_t>(set_index);
  expect_accurate(algorithm, random_problem(shape, options, seed, /*backward=*/true), setup.options);
}

std::string case_name(const ::testing::TestParamInfo<DocumentCase>& info) {
  const auto [algorithm, mask_index, set_index] = info.param;
  return algorithm_name(algorithm) + "_" + kMasks[mask_index].name + "_" + kDocumentSets[set_index].name;
}

INSTANTIATE_TEST_SUITE_P(Strategies, PackedDocumentAccuracy,
                         ::testing::Combine(::testing::Values(Algorithm::ring, Algorithm::zigzag, Algorithm::hamilton,
                                                              Algorithm::hamilton2, Algorithm::allgather,
                                                              Algorithm::ulysses, Algorithm::usp),
                                            ::testing::Range(0, 4), ::testing::Range(0, 4)),
                         case_name);

// USP: every document split over the groups by the rotation across them (ring, zigzag or
// hamilton), each group's part cut over its ranks, which trade heads for tokens; groups of two
// ranks where the rank count is even (else one), the rest the groups.
class UspDocumentAccuracy : public ::testing::TestWithParam<std::tuple<Algorithm, int /*mask*/, int /*set*/>> {};

TEST_P(UspDocumentAccuracy, MatchesPerDocumentReferenceForwardAndBackward) {
  const auto [across, mask_index, set_index] = GetParam();
  const int ranks = world().size();
  StrategyOptions strategy;
  strategy.inner = ranks % 2 == 0 ? 2 : 1;
  strategy.across = across;
  const int groups = ranks / strategy.inner;
  if (across == Algorithm::hamilton && (groups == 4 || groups == 6))
    GTEST_SKIP() << "no Hamiltonian decomposition over " << groups << " groups";
  AttentionOptions options = kMasks[mask_index].options;
  options.document_lengths = kDocumentSets[set_index].lengths;
  const AttentionShape shape{1, total_tokens(options.document_lengths), 4, 2, 32, DType::bf16};
  const uint64_t seed = 7000 + static_cast<uint64_t>(mask_index) * 10 + static_cast<uint64_t>(set_index);
  expect_accurate(Algorithm::usp, random_problem(shape, options, seed, /*backward=*/true), strategy);
}

INSTANTIATE_TEST_SUITE_P(Usp, UspDocumentAccuracy,
                         ::testing::Combine(::testing::Values(Algorithm::ring, Algorithm::zigzag, Algorithm::hamilton),
                                            ::testing::Range(0, 4), ::testing::Range(0, 4)),
                         [](const ::testing::TestParamInfo<std::tuple<Algorithm, int, int>>& info) {
                           return algorithm_name(std::get<0>(info.param)) + "_" +
                                  kMasks[std::get<1>(info.param)].name + "_" +
                                  kDocumentSets[std::get<2>(info.param)].name;
                         });

// All-gather over the whole packed sequence split contiguously: documents cut at any token by the
// ranks' boundaries.
class WholeSequenceDocumentAccuracy : public ::testing::TestWithParam<std::tuple<int /*mask*/, int /*set*/>> {};

TEST_P(WholeSequenceDocumentAccuracy, AllGatherMatchesPerDocumentReferenceForwardAndBackward) {
  const auto [mask_index, set_index] = GetParam();
  AttentionOptions options = kMasks[mask_index].options;
  options.document_lengths = kDocumentSets[set_index].lengths;
  options.document_split = DocumentSplit::whole_sequence;
  const AttentionShape shape{1, total_tokens(options.document_lengths), 4, 2, 32, DType::bf16};
  const uint64_t seed = 6000 + static_cast<uint64_t>(mask_index) * 10 + static_cast<uint64_t>(set_index);
  expect_accurate(Algorithm::allgather, random_problem(shape, options, seed, /*backward=*/true));
}

INSTANTIATE_TEST_SUITE_P(AllGather, WholeSequenceDocumentAccuracy,
                         ::testing::Combine(::testing::Range(0, 4), ::testing::Range(0, 4)),
                         [](const ::testing::TestParamInfo<std::tuple<int, int>>& info) {
                           return std::string(kMasks[std::get<0>(info.param)].name) + "_" +
                                  kDocumentSets[std::get<1>(info.param)].name;
                         });

// fp32 at one mask: the criterion's bound is tight there (no input rounding hides a mistake).
TEST(PackedDocuments, Fp32ZigzagCausalMatchesReference) {
  AttentionOptions options{true, -1, -1, std::nullopt};
  options.document_lengths = {5, 1, 33, 8};
  const AttentionShape shape{1, total_tokens(options.document_lengths), 2, 1, 16, DType::f32};
  expect_accurate(Algorithm::zigzag, random_problem(shape, options, 77, /*backward=*/true));
}

// The plan's own shards: the rows of padding get out 0 and lse -inf, and dq, dk, dv 0 there,
// whatever the caller put in them (here NaN-poisoned outputs and random padding inputs).
using PaddingCase = std::tuple<Algorithm, DocumentSplit>;
class PackedDocumentPadding : public ::testing::TestWithParam<PaddingCase> {};

TEST_P(PackedDocumentPadding, RowsGetZeroOutMinusInfinityLseAndNoGradient) {
  const auto [algorithm, split] = GetParam();
  const int ranks = world().size(), rank = world().rank();
  AttentionOptions options{true, -1, -1, std::nullopt};
  options.document_lengths = {3, 2 * ranks + 1};
  options.document_split = split;
  const DocumentLayout documents = plan_document_layout(algorithm, ranks, options);
  const int64_t local = documents.sequence_layout().local_length();
  const int64_t H = 2 * ranks, HK = ranks, D = 16;  // whole heads per rank for Ulysses
  const AttentionShape shape{1, documents.sequence_layout().global_length(), H, HK, D, DType::f32};
  DistributedAttention plan(world(), algorithm, shape, options);
  HostTensor q(DType::f32, {1, local, H, D}), k(DType::f32, {1, local, HK, D}), v(DType::f32, {1, local, HK, D}),
      dout(DType::f32, {1, local, H, D});
  q.fill_normal(11 + static_cast<uint64_t>(rank));
  k.fill_normal(21 + static_cast<uint64_t>(rank));
  v.fill_normal(31 + static_cast<uint64_t>(rank));
  dout.fill_normal(41 + static_cast<uint64_t>(rank));
  HostTensor out(DType::f32, {1, local, H, D}), lse(DType::f32, {1, H, local}), dq(DType::f32, {1, local, H, D}),
      dk(DType::f32, {1, local, HK, D}), dv(DType::f32, {1, local, HK, D});
  for (HostTensor* output : {&out, &lse, &dq, &dk, &dv}) output->poison();
  plan.forward(q.view(), k.view(), v.view(), out.view(), lse.view());
  plan.backward(q.view(), k.view(), v.view(), out.view(), lse.view(), dout.view(), dq.view(), dk.view(), dv.view());
  for (const SequenceChunk& chunk : documents.chunks(rank)) {
    const int64_t real = documents.real_tokens(chunk.position, chunk.length);
    for (int64_t row = chunk.local_offset; row < chunk.local_offset + chunk.length; ++row) {
      const bool padding = row >= chunk.local_offset + real;
      for (int64_t h = 0; h < H; ++h) {
        const double row_lse = lse.at(h * local + row);
        if (padding) EXPECT_EQ(row_lse, -std::numeric_limits<double>::infinity()) << "rank " << rank << " row " << row;
        else EXPECT_TRUE(std::isfinite(row_lse)) << "rank " << rank << " row " << row;
        for (int64_t d = 0; d < D; ++d) {
          const int64_t element = (row * H + h) * D + d;
          ASSERT_TRUE(std::isfinite(out.at(element)) && std::isfinite(dq.at(element))) << "row " << row;
          if (padding) {
            EXPECT_EQ(out.at(element), 0.0);
            EXPECT_EQ(dq.at(element), 0.0);
          }
        }
      }
      for (int64_t e = row * HK * D; e < (row + 1) * HK * D; ++e) {
        ASSERT_TRUE(std::isfinite(dk.at(e)) && std::isfinite(dv.at(e))) << "row " << row;
        if (padding) {
          EXPECT_EQ(dk.at(e), 0.0);
          EXPECT_EQ(dv.at(e), 0.0);
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(EachKindOfStrategy, PackedDocumentPadding,
                         ::testing::Values(PaddingCase{Algorithm::zigzag, DocumentSplit::per_document},
                                           PaddingCase{Algorithm::allgather, DocumentSplit::per_document},
                                           PaddingCase{Algorithm::ulysses, DocumentSplit::per_document},
                                           PaddingCase{Algorithm::allgather, DocumentSplit::whole_sequence}),
                         [](const ::testing::TestParamInfo<PaddingCase>& info) {
                           return algorithm_name(std::get<0>(info.param)) + "_" +
                                  document_split_name(std::get<1>(info.param));
                         });

TEST(PackedDocuments, OnlyAllGatherSplitsTheWholeSequence) {
  AttentionOptions options{true, -1, -1, std::nullopt};
  options.document_lengths = {4, 4};
  options.document_split = DocumentSplit::whole_sequence;
  const int ranks = world().size();
  const AttentionShape shape{1, 8, 2 * ranks, ranks, 16, DType::f32};  // whole heads per rank for Ulysses
  for (const Algorithm algorithm : {Algorithm::zigzag, Algorithm::ulysses}) {
    const std::string expected = "document_split whole_sequence (Llama 3's context parallelism) is all-gather's "
                                 "alone; " + algorithm_name(algorithm) + " splits each document on its own";
    EXPECT_THAT(error_of([&] { DistributedAttention plan(world(), algorithm, shape, options); }), HasSubstr(expected));
    EXPECT_THAT(error_of([&] { plan_document_layout(algorithm, ranks, options); }), HasSubstr(expected));
  }
}

// Refusals, the same on every rank and before any transfer.
TEST(PackedDocuments, StripeRefusesThemOnEveryRank) {
  AttentionOptions options;
  options.document_lengths = {4, 4};
  const AttentionShape shape{1, 8 * world().size(), world().size(), world().size(), 16, DType::f32};
  const std::string error = error_of([&] { DistributedAttention plan(world(), Algorithm::stripe, shape, options); });
  EXPECT_THAT(error, HasSubstr("packed documents (document_lengths) are taken by ring, zigzag, ulysses, hamilton, "
                               "hamilton2, allgather and usp, not by 'stripe'"));
  EXPECT_THAT(error_of([&] { plan_document_layout(Algorithm::stripe, world().size(), options); }),
              HasSubstr("not by 'stripe'"));
}

// plan_document_layout knows no head counts, so usp's degree must be given to it; the plan itself
// resolves 0 as always.
TEST(PackedDocuments, UspLayoutNeedsItsDegreeGiven) {
  const int ranks = world().size();
  AttentionOptions options;
  options.document_lengths = {5, 3};
  EXPECT_THAT(error_of([&] { plan_document_layout(Algorithm::usp, ranks, options); }),
              HasSubstr("usp with packed documents needs its Ulysses degree given (inner 0): a divisor of the ranks (" +
                        std::to_string(ranks) + ")"));
  StrategyOptions strategy;
  strategy.inner = ranks;
  const DocumentLayout layout = plan_document_layout(Algorithm::usp, ranks, options, strategy);
  EXPECT_EQ(layout.ranks(), ranks);
  // One group of every rank, zigzag across it: each document padded to a multiple of 2N.
  const auto padded = [unit = 2 * ranks](int64_t length) { return (length + unit - 1) / unit * unit; };
  EXPECT_EQ(layout.sequence_layout().global_length(), padded(5) + padded(3));
}

TEST(PackedDocuments, SeqOtherThanThePaddedLengthIsRefusedNamingIt) {
  const int ranks = world().size();
  AttentionOptions options{true, -1, -1, std::nullopt};
  options.document_lengths = {3, 5};
  const int64_t padded = plan_document_layout(Algorithm::zigzag, ranks, options).sequence_layout().global_length();
  const AttentionShape shape{1, 8, 2, 1, 16, DType::f32};
  if (padded == 8) GTEST_SKIP() << "the documents need no padding at " << ranks << " ranks";
  EXPECT_THAT(error_of([&] { DistributedAttention plan(world(), Algorithm::zigzag, shape, options); }),
              HasSubstr("seq 8 does not match the packed documents: zigzag per document over " + std::to_string(ranks) +
                        " rank"));
  EXPECT_THAT(error_of([&] { DistributedAttention plan(world(), Algorithm::zigzag, shape, options); }),
              HasSubstr("seq must be their padded length " + std::to_string(padded)));
}

TEST(PackedDocuments, ADocumentOfNoTokensIsRefusedNamingIt) {
  AttentionOptions options;
  options.document_lengths = {4, 0, 4};
  const AttentionShape shape{1, 8 * world().size(), 2, 1, 16, DType::f32};
  EXPECT_THAT(error_of([&] { DistributedAttention plan(world(), Algorithm::ring, shape, options); }),
              HasSubstr("document 1 has length 0; every document needs at least 1 token"));
}

}  // namespace
}  // namespace spattn
