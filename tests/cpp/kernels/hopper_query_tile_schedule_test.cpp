// The static schedule of the own Hopper forward (src/kernels/hopper/query_tile_schedule.hpp): every
// query tile of every (batch, head) is visited by exactly one CTA, and under a causal mask the CTAs
// get about the same work, which the plain longest-first round robin does not give.

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <set>
#include <utility>
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
      work[static_cast<std::size_t>(cta)] += schedule.place(tile).m_block + 1;
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
              const int m = schedule.place(tile).m_block;
              ASSERT_GE(m, 0);
              ASSERT_LT(m, query_tiles);
              m_blocks[static_cast<std::size_t>(schedule.place(tile).head_and_batch)].insert(m);
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

TEST(HopperQueryTileSchedule, CounterOrderPlacesEveryTileOnce) {
  unsigned counter[2] = {};
  for (const int query_tiles : {1, 5, 32})
    for (const int heads_total : {1, 7, 64})
      for (const int section_heads : {1, 3, 7, 64}) {
        if (section_heads > heads_total) continue;
        SCOPED_TRACE(::testing::Message() << query_tiles << " query tiles, " << heads_total << " heads, sections of "
                                          << section_heads);
        QueryTileSchedule schedule;
        schedule.query_tiles = query_tiles;
        schedule.total_tiles = query_tiles * heads_total;
        schedule.tiles_per_visit = 1;
        schedule.last_tiles_first = true;
        schedule.counter = counter;
        schedule.section_heads = section_heads;
        std::set<std::pair<int, int>> placed;
        for (int tile = 0; tile < schedule.total_tiles; ++tile) {
          const QueryTileSchedule::Place place = schedule.place(tile);
          ASSERT_GE(place.head_and_batch, 0);
          ASSERT_LT(place.head_and_batch, heads_total);
          ASSERT_GE(place.m_block, 0);
          ASSERT_LT(place.m_block, query_tiles);
          placed.insert({place.head_and_batch, place.m_block});
        }
        EXPECT_EQ(static_cast<int>(placed.size()), schedule.total_tiles);
      }
}

TEST(HopperQueryTileSchedule, CounterHandsOutCausalWorkEvenly) {
  // The dynamic order as the counter hands it out: CTAs take the next tile whenever they finish
  // one. Causal (query tile m sees m + 1 key tiles), bf16, head dim 128, an H100's 132
  // multiprocessors: 2k to 32k tokens in the kernel benchmark's 4096 tiles of 128 rows, and a GQA
  // case; the slowest CTA within 1% of the mean.
  unsigned counter[2] = {};
  for (const int query_tiles : {16, 32, 64, 128, 256}) {
    QueryTileSchedule schedule;
    schedule.query_tiles = query_tiles;
    schedule.total_tiles = 4096;
    schedule.tiles_per_visit = 1;
    schedule.last_tiles_first = true;
    schedule.counter = counter;
    const int64_t kv_bytes_per_head = int64_t{query_tiles} * 128 * 128 * 2 * 2;
    schedule.section_heads = QueryTileSchedule::section_size(query_tiles, 4096 / query_tiles, 132, kv_bytes_per_head,
                                                             int64_t{24} << 20);
    std::vector<long> finish(132, 0);
    long total_work = 0;
    for (int tile = 0; tile < schedule.total_tiles; ++tile) {
      const int work = schedule.place(tile).m_block + 1;
      *std::min_element(finish.begin(), finish.end()) += work;
      total_work += work;
    }
    const double imbalance = *std::max_element(finish.begin(), finish.end()) / (total_work / 132.0);
    EXPECT_LT(imbalance, 1.01) << query_tiles << " query tiles per head, sections of " << schedule.section_heads;
  }
}

}  // namespace
}  // namespace spattn::cuda::hopper
