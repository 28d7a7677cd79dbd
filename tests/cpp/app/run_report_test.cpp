// The rate `spattn run` reports: forward FLOP by the flash-attention convention, per document.

#include "run_report.hpp"

#include <gtest/gtest.h>

namespace spattn::app {
namespace {

RunOptions shape(int64_t seq) {
  RunOptions options;
  options.batch = 2;
  options.heads = 3;
  options.head_dim = 8;
  options.seq = seq;
  return options;
}

constexpr double kPerPair = 4.0 * 2 * 3 * 8;  // 4 B H D

TEST(ForwardFlop, WholeSequenceCausalIsHalf) {
  RunOptions options = shape(10);
  EXPECT_EQ(forward_flop(options), kPerPair * 100);
  options.causal = true;
  EXPECT_EQ(forward_flop(options), kPerPair * 50);
}

TEST(ForwardFlop, DocumentsCountOnlyPairsWithinEach) {
  RunOptions options = shape(8);
  options.document_lengths = {3, 5};
  EXPECT_EQ(forward_flop(options), kPerPair * (9 + 25));
  options.causal = true;
  EXPECT_EQ(forward_flop(options), kPerPair * (9 + 25) / 2);
  // Window (1, 0): each query sees itself and the key before it, within its document.
  options.causal = false;
  options.window_left = 1;
  options.window_right = 0;
  EXPECT_EQ(forward_flop(options), kPerPair * ((1 + 2 + 2) + (1 + 2 + 2 + 2 + 2)));
}

}  // namespace
}  // namespace spattn::app
