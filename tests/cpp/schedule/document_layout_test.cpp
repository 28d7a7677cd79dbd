#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "spattn/document_layout.hpp"
#include "spattn/error.hpp"

namespace spattn {
namespace {

using ::testing::HasSubstr;

// Lengths that test the padding rules: a document of 1 token, lengths that divide by neither N
// nor 2N, one longer than all the others together, many tiny ones.
std::vector<int64_t> awkward_lengths() { return {1, 7, 16, 3, 40, 2, 2, 1, 5}; }

class EveryDocumentLayout : public ::testing::TestWithParam<LayoutKind> {};

TEST_P(EveryDocumentLayout, EveryRankHoldsAnEqualPartOfEveryPaddedDocument) {
  const std::vector<int64_t> lengths = awkward_lengths();
  for (int ranks = 1; ranks <= 8; ++ranks) {
    SCOPED_TRACE("ranks " + std::to_string(ranks));
    const DocumentLayout layout(GetParam(), lengths, ranks);
    const int64_t parts = (GetParam() == LayoutKind::zigzag ? 2 : 1) * int64_t{ranks};
    int64_t padding = 0;
    const std::vector<int64_t> local_starts = layout.local_starts(0);
    ASSERT_EQ(local_starts.size(), lengths.size() + 1);
    for (int document = 0; document < layout.documents(); ++document) {
      const int64_t length = layout.document_lengths()[static_cast<std::size_t>(document)];
      const int64_t padded = layout.padded_lengths()[static_cast<std::size_t>(document)];
      EXPECT_EQ(padded % parts, 0);
      EXPECT_GE(padded, length);
      EXPECT_LT(padded - length, parts) << "more padding than the next multiple needs";
      padding += padded - length;
      EXPECT_EQ(local_starts[static_cast<std::size_t>(document) + 1] - local_starts[static_cast<std::size_t>(document)],
                padded / ranks);
    }
    for (int rank = 1; rank < ranks; ++rank) EXPECT_EQ(layout.local_starts(rank), local_starts);
    EXPECT_EQ(layout.padding(), padding);
    EXPECT_EQ(layout.tokens(), std::accumulate(lengths.begin(), lengths.end(), int64_t{0}));
    EXPECT_EQ(local_starts.back(), layout.sequence_layout().local_length());
    int64_t local_padding = 0;
    for (int rank = 0; rank < ranks; ++rank) local_padding += layout.local_padding(rank);
    EXPECT_EQ(local_padding, layout.padding());
  }
}

// Every packed token goes to exactly one rank and comes back to its place; the shards' padding
// is zeros, whatever the shard held before (poisoned with NaN here).
TEST_P(EveryDocumentLayout, ShardThenUnshardRestoresThePackedTensorAndZeroesPadding) {
  const int ranks = 3;
  const DocumentLayout layout(GetParam(), awkward_lengths(), ranks);
  const int64_t tokens = layout.tokens(), heads = 2, dim = 3, local = layout.sequence_layout().local_length();
  std::mt19937 generator(7);
  std::normal_distribution<float> normal;
  std::vector<float> packed(static_cast<std::size_t>(tokens * heads * dim));
  for (float& value : packed) value = normal(generator);
  std::vector<float> restored(packed.size(), std::numeric_limits<float>::quiet_NaN());
  const TensorView packed_view = TensorView::contiguous(packed.data(), DType::f32, {1, tokens, heads, dim});
  const TensorView restored_view = TensorView::contiguous(restored.data(), DType::f32, {1, tokens, heads, dim});
  for (int rank = 0; rank < ranks; ++rank) {
    std::vector<float> shard(static_cast<std::size_t>(local * heads * dim), std::numeric_limits<float>::quiet_NaN());
    const TensorView shard_view = TensorView::contiguous(shard.data(), DType::f32, {1, local, heads, dim});
    shard_documents(layout, rank, packed_view, shard_view);
    int64_t zero_rows = 0;
    for (int64_t row = 0; row < local; ++row) {
      bool all_zero = true;
      for (int64_t i = 0; i < heads * dim; ++i) {
        const float value = shard[static_cast<std::size_t>(row * heads * dim + i)];
        ASSERT_FALSE(std::isnan(value)) << "rank " << rank << " row " << row << " left unwritten";
        all_zero = all_zero && value == 0.0f;
      }
      zero_rows += all_zero ? 1 : 0;
    }
    EXPECT_EQ(zero_rows, layout.local_padding(rank)) << "rank " << rank;  // random rows are never all zero
    unshard_documents(layout, rank, shard_view, restored_view);
  }
  EXPECT_EQ(restored, packed);
}

TEST_P(EveryDocumentLayout, QueryPairsCountWhatEachRanksRealQueriesSee) {
  const std::vector<int64_t> lengths = awkward_lengths();
  for (const AttentionMask mask : {AttentionMask{-1, -1}, AttentionMask{-1, 0}, AttentionMask{3, 0},
                                   AttentionMask{2, 5}}) {
    int64_t every_document = 0;  // the pairs of the documents themselves, unsharded
    for (int64_t length : lengths) every_document += mask.visible_pairs(0, length, 0, length);
    for (int ranks = 1; ranks <= 5; ++ranks) {
      SCOPED_TRACE("mask (" + std::to_string(mask.left) + ", " + std::to_string(mask.right) + "), ranks " +
                   std::to_string(ranks));
      for (const DocumentLayout& layout :
           {DocumentLayout(GetParam(), lengths, ranks), DocumentLayout::whole_sequence(lengths, ranks)}) {
      SCOPED_TRACE(layout.describe());
      int64_t every_rank = 0;
      for (int rank = 0; rank < ranks; ++rank) {
        int64_t counted = 0;  // query by query, key by key
        for (const SequenceChunk& chunk : layout.sequence_layout().chunks(rank))
          for (int64_t query = chunk.position; query < chunk.position + chunk.length; ++query) {
            const auto document = static_cast<std::size_t>(layout.document_at(query));
            const int64_t start = layout.padded_starts()[document], end = start + lengths[document];
            if (query >= end) continue;  // padding asks nothing
            for (int64_t key = start; key < end; ++key) counted += mask.visible(query, key) ? 1 : 0;
          }
        EXPECT_EQ(layout.query_pairs(rank, mask), counted) << "rank " << rank;
        every_rank += counted;
      }
      EXPECT_EQ(every_rank, every_document);
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Layouts, EveryDocumentLayout, ::testing::Values(LayoutKind::contiguous, LayoutKind::zigzag));

// USP's split: the group layout's shards cut contiguously over each group's ranks, and the
// documents padded so that they split over every rank; over_groups is the same padded documents
// over the groups alone, whose shards are the group members' shards put side by side.
TEST(DocumentLayout, GroupedCutsEachGroupsPartsOverItsRanks) {
  const std::vector<int64_t> lengths = awkward_lengths();
  for (LayoutKind kind : {LayoutKind::contiguous, LayoutKind::zigzag})
    for (int groups = 1; groups <= 3; ++groups)
      for (int per_group = 1; per_group <= 3; ++per_group) {
        const DocumentLayout layout = DocumentLayout::grouped(kind, lengths, groups, per_group);
        const DocumentLayout over_groups = layout.over_groups();
        SCOPED_TRACE(layout.describe());
        const int64_t parts = (kind == LayoutKind::zigzag ? 2 : 1) * int64_t{groups} * per_group;
        EXPECT_EQ(layout.ranks(), groups * per_group);
        EXPECT_EQ(over_groups.ranks(), groups);
        EXPECT_EQ(over_groups.padded_lengths(), layout.padded_lengths());
        EXPECT_EQ(over_groups.over_groups().padded_lengths(), layout.padded_lengths());
        for (std::size_t document = 0; document < lengths.size(); ++document) {
          EXPECT_EQ(layout.padded_lengths()[document] % parts, 0);
          EXPECT_LT(layout.padded_lengths()[document] - lengths[document], parts);
        }
        for (int group = 0; group < groups; ++group) {
          std::vector<int64_t> members_positions, group_positions;
          for (int member = 0; member < per_group; ++member)
            for (const SequenceChunk& chunk : layout.sequence_layout().chunks(group * per_group + member))
              for (int64_t i = 0; i < chunk.length; ++i) members_positions.push_back(chunk.position + i);
          for (const SequenceChunk& chunk : over_groups.sequence_layout().chunks(group))
            for (int64_t i = 0; i < chunk.length; ++i) group_positions.push_back(chunk.position + i);
          EXPECT_EQ(members_positions, group_positions) << "group " << group;
        }
      }
  EXPECT_THAT(DocumentLayout::grouped(LayoutKind::zigzag, {5, 3}, 2, 2).describe(),
              HasSubstr("zigzag per document over 2 groups of 2 ranks: 2 documents, 8 tokens and 8 of padding"));
}

TEST(DocumentLayout, ZigzagGivesEveryRankTheSameCausalWorkWithinDocuments) {
  const int ranks = 4;
  const std::vector<int64_t> lengths{64, 8, 24, 200};  // multiples of 2N = 8: no padding
  const DocumentLayout layout(LayoutKind::zigzag, lengths, ranks);
  ASSERT_EQ(layout.padding(), 0);
  std::vector<int64_t> pairs(static_cast<std::size_t>(ranks), 0);
  for (int rank = 0; rank < ranks; ++rank)
    for (const SequenceChunk& chunk : layout.sequence_layout().chunks(rank)) {
      // A query sees the keys of its document up to itself.
      const auto& starts = layout.padded_starts();
      const int64_t start = *(std::upper_bound(starts.begin(), starts.end(), chunk.position) - 1);
      for (int64_t position = chunk.position; position < chunk.position + chunk.length; ++position)
        pairs[static_cast<std::size_t>(rank)] += position - start + 1;
    }
  for (int rank = 1; rank < ranks; ++rank) EXPECT_EQ(pairs[static_cast<std::size_t>(rank)], pairs[0]);
}

TEST(DocumentLayout, ZigzagHoldsPartsRAndTwoNMinusOneMinusROfEachDocument) {
  const DocumentLayout layout(LayoutKind::zigzag, {5, 8}, 2);  // padded to 8 and 8: parts of 2
  EXPECT_EQ(layout.padded_lengths(), (std::vector<int64_t>{8, 8}));
  EXPECT_EQ(layout.packed_starts(), (std::vector<int64_t>{0, 5, 13}));
  EXPECT_EQ(layout.padded_starts(), (std::vector<int64_t>{0, 8, 16}));
  EXPECT_EQ(layout.local_starts(1), (std::vector<int64_t>{0, 4, 8}));
  const std::vector<SequenceChunk>& chunks = layout.sequence_layout().chunks(1);
  ASSERT_EQ(chunks.size(), 4u);
  const std::vector<int64_t> positions{2, 4, 10, 12}, offsets{0, 2, 4, 6};
  for (std::size_t i = 0; i < chunks.size(); ++i) {
    EXPECT_EQ(chunks[i].position, positions[i]);
    EXPECT_EQ(chunks[i].length, 2);
    EXPECT_EQ(chunks[i].local_offset, offsets[i]);
  }
  // Document 0's tokens 5..7 are padding: rank 1's second part (positions 4, 5) holds one.
  EXPECT_EQ(layout.local_padding(0), 2);
  EXPECT_EQ(layout.local_padding(1), 1);
  EXPECT_EQ(layout.describe(), "zigzag per document over 2 ranks: 2 documents, 13 tokens and 3 of padding");
}

TEST(DocumentLayout, TheWholeSequenceSplitsContiguouslyWithItsPaddingAtTheEnd) {
  // 3 + 6 + 2 = 11 tokens over 4 ranks: padded to 12, stretches of 3; documents cut anywhere.
  const DocumentLayout layout = DocumentLayout::whole_sequence({3, 6, 2}, 4);
  EXPECT_EQ(layout.split(), DocumentSplit::whole_sequence);
  EXPECT_EQ(layout.padded_lengths(), (std::vector<int64_t>{3, 6, 3}));
  EXPECT_EQ(layout.padding(), 1);
  EXPECT_EQ(layout.sequence_layout().local_length(), 3);
  // Rank 2 holds positions 6..8, the end of document 1 (3..8); rank 3 holds 9..11, document 2
  // and its padding.
  const std::vector<SequenceChunk> chunks = layout.chunks(2);
  ASSERT_EQ(chunks.size(), 1u);
  EXPECT_EQ(chunks[0].position, 6);
  const DocumentLayout cut = DocumentLayout::whole_sequence({2, 3, 1}, 2);  // stretches 0..2 and 3..5
  const std::vector<SequenceChunk> rank0 = cut.chunks(0), rank1 = cut.chunks(1);
  ASSERT_EQ(rank0.size(), 2u);
  EXPECT_EQ(rank0[1].position, 2);
  EXPECT_EQ(rank0[1].length, 1);
  EXPECT_EQ(rank0[1].local_offset, 2);
  ASSERT_EQ(rank1.size(), 2u);
  EXPECT_EQ(rank1[0].position, 3);
  EXPECT_EQ(rank1[0].length, 2);
  EXPECT_EQ(rank1[1].local_offset, 2);
  EXPECT_EQ(cut.local_starts(0), (std::vector<int64_t>{0, 2, 3}));
  EXPECT_EQ(cut.local_starts(1), (std::vector<int64_t>{0, 2, 3}));
  EXPECT_EQ(layout.local_padding(3), 1);
  EXPECT_EQ(layout.local_padding(0), 0);
  EXPECT_EQ(layout.describe(), "the whole sequence contiguous over 4 ranks: 3 documents, 11 tokens and 1 of padding");
  // Query pairs under a causal mask within documents: rank 2's queries 6, 7, 8 see 4, 5, 6 keys.
  EXPECT_EQ(layout.query_pairs(2, AttentionMask{-1, 0}), 15);
  std::vector<float> packed(11), shard(3, std::numeric_limits<float>::quiet_NaN());
  std::iota(packed.begin(), packed.end(), 1.0f);
  shard_documents(layout, 3, TensorView::contiguous(packed.data(), DType::f32, {11, 1, 1}),
                  TensorView::contiguous(shard.data(), DType::f32, {3, 1, 1}), /*seq_dim=*/0);
  EXPECT_EQ(shard, (std::vector<float>{10, 11, 0}));
}

TEST(DocumentLayout, ThdTensorsShardAlongTheirFirstDimension) {
  const DocumentLayout layout(LayoutKind::contiguous, {3, 1}, 2);  // padded to 4 and 2
  std::vector<float> packed{1, 2, 3, 4, 5, 6, 7, 8};  // (T = 4, H = 1, D = 2)
  std::vector<float> shard(6, std::numeric_limits<float>::quiet_NaN());  // (3, 1, 2)
  shard_documents(layout, 1, TensorView::contiguous(packed.data(), DType::f32, {4, 1, 2}),
                  TensorView::contiguous(shard.data(), DType::f32, {3, 1, 2}), /*seq_dim=*/0);
  // Rank 1: document 0's tokens 2 and 3 (3 is padding), then document 1's token 1 (padding).
  EXPECT_EQ(shard, (std::vector<float>{5, 6, 0, 0, 0, 0}));
}

TEST(DocumentLayout, BadArgumentsNameTheValueAndWhatIsAllowed) {
  EXPECT_THAT([] { DocumentLayout(LayoutKind::zigzag, {4, 4}, 0); },
              ::testing::ThrowsMessage<Error>(HasSubstr("number of ranks must be at least 1, got 0")));
  EXPECT_THAT([] { DocumentLayout(LayoutKind::zigzag, {}, 2); },
              ::testing::ThrowsMessage<Error>(HasSubstr("at least one document; got none")));
  EXPECT_THAT([] { DocumentLayout(LayoutKind::contiguous, {4, 0, 3}, 2); },
              ::testing::ThrowsMessage<Error>(HasSubstr("document 1 has length 0; every document needs at least 1")));
  EXPECT_THAT([] { SequenceLayout::per_document(LayoutKind::zigzag, {8, 6}, 2); },
              ::testing::ThrowsMessage<Error>(HasSubstr("document 1: sequence length 6 cannot be split over 2 ranks")));
  const DocumentLayout layout(LayoutKind::zigzag, {3, 5}, 2);
  std::vector<float> packed(7), shard(static_cast<std::size_t>(layout.sequence_layout().local_length()));
  EXPECT_THAT(
      [&] {
        shard_documents(layout, 0, TensorView::contiguous(packed.data(), DType::f32, {1, 7, 1, 1}),
                        TensorView::contiguous(shard.data(), DType::f32, {1, layout.sequence_layout().local_length(), 1, 1}));
      },
      ::testing::ThrowsMessage<Error>(HasSubstr("has 7 tokens; the 2 documents have 8")));
}

}  // namespace
}  // namespace spattn
