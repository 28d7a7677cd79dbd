#include <gtest/gtest.h>

#include "spattn/attention_options.hpp"

namespace spattn {
namespace {

TEST(AttentionMask, FlashAttentionWindowSemantics) {
  const AttentionMask window = AttentionMask::from_options(AttentionOptions{false, 2, 1});
  EXPECT_TRUE(window.visible(10, 8));
  EXPECT_FALSE(window.visible(10, 7));
  EXPECT_TRUE(window.visible(10, 11));
  EXPECT_FALSE(window.visible(10, 12));
  const AttentionMask causal = AttentionMask::from_options(AttentionOptions{true, -1, -1});
  EXPECT_TRUE(causal.visible(5, 0));
  EXPECT_TRUE(causal.visible(5, 5));
  EXPECT_FALSE(causal.visible(5, 6));
  // causal caps a window's right side at 0
  EXPECT_EQ(AttentionMask::from_options(AttentionOptions{true, 4, 7}).right, 0);
  EXPECT_EQ(AttentionMask::from_options(AttentionOptions{false, -1, -1}).right, -1);
}

// any_visible, all_visible and visible_pairs agree with brute force over every small block and mask.
TEST(AttentionMask, BlockQueriesMatchBruteForce) {
  const int64_t bounds[] = {-1, 0, 1, 3};
  for (bool causal : {false, true})
    for (int64_t left : bounds)
      for (int64_t right : bounds) {
        const AttentionMask mask = AttentionMask::from_options(AttentionOptions{causal, left, right});
        for (int64_t q_begin = 0; q_begin < 8; ++q_begin)
          for (int64_t q_end = q_begin + 1; q_end <= 8; ++q_end)
            for (int64_t k_begin = 0; k_begin < 8; ++k_begin)
              for (int64_t k_end = k_begin + 1; k_end <= 8; ++k_end) {
                bool any = false, all = true;
                int64_t pairs = 0;
                for (int64_t q = q_begin; q < q_end; ++q)
                  for (int64_t k = k_begin; k < k_end; ++k) {
                    any = any || mask.visible(q, k);
                    all = all && mask.visible(q, k);
                    pairs += mask.visible(q, k);
                  }
                ASSERT_EQ(mask.any_visible(q_begin, q_end, k_begin, k_end), any)
                    << causal << " " << left << " " << right << " q[" << q_begin << "," << q_end << ") k[" << k_begin
                    << "," << k_end << ")";
                ASSERT_EQ(mask.all_visible(q_begin, q_end, k_begin, k_end), all);
                ASSERT_EQ(mask.visible_pairs(q_begin, q_end, k_begin, k_end), pairs);
              }
      }
}

// Long blocks far apart, and windows of 2^62 or more (unbounded): no overflow, the exact counts.
TEST(AttentionMask, VisiblePairsOfLongBlocks) {
  const int64_t n = int64_t{1} << 30;
  const AttentionMask none = AttentionMask::from_options(AttentionOptions{false, int64_t{1} << 62, -1});
  EXPECT_EQ(none.visible_pairs(0, n, n, 2 * n), n * n);
  const AttentionMask causal = AttentionMask::from_options(AttentionOptions{true, -1, -1});
  EXPECT_EQ(causal.visible_pairs(0, n, 0, n), n * (n + 1) / 2);
  EXPECT_EQ(causal.visible_pairs(0, n, n, 2 * n), 0);
  EXPECT_EQ(causal.visible_pairs(n, 2 * n, 0, n), n * n);
  // A window of w keys to the left (and the query itself): w + 1 keys per query far from the start.
  const int64_t w = 4096;
  const AttentionMask window = AttentionMask::from_options(AttentionOptions{true, w, -1});
  EXPECT_EQ(window.visible_pairs(n, 2 * n, 0, 2 * n), n * (w + 1));
}

}  // namespace
}  // namespace spattn
