#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <numeric>
#include <vector>

#include "spattn/error.hpp"
#include "spattn/sequence_layout.hpp"

namespace spattn {
namespace {

using ::testing::HasSubstr;

class EveryLayout : public ::testing::TestWithParam<LayoutKind> {};

// Every global token is held by exactly one rank, at a distinct local slot.
TEST_P(EveryLayout, ChunksCoverTheSequenceOnce) {
  for (int ranks = 1; ranks <= 16; ++ranks) {
    const int64_t length = 2 * ranks * 5;
    const SequenceLayout layout(GetParam(), length, ranks);
    std::vector<int> owners(static_cast<std::size_t>(length), 0);
    for (int rank = 0; rank < ranks; ++rank) {
      std::vector<int> slots(static_cast<std::size_t>(layout.local_length()), 0);
      for (const SequenceChunk& chunk : layout.chunks(rank))
        for (int64_t i = 0; i < chunk.length; ++i) {
          ++owners[static_cast<std::size_t>(chunk.position + i * layout.position_stride())];
          ++slots[static_cast<std::size_t>(chunk.local_offset + i)];
        }
      for (int count : slots) EXPECT_EQ(count, 1) << "ranks " << ranks << " rank " << rank;
    }
    for (int count : owners) EXPECT_EQ(count, 1) << "ranks " << ranks;
  }
}

INSTANTIATE_TEST_SUITE_P(Layouts, EveryLayout,
                         ::testing::Values(LayoutKind::contiguous, LayoutKind::zigzag, LayoutKind::stripe));

TEST(SequenceLayout, StripeHoldsEveryNthToken) {
  const SequenceLayout layout(LayoutKind::stripe, 12, 3);
  EXPECT_EQ(layout.name(), "stripe");
  EXPECT_EQ(layout.position_stride(), 3);
  const std::vector<SequenceChunk> chunks = layout.chunks(2);
  ASSERT_EQ(chunks.size(), 1u);
  EXPECT_EQ(chunks[0].position, 2);  // tokens 2, 5, 8, 11
  EXPECT_EQ(chunks[0].length, 4);
  EXPECT_THAT(SequenceLayout::split_error(LayoutKind::stripe, 10, 4),
              HasSubstr("in the stripe layout: it must be a positive multiple of ranks = 4"));
  EXPECT_EQ(SequenceLayout(LayoutKind::zigzag, 12, 3).position_stride(), 1);
}

// The mask positions keep the causal order of the global positions between a viewer's queries
// and every rank's keys, token by token; in the layouts of consecutive chunks they are the
// global positions.
TEST(SequenceLayout, MaskPositionsKeepTheCausalOrderOfEveryQueryKeyPair) {
  for (int ranks = 1; ranks <= 5; ++ranks) {
    const SequenceLayout layout(LayoutKind::stripe, 4 * ranks, ranks);
    for (int viewer = 0; viewer < ranks; ++viewer)
      for (int owner = 0; owner < ranks; ++owner)
        for (int64_t i = 0; i < layout.local_length(); ++i)
          for (int64_t j = 0; j < layout.local_length(); ++j) {
            const int64_t query = i * ranks + viewer, key = j * ranks + owner;
            EXPECT_EQ(layout.mask_position(key, viewer) <= layout.mask_position(query, viewer), key <= query)
                << "ranks " << ranks << ", query " << query << " of rank " << viewer << ", key " << key;
          }
    // A viewer's own tokens sit at their stripe, consecutive.
    EXPECT_EQ(layout.mask_position(ranks + ranks - 1, ranks - 1), 1);
  }
  const SequenceLayout zigzag(LayoutKind::zigzag, 24, 3);
  for (int64_t position = 0; position < 24; ++position) EXPECT_EQ(zigzag.mask_position(position, 1), position);
}

TEST(SequenceLayout, ZigzagHoldsChunksRAndTwoNMinusOneMinusR) {
  const SequenceLayout layout(LayoutKind::zigzag, 80, 4);  // 8 chunks of 10
  const std::vector<SequenceChunk> chunks = layout.chunks(1);
  ASSERT_EQ(chunks.size(), 2u);
  EXPECT_EQ(chunks[0].position, 10);
  EXPECT_EQ(chunks[1].position, 60);
  EXPECT_EQ(chunks[1].local_offset, 10);
}

TEST(SequenceLayout, IndivisibleLengthNamesNearestValidLengths) {
  EXPECT_THAT(SequenceLayout::split_error(LayoutKind::zigzag, 100, 3),
              HasSubstr("positive multiple of 2 x ranks = 6; nearest valid lengths: 96 or 102"));
  EXPECT_THAT(SequenceLayout::split_error(LayoutKind::contiguous, 10, 4),
              HasSubstr("multiple of ranks = 4; nearest valid lengths: 8 or 12"));
  EXPECT_THAT(SequenceLayout::split_error(LayoutKind::zigzag, 3, 4), HasSubstr("nearest valid lengths: 8"));
  EXPECT_EQ(SequenceLayout::split_error(LayoutKind::zigzag, 96, 3), "");
  EXPECT_THROW(SequenceLayout(LayoutKind::zigzag, 100, 3), Error);
  EXPECT_THAT(SequenceLayout::split_error(LayoutKind::contiguous, 8, 0), HasSubstr("at least 1"));
}

TEST_P(EveryLayout, ShardThenUnshardRestoresTheTensor) {
  const int ranks = 3;
  const int64_t length = 12;
  const SequenceLayout layout(GetParam(), length, ranks);
  std::vector<float> full(2 * length * 3);  // (2, S, 3) viewed as (B, S, H) with seq_dim 1
  std::iota(full.begin(), full.end(), 1.0f);
  std::vector<float> rebuilt(full.size(), -1.0f);
  for (int rank = 0; rank < ranks; ++rank) {
    std::vector<float> local(static_cast<std::size_t>(2 * layout.local_length() * 3));
    const TensorView full_view = TensorView::contiguous(full.data(), DType::f32, {2, length, 3});
    const TensorView local_view = TensorView::contiguous(local.data(), DType::f32, {2, layout.local_length(), 3});
    shard_sequence(layout, rank, full_view, local_view, 1);
    for (const SequenceChunk& chunk : layout.chunks(rank))  // spot-check token placement
      EXPECT_EQ(local[static_cast<std::size_t>(chunk.local_offset * 3)], full[static_cast<std::size_t>(chunk.position * 3)]);
    unshard_sequence(layout, rank, local_view, TensorView::contiguous(rebuilt.data(), DType::f32, {2, length, 3}), 1);
  }
  EXPECT_EQ(rebuilt, full);
}

// Every token of a grouped layout is held once, and each group's ranks hold its tokens in order.
TEST(SequenceLayout, GroupedSplitsEachGroupsTokensContiguously) {
  for (LayoutKind kind : {LayoutKind::contiguous, LayoutKind::zigzag})
    for (int groups = 1; groups <= 4; ++groups)
      for (int members = 1; members <= 5; ++members) {
        const int64_t length = 2 * groups * members * 3;
        const SequenceLayout group_layout(kind, length, groups);
        const SequenceLayout layout = SequenceLayout::grouped(group_layout, members);
        ASSERT_EQ(layout.ranks(), groups * members);
        EXPECT_EQ(layout.local_length(), length / (groups * members));
        std::vector<int> owners(static_cast<std::size_t>(length), 0);
        for (int group = 0; group < groups; ++group) {
          // The group's ranks, in order, hold exactly the group's tokens in the group's order.
          std::vector<int64_t> group_positions, member_positions;
          for (const SequenceChunk& chunk : group_layout.chunks(group))
            for (int64_t i = 0; i < chunk.length; ++i) group_positions.push_back(chunk.position + i);
          for (int member = 0; member < members; ++member) {
            int64_t expected_offset = 0;
            for (const SequenceChunk& chunk : layout.chunks(group * members + member)) {
              EXPECT_EQ(chunk.local_offset, expected_offset);
              expected_offset += chunk.length;
              for (int64_t i = 0; i < chunk.length; ++i) {
                member_positions.push_back(chunk.position + i);
                ++owners[static_cast<std::size_t>(chunk.position + i * layout.position_stride())];
              }
            }
            EXPECT_EQ(expected_offset, layout.local_length());
          }
          EXPECT_EQ(member_positions, group_positions) << layout.name();
        }
        for (int count : owners) EXPECT_EQ(count, 1);
      }
  // Groups of one rank are the group layout itself; contiguous groups are the contiguous layout.
  const SequenceLayout contiguous_groups = SequenceLayout::grouped(SequenceLayout(LayoutKind::contiguous, 24, 2), 3);
  const SequenceLayout contiguous(LayoutKind::contiguous, 24, 6);
  for (int rank = 0; rank < 6; ++rank)
    EXPECT_EQ(contiguous_groups.chunks(rank)[0].position, contiguous.chunks(rank)[0].position);
  EXPECT_EQ(SequenceLayout::grouped(SequenceLayout(LayoutKind::zigzag, 24, 3), 1).chunks(1).size(), 2u);
}

TEST(SequenceLayout, GroupedLengthErrorsNameNearestLengths) {
  EXPECT_THAT(SequenceLayout::grouped_split_error(LayoutKind::zigzag, 100, 2, 3),
              HasSubstr("2 x groups x ranks per group = 12; nearest valid lengths: 96 or 108"));
  EXPECT_THAT(SequenceLayout::grouped_split_error(LayoutKind::zigzag, 10, 4, 1), HasSubstr("2 x ranks = 8"));
  EXPECT_EQ(SequenceLayout::grouped_split_error(LayoutKind::zigzag, 96, 2, 3), "");
  EXPECT_THROW(SequenceLayout::grouped(SequenceLayout(LayoutKind::zigzag, 20, 2), 3), Error);
}

TEST(SequenceLayout, ShardRejectsMismatchedShapes) {
  const SequenceLayout layout(LayoutKind::contiguous, 8, 2);
  std::vector<float> full(8), local(3);
  EXPECT_THAT(
      [&] {
        try {
          shard_sequence(layout, 0, TensorView::contiguous(full.data(), DType::f32, {1, 8}),
                         TensorView::contiguous(local.data(), DType::f32, {1, 3}), 1);
        } catch (const Error& error) {
          return std::string(error.what());
        }
        return std::string();
      }(),
      HasSubstr("expected 4"));
}

}  // namespace
}  // namespace spattn
