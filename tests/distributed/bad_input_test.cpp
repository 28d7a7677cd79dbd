// Bad input: every rank gets the same clear error before any transfer, and nothing hangs, even
// when only one rank's arguments are wrong or the ranks disagree on the shape.

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "distributed_checks.hpp"
#include "distributed_world.hpp"
#include "host_tensor.hpp"
#include "spattn/error.hpp"
#include "spattn/distributed_attention.hpp"
#include "spattn/ring_attention.hpp"

namespace spattn {
namespace {

using ::testing::HasSubstr;

// A local shard of every argument, with its own head counts and dtypes.
struct Shard {
  HostTensor q, k, v, out, lse;
  Shard(int64_t local_seq, int64_t heads, int64_t kv_heads, int64_t head_dim, DType dtype = DType::f32,
        DType kv_dtype = DType::f32)
      : q(dtype, {1, local_seq, heads, head_dim}),
        k(kv_dtype, {1, local_seq, kv_heads, head_dim}),
        v(kv_dtype, {1, local_seq, kv_heads, head_dim}),
        out(dtype, {1, local_seq, heads, head_dim}),
        lse(DType::f32, {1, heads, local_seq}) {
    q.fill_normal(1);
    k.fill_normal(2);
    v.fill_normal(3);
  }
  void zigzag_forward(const AttentionOptions& options = {}) {
    zigzag_ring_attention_forward(world(), q.view(), k.view(), v.view(), out.view(), lse.view(), options);
  }
};

TEST(BadInput, ZigzagLengthNotDivisibleNamesNearestLengths) {
  const int ranks = world().size();
  Shard shard(5, 2, 2, 16);  // global length 5N, never a multiple of 2N
  const std::string error = error_of([&] { shard.zigzag_forward(); });
  EXPECT_THAT(error, HasSubstr("sequence length " + std::to_string(5 * ranks)));
  EXPECT_THAT(error, HasSubstr("2 x ranks = " + std::to_string(2 * ranks)));
  EXPECT_THAT(error, HasSubstr("nearest valid lengths"));
}

TEST(BadInput, HeadsNotDivisibleByKvHeads) {
  Shard shard(4, 3, 2, 16);
  EXPECT_THAT(error_of([&] { shard.zigzag_forward(); }), HasSubstr("heads (3) must be divisible by kv_heads (2)"));
}

TEST(BadInput, UnsupportedHeadDim) {
  Shard shard(4, 2, 2, 300);
  EXPECT_THAT(error_of([&] { shard.zigzag_forward(); }), HasSubstr("head_dim 300 is not supported; allowed: 1 to 256"));
}

TEST(BadInput, DtypesDisagree) {
  Shard shard(4, 2, 2, 16, DType::f32, DType::bf16);
  EXPECT_THAT(error_of([&] { shard.zigzag_forward(); }), HasSubstr("k is bf16; expected fp32"));
}

TEST(BadInput, WindowBelowMinusOne) {
  Shard shard(4, 2, 2, 16);
  AttentionOptions options;
  options.window_left = -3;
  EXPECT_THAT(error_of([&] { shard.zigzag_forward(options); }), HasSubstr("window (-3, -1) is not allowed"));
}

TEST(BadInput, NonFiniteScale) {
  Shard shard(4, 2, 2, 16);
  AttentionOptions options;
  options.softmax_scale = -1.0f;
  EXPECT_THAT(error_of([&] { shard.zigzag_forward(options); }), HasSubstr("softmax scale -1 is not allowed"));
}

TEST(BadInput, OneRanksOutputHasTheWrongShape) {
  const int ranks = world().size();
  const int bad_rank = ranks - 1;
  Shard shard(4, 2, 2, 16);
  HostTensor wrong_out(DType::f32, {1, 4, 2, 8});
  const std::string error = error_of([&] {
    TensorView out = world().rank() == bad_rank ? wrong_out.view() : shard.out.view();
    zigzag_ring_attention_forward(world(), shard.q.view(), shard.k.view(), shard.v.view(), out, shard.lse.view());
  });
  EXPECT_THAT(error, HasSubstr("out has shape (1, 4, 2, 8) fp32 cpu; expected (1, 4, 2, 16)"));
  if (world().rank() != bad_rank) {
    EXPECT_THAT(error, HasSubstr("rank " + std::to_string(bad_rank) + " rejected the call"));
  }
}

TEST(BadInput, RanksDisagreeOnTheShape) {
  if (world().size() < 2) GTEST_SKIP() << "needs two ranks to disagree";
  // Rank 0 holds 4 tokens, the others 6: no rank can tell alone, together they must refuse.
  Shard shard(world().rank() == 0 ? 4 : 6, 2, 2, 16);
  const int ranks = world().size();
  // Named, with both values, on every rank.
  EXPECT_THAT(error_of([&] { shard.zigzag_forward(); }),
              HasSubstr("ranks disagree on the call: rank 0 has seq=" + std::to_string(4 * ranks) + " but rank 1 has seq=" +
                        std::to_string(6 * ranks) + "; every rank must pass the same global shape"));
}

TEST(BadInput, RanksDisagreeOnTheMaskAndScale) {
  if (world().size() < 2) GTEST_SKIP() << "needs two ranks to disagree";
  Shard shard(4, 2, 2, 16);
  AttentionOptions options;
  if (world().rank() == 0) {
    options.causal = true;
    options.softmax_scale = 0.5f;
  }
  EXPECT_THAT(error_of([&] { shard.zigzag_forward(options); }),
              HasSubstr("rank 0 has causal=true, softmax_scale=0.5 but rank 1 has causal=false, "
                        "softmax_scale=none (1/sqrt(head_dim))"));
}

TEST(BadInput, PlanRejectsTensorsOfAnotherShape) {
  const int ranks = world().size();
  DistributedAttention plan(world(), Algorithm::ring, AttentionShape{1, 8 * ranks, 2, 2, 16, DType::f32}, {});
  Shard shard(4, 2, 2, 16);  // the plan expects 8 tokens per rank
  EXPECT_THAT(error_of([&] { plan.forward(shard.q.view(), shard.k.view(), shard.v.view(), shard.out.view(), shard.lse.view()); }),
              HasSubstr("q has shape (1, 4, 2, 16) fp32 cpu; expected (1, 8, 2, 16)"));
}

// The message every rank gets from building a plan of `algorithm` for this shape.
std::string plan_error(Algorithm algorithm, const AttentionShape& shape, const AttentionOptions& options = {},
                       const StrategyOptions& strategy_options = {}) {
  return error_of([&] { DistributedAttention plan(world(), algorithm, shape, options, strategy_options); });
}

TEST(BadInput, HamiltonAtFourOrSixRanksSaysNoneExistsAndSuggestsOthers) {
  const int ranks = world().size();
  // A length that splits into the N-1 slots wherever a decomposition exists.
  const int64_t length = 2 * ranks * std::max(1, ranks - 1) * 3;
  const std::string error = plan_error(Algorithm::hamilton, AttentionShape{1, length, 2, 2, 16, DType::f32});
  if (ranks == 4 || ranks == 6) {
    EXPECT_THAT(error, HasSubstr("no decomposition"));
    EXPECT_THAT(error, HasSubstr("ring, zigzag or ulysses"));
  } else {
    EXPECT_EQ(error, "");
  }
}

TEST(BadInput, HamiltonLengthNotCuttingIntoSlotsNamesNearestLengths) {
  const int ranks = world().size();
  if (ranks < 3 || ranks == 4 || ranks == 6) GTEST_SKIP() << "needs a Hamiltonian decomposition with several slots";
  AttentionOptions causal;
  causal.causal = true;
  // 2N tokens split in the zigzag layout but not into N-1 slots per chunk.
  const std::string error = plan_error(Algorithm::hamilton, AttentionShape{1, 2 * ranks, 2, 2, 16, DType::f32}, causal);
  EXPECT_THAT(error, HasSubstr("2 x ranks x slots = " + std::to_string(2 * ranks * (ranks - 1))));
  EXPECT_THAT(error, HasSubstr("nearest valid lengths"));
}

TEST(BadInput, TwoLevelNodesMustDivideTheRanks) {
  const int ranks = world().size();
  StrategyOptions three_nodes;
  three_nodes.nodes = 3;
  const std::string error =
      plan_error(Algorithm::hamilton2, AttentionShape{1, 2 * ranks * 12, 2, 2, 16, DType::f32}, {}, three_nodes);
  if (ranks % 3 == 0) {
    EXPECT_EQ(error, "");
  } else {
    EXPECT_THAT(error, HasSubstr("hamilton2 needs the ranks (" + std::to_string(ranks) + ") to be a multiple of the nodes (3)"));
  }
}

TEST(BadInput, TwoLevelRanksDisagreeOnTheNodes) {
  const int ranks = world().size();
  if (ranks < 4 || ranks % 2) GTEST_SKIP() << "two valid node counts need an even number of ranks, 4 or more";
  // Nodes of one rank (m = 1) on rank 0, at least two nodes of two ranks (m = 2) elsewhere: each
  // valid alone.
  StrategyOptions nodes;
  nodes.nodes = world().rank() == 0 ? ranks : ranks / 2;
  const std::string error =
      plan_error(Algorithm::hamilton2, AttentionShape{1, 2 * ranks * 12, 2, 2, 16, DType::f32}, {}, nodes);
  EXPECT_THAT(error, HasSubstr("ranks disagree on the call: rank 0 has nodes=" + std::to_string(ranks) +
                               " but rank 1 has nodes=" + std::to_string(ranks / 2)));
}

TEST(BadInput, StripeRefusesASlidingWindowNamingIt) {
  const int ranks = world().size();
  const AttentionShape shape{1, 4 * ranks, 2, 2, 16, DType::f32};
  for (const AttentionOptions& window : {AttentionOptions{true, 3, -1}, AttentionOptions{false, -1, 2}}) {
    EXPECT_THAT(plan_error(Algorithm::stripe, shape, window),
                HasSubstr("stripe takes a causal mask or none, not a sliding window (window_left " +
                          std::to_string(window.window_left) + ", window_right " +
                          std::to_string(window.window_right) + ")"));
  }
  // The windows that mean no mask, or the causal one, are no windows in stripe's positions.
  EXPECT_EQ(plan_error(Algorithm::stripe, shape, AttentionOptions{false, -1, 0}), "");
  EXPECT_EQ(plan_error(Algorithm::stripe, shape, AttentionOptions{true, -1, -1}), "");
}

TEST(BadInput, CudaKernelChoicesOnTheCpuAreRefusedByEveryStrategy) {
  const int ranks = world().size();
  for (KernelChoice kernel : {KernelChoice::own, KernelChoice::cudnn}) {
    AttentionOptions options;
    options.kernel = kernel;
    for (Algorithm algorithm : all_algorithms()) {
      SCOPED_TRACE(algorithm_name(algorithm) + ", kernel " + kernel_choice_name(kernel));
      const std::string error = plan_error(algorithm, AttentionShape{1, 24 * ranks, 2, 2, 16, DType::f32}, options);
      EXPECT_THAT(error, HasSubstr("kernel " + kernel_choice_name(kernel) + " names CUDA kernels"));
      EXPECT_THAT(error, HasSubstr("cannot run on cpu; allowed there: auto"));
    }
  }
}

TEST(BadInput, OneRankChoosingAnotherKernelFailsEveryRank) {
  const int odd_rank = world().size() - 1;
  Shard shard(4, 2, 2, 16);
  AttentionOptions options;
  if (world().rank() == odd_rank) options.kernel = KernelChoice::own;
  const std::string error = error_of([&] { shard.zigzag_forward(options); });
  EXPECT_THAT(error, HasSubstr("kernel own names CUDA kernels"));
  if (world().rank() != odd_rank) {
    EXPECT_THAT(error, HasSubstr("rank " + std::to_string(odd_rank) + " rejected the call"));
  }
}

TEST(BadInput, TheWorldStillWorksAfterwards) {
  // After every refusal above the ranks are still in step: a valid call succeeds.
  Shard shard(4, 2, 2, 16);
  EXPECT_EQ(error_of([&] { shard.zigzag_forward(); }), "");
}

}  // namespace
}  // namespace spattn
