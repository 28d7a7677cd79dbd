// The static schedule of the own Hopper forward (src/kernels/hopper/query_tile_schedule.hpp): every
// query tile of every (batch, head) is visited by exactly one CTA, and under a causal mask the CTAs
// get about the same work, which the plain longest-first round robin does not give.

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <set>
#include <vector>

#include "kernels/hopper/query_tile_schedule.hpp"

namespace spattn::cuda::hopper {
namespace {

/// The key tiles each CTA visits when query tile m sees m + 1 of them (causal, square tiles).
std::vector<long> causal_work_per_cta(const QueryTileSchedule& schedule, int multiprocessors) {
  const int grid = schedule.grid(multiprocessors);
  std::vector<long> work(static_cast<std::size_t>(grid), 0);
  for (int cta = 0; cta < grid; ++cta)
    for (int tile = schedule.first_tile(cta); tile < schedule.total_tiles; tile = schedule.next_tile(tile, grid))
      work[static_cast<std::size_t>(cta)] += schedule.m_block(tile) + 1;
  return work;
}

TEST(HopperQueryTileSchedule, VisitsEveryTileOnceAndEachHeadsTilesOnce) {
  for (const int query_tiles : {1, 2, 7, 32, 33})
    for (const int heads : {1, 3, 64})
      for (const int multiprocessors : {1, 5, 132})
        for (const bool last_first : {false, true}) {
          SCOPED_TRACE(::testing::Message() << query_tiles << " query tiles, " << heads << " heads, "
                                            << multiprocessors << " multiprocessors");
          QueryTileSchedule schedule;
          schedule.query_tiles = query_tiles;
          schedule.total_tiles = query_tiles * heads;
          schedule.tiles_per_visit = QueryTileSchedule::visit_size(schedule.total_tiles, multiprocessors);
          schedule.last_tiles_first = last_first;
          const int grid = schedule.grid(multiprocessors);
          ASSERT_GE(grid, 1);
          ASSERT_LE(grid, multiprocessors);
          std::vector<int> visits(static_cast<std::size_t>(schedule.total_tiles), 0);
          std::vector<std::set<int>> m_blocks(static_cast<std::size_t>(heads));
          for (int cta = 0; cta < grid; ++cta)
            for (int tile = schedule.first_tile(cta); tile < schedule.total_tiles; tile = schedule.next_tile(tile, grid)) {
              ++visits[static_cast<std::size_t>(tile)];
              const int m = schedule.m_block(tile);
              ASSERT_GE(m, 0);
              ASSERT_LT(m, query_tiles);
              m_blocks[static_cast<std::size_t>(schedule.head_and_batch(tile))].insert(m);
            }
          for (int count : visits) ASSERT_EQ(count, 1);
          for (const auto& blocks : m_blocks) ASSERT_EQ(static_cast<int>(blocks.size()), query_tiles);
        }
}

TEST(HopperQueryTileSchedule, CausalWorkIsBalancedAcrossCtas) {
  // 4k tokens in tiles of 128 (32 query tiles), 128 heads x batches, 132 multiprocessors (H100).
  QueryTileSchedule schedule;
  schedule.query_tiles = 32;
  schedule.total_tiles = 32 * 128;
  schedule.tiles_per_visit = QueryTileSchedule::visit_size(schedule.total_tiles, 132);
  schedule.last_tiles_first = true;
  ASSERT_EQ(schedule.tiles_per_visit, 2);
  const std::vector<long> paired = causal_work_per_cta(schedule, 132);
  const double mean = std::accumulate(paired.begin(), paired.end(), 0.0) / static_cast<double>(paired.size());
  const double paired_imbalance = *std::max_element(paired.begin(), paired.end()) / mean;
  EXPECT_LT(paired_imbalance, 1.04) << "the slowest CTA does this much more than the mean";

  schedule.tiles_per_visit = 1;  // longest first, one tile per visit: the schedule pairing replaced
  const std::vector<long> single = causal_work_per_cta(schedule, 132);
  const double single_imbalance = *std::max_element(single.begin(), single.end()) / mean;
  EXPECT_GT(single_imbalance, paired_imbalance + 0.04) << "pairing should balance clearly better";
}

}  // namespace
}  // namespace spattn::cuda::hopper
