// The order of an own Hopper backward CTA's steps (src/kernels/hopper/backward_step_order.hpp):
// every (query head, query tile) once in either order; in the deterministic mode's order no key
// tile reaches a query tile's dQ add before the key tile whose add comes before its own, under
// every mask; and, in a model of the turn waits, a causal launch in that order ends about when the
// racing adds' launch does, where head by head it ends a third later.

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <map>
#include <queue>
#include <utility>
#include <vector>

#include "kernels/hopper/backward_step_order.hpp"
#include "kernels/hopper/backward_tile_order.hpp"
#include "kernels/hopper/backward_tiles.hpp"
#include "kernels/hopper/key_tile_plan.hpp"

namespace spattn::cuda::hopper {
namespace {

constexpr int kH100Multiprocessors = 132;
constexpr int kQueryTile = backward_query_tile(128);  // the models' head dim
constexpr int64_t kUnbounded = -1;

/// The steps of the query heads [first_head, first_head + heads) and `query_tiles`, in the order
/// of `in_turn_order`, as the kernel's loops go through them.
std::vector<QueryStep> walk(int first_head, int heads, TileSpan query_tiles, bool in_turn_order) {
  const BackwardSteps steps{first_head, heads, query_tiles,
                            in_turn_order ? StepOrder::in_turn : StepOrder::head_by_head};
  std::vector<QueryStep> visited;
  with_step_order(steps.order, [&](auto order) {
    constexpr StepOrder kOrder = decltype(order)::value;
    QueryStep at = steps.first<kOrder>();
    for (int step = 0; step < steps.count(); ++step, steps.advance<kOrder>(at)) visited.push_back(at);
  });
  return visited;
}

/// (head, query tile) pairs of `steps`.
std::vector<std::pair<int, int>> pairs_of(const std::vector<QueryStep>& steps) {
  std::vector<std::pair<int, int>> pairs;
  for (const QueryStep& at : steps) pairs.emplace_back(at.head, at.m_block);
  return pairs;
}

TEST(HopperBackwardStepOrder, EveryHeadAndQueryTileOnceInEitherOrder) {
  for (const bool in_turn_order : {false, true})
    for (const int heads : {1, 3, 4})
      for (const TileSpan tiles : {TileSpan{0, 1}, TileSpan{2, 9}, TileSpan{0, 64}, TileSpan{5, 5}}) {
        SCOPED_TRACE(::testing::Message() << (in_turn_order ? "turn order, " : "racing order, ") << heads
                                          << " heads, query tiles [" << tiles.begin << ", " << tiles.end << ")");
        std::vector<std::pair<int, int>> visited = pairs_of(walk(4, heads, tiles, in_turn_order));
        EXPECT_EQ(static_cast<int>(visited.size()), heads * std::max(0, tiles.end - tiles.begin));
        std::sort(visited.begin(), visited.end());
        EXPECT_TRUE(std::adjacent_find(visited.begin(), visited.end()) == visited.end());
        for (const auto& [head, tile] : visited) {
          EXPECT_GE(head, 4);
          EXPECT_LT(head, 4 + heads);
          EXPECT_GE(tile, tiles.begin);
          EXPECT_LT(tile, tiles.end);
        }
      }
}

TEST(HopperBackwardStepOrder, RacingAddsGoHeadByHeadTheTurnOrderFromTheLastTileDown) {
  const std::vector<std::pair<int, int>> racing = {{0, 2}, {0, 3}, {0, 4}, {1, 2}, {1, 3}, {1, 4}};
  EXPECT_EQ(pairs_of(walk(0, 2, TileSpan{2, 5}, false)), racing);
  const std::vector<std::pair<int, int>> in_turn = {{0, 4}, {1, 4}, {0, 3}, {1, 3}, {0, 2}, {1, 2}};
  EXPECT_EQ(pairs_of(walk(0, 2, TileSpan{2, 5}, true)), in_turn);
}

/// A launch's key tiles over its segments, as the kernel numbers them (BackwardSegment::first_tile),
/// each with the query tiles its CTA visits.
std::vector<TileSpan> visited_query_tiles(int64_t q_position, int64_t rows, const std::vector<KeyRange>& segments,
                                          int64_t left, int64_t right) {
  std::vector<TileSpan> spans;
  for (const KeyRange& keys : segments)
    for (int tile = 0; int64_t{tile} * kBackwardKeyTile < keys.length; ++tile)
      spans.push_back(visible_query_tiles(q_position, rows, keys, tile, left, right, kQueryTile, kBackwardKeyTile));
  return spans;
}

/// How many key tiles' CTAs, of a group of `heads` query heads, reach some (head, query tile)
/// before the key tile whose add into it comes just before theirs in the deterministic order (the
/// lower key tiles that visit it go first): each such step waits.
int early_arrivals(const std::vector<TileSpan>& spans, int heads, bool in_turn_order) {
  std::map<std::pair<int, int>, int> step_of_last_visitor;  // (head, query tile) -> its step there
  int early = 0;
  for (const TileSpan& span : spans) {
    const std::vector<QueryStep> steps = walk(0, heads, span, in_turn_order);
    for (int step = 0; step < static_cast<int>(steps.size()); ++step) {
      const QueryStep at = steps[static_cast<std::size_t>(step)];
      const auto [last, inserted] = step_of_last_visitor.insert({{at.head, at.m_block}, step});
      if (!inserted) {
        if (step < last->second) ++early;
        last->second = step;
      }
    }
  }
  return early;
}

TEST(HopperBackwardStepOrder, InTurnOrderNoKeyTileReachesATileBeforeTheKeyTileBeforeIt) {
  struct Case {
    const char* name;
    int64_t q_position, rows;
    std::vector<KeyRange> segments;
    int64_t left, right;
  };
  const std::vector<Case> cases = {
      {"causal diagonal", 0, 4096, {{0, 4096}}, kUnbounded, 0},
      {"causal, lengths off the tiles", 0, 4000, {{0, 3900}}, kUnbounded, 0},
      {"no mask", 0, 4096, {{0, 4096}}, kUnbounded, kUnbounded},
      {"causal, every query after every key", 8192, 4096, {{0, 4096}}, kUnbounded, 0},
      {"window of 1000 back", 0, 4096, {{0, 4096}}, 1000, 0},
      {"window of 300 back and 200 ahead", 0, 4096, {{0, 4096}}, 300, 200},
      {"causal, two segments in order", 2048, 4096, {{0, 1000}, {2048, 4096}}, kUnbounded, 0},
  };
  for (const Case& c : cases)
    for (const int heads : {1, 4}) {
      SCOPED_TRACE(::testing::Message() << c.name << ", " << heads << " heads");
      EXPECT_EQ(early_arrivals(visited_query_tiles(c.q_position, c.rows, c.segments, c.left, c.right), heads, true), 0);
    }
  // Head by head, the later key tiles of a causal block get to every tile early: the waits pile up.
  const std::vector<TileSpan> causal = visited_query_tiles(0, 4096, {{0, 4096}}, kUnbounded, 0);
  EXPECT_GT(early_arrivals(causal, 4, false), 0);
}

/// When the last CTA of a launch of square blocks of `tokens` tokens (GQA 32/8, batch 1, whole
/// groups, one band's order) ends, in steps, if the GPU starts the CTAs in grid order as
/// multiprocessors come free, a step's compute takes 1, its dQ add 0.4 after the compute and,
/// with `turns`, after the add of the key tile before it into the same (head, query tile), and a
/// step's dQ cannot leave the consumers before the previous add has read the one dQ buffer out.
double modeled_launch_end(int64_t tokens, bool causal, bool turns, bool in_turn_order) {
  constexpr double kAdd = 0.4;
  constexpr int kKvHeads = 8, kHeads = 4;
  const int key_tiles = static_cast<int>(tokens / kBackwardKeyTile);
  const int query_tiles = static_cast<int>((tokens + kQueryTile - 1) / kQueryTile);
  const int64_t right = causal ? 0 : kUnbounded;
  const KeyRange block{0, tokens};
  const int band = static_cast<int>(
      backward_band_groups(key_tiles, kKvHeads, kH100Multiprocessors,
                           key_tiles_see_equal_work(0, tokens, kQueryTile, &block, 1, kUnbounded, right)));
  // The end of the last add into each (group, head, query tile): the grid starts each group's key
  // tiles in ascending order, so the one before a CTA's is already modeled when it comes.
  std::vector<double> last_add_end(static_cast<std::size_t>(kKvHeads * kHeads * query_tiles), 0.0);
  std::priority_queue<double, std::vector<double>, std::greater<>> free_at;
  for (int m = 0; m < kH100Multiprocessors; ++m) free_at.push(0.0);
  double launch_end = 0.0;
  for (int cta = 0; cta < key_tiles * kKvHeads; ++cta) {
    const BackwardTileSlot slot = backward_tile_slot(cta, key_tiles, band);
    const std::vector<QueryStep> steps =
        walk(0, kHeads,
             visible_query_tiles(0, tokens, block, slot.key_tile, kUnbounded, right, kQueryTile, kBackwardKeyTile),
             in_turn_order);
    double computed = free_at.top(), add_start = 0.0, add_end = computed;
    free_at.pop();
    for (const QueryStep& at : steps) {
      computed = std::max(computed + 1.0, add_start);
      double& previous_add =
          last_add_end[static_cast<std::size_t>((slot.group * kHeads + at.head) * query_tiles + at.m_block)];
      add_start = turns ? std::max(computed, previous_add) : computed;
      add_end = add_start + kAdd;
      previous_add = add_end;
    }
    free_at.push(add_end);
    launch_end = std::max(launch_end, add_end);
  }
  return launch_end;
}

TEST(HopperBackwardStepOrder, TurnOrderKeepsTheDeterministicModeNearTheRacingAddsInAModel) {
  for (const int64_t tokens : {4096, 8192})
    for (const bool causal : {true, false}) {
      SCOPED_TRACE(::testing::Message() << tokens << " tokens, " << (causal ? "causal" : "no mask") << ", GQA 32/8");
      const double racing = modeled_launch_end(tokens, causal, false, false);
      // 80-row tiles: 1.051 at 4k without a mask in the model, 0.99 measured (H100, 2026-12-06)
      EXPECT_LT(modeled_launch_end(tokens, causal, true, true), 1.06 * racing);
      if (causal) {
        EXPECT_GT(modeled_launch_end(tokens, causal, true, false), 1.3 * racing);  // what the order is for
      }
    }
}

}  // namespace
}  // namespace spattn::cuda::hopper
