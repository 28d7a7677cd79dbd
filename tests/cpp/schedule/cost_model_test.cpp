// The communication cost model: bytes and messages per step against hand-computed values, the
// link model (switch, full mesh, across nodes), the claims of hamilton.md (Hamiltonian cycles
// spread a ring's bytes over every link; the two-level scheme sends 1/m of them across nodes; a
// long sequence makes the ring compute-bound), the reasons a strategy does not apply, and
// monotonicity in the sequence length.

#include "schedule/step_traffic.hpp"
#include "schedule/ulysses_degree.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>

#include "spattn/error.hpp"

namespace spattn {
namespace {

using ::testing::HasSubstr;

// 2 nodes of 4 ranks: 100 GB/s, 1 us within a node; 10 GB/s, 5 us across.
Cluster small_cluster() {
  Cluster cluster;
  cluster.name = "small";
  cluster.nodes = 2;
  cluster.ranks_per_node = 4;
  cluster.within_node = {100e9, 1e-6};
  cluster.across_nodes = {10e9, 5e-6};
  cluster.kernel_flops = 1e12;
  return cluster;
}

// S = 448 is a multiple of 2*N*(N-1) = 112 and 2*N*m = 64 at N = 8, m = 4: everything applies.
// 56 tokens per rank; K and V of a shard: 2 * 56 tokens * 8 heads * 4 dims * 2 bytes = 7168 bytes.
AttentionShape small_shape() {
  AttentionShape shape;
  shape.seq = 448;
  shape.heads = 8;
  shape.kv_heads = 8;
  shape.head_dim = 4;
  shape.dtype = DType::bf16;
  return shape;
}

// 32 heads of 128 dims in bf16, `tokens_per_rank` tokens on each of `ranks` ranks.
AttentionShape llm_shape(int64_t tokens_per_rank, int ranks) {
  AttentionShape shape;
  shape.seq = tokens_per_rank * ranks;
  shape.heads = 32;
  shape.kv_heads = 32;
  shape.head_dim = 128;
  shape.dtype = DType::bf16;
  return shape;
}

AttentionOptions mask_of(bool causal, int64_t window_left = -1, int64_t window_right = -1) {
  AttentionOptions attention;
  attention.causal = causal;
  attention.window_left = window_left;
  attention.window_right = window_right;
  return attention;
}

std::map<Algorithm, StrategyCost> costs_by_algorithm(const Cluster& cluster, const AttentionShape& shape, int ranks,
                                                     bool causal, const StrategyOptions& options) {
  std::map<Algorithm, StrategyCost> costs;
  for (const StrategyCost& cost : compare_strategies(cluster, shape, ranks, mask_of(causal), options))
    costs.emplace(cost.algorithm, cost);
  return costs;
}

StrategyCost cost_of(Algorithm algorithm, const Cluster& cluster, const AttentionShape& shape, int ranks,
                     bool causal = false, const StrategyOptions& options = {}) {
  return strategy_cost(cluster, shape, ranks, mask_of(causal), algorithm, options);
}

TEST(CostModel, BytesAndMessagesPerStepMatchHandComputedValues) {
  // usp's Ulysses degree 4: groups within the nodes of 4 (run would choose 8 on its own).
  const auto costs = costs_by_algorithm(small_cluster(), small_shape(), 8, true, StrategyOptions{2, 4});
  for (const auto& [algorithm, cost] : costs)
    ASSERT_TRUE(cost.applies()) << algorithm_name(algorithm) << ": " << cost.not_applicable;

  // ring and zigzag: the whole shard to one peer; rank 3 -> 4 and 7 -> 0 cross nodes.
  for (Algorithm ring : {Algorithm::ring, Algorithm::zigzag}) {
    const Transfer& step = costs.at(ring).step.transfer;
    EXPECT_EQ(step.bytes, 7168);
    EXPECT_EQ(step.inter_node_bytes, 7168);
    EXPECT_EQ(step.messages, 1);
    EXPECT_DOUBLE_EQ(step.seconds, 5e-6 + 7168 / 10e9);
  }
  // hamilton: 7 slots of 1024 bytes, one to every peer; 4 of the peers are on the other node.
  const Transfer& hamilton = costs.at(Algorithm::hamilton).step.transfer;
  EXPECT_EQ(hamilton.bytes, 7168);
  EXPECT_EQ(hamilton.inter_node_bytes, 4 * 1024);
  EXPECT_EQ(hamilton.messages, 7);
  EXPECT_DOUBLE_EQ(hamilton.seconds, 4 * 5e-6 + 4 * 1024 / 10e9);
  EXPECT_EQ(costs.at(Algorithm::hamilton).configuration, "7 slots");
  // hamilton2 (m = 4, u = 2): 4 slots of 1792 bytes, 3 within the node and 1 across.
  const Transfer& hamilton2 = costs.at(Algorithm::hamilton2).step.transfer;
  EXPECT_EQ(hamilton2.bytes, 7168);
  EXPECT_EQ(hamilton2.inter_node_bytes, 1792);
  EXPECT_EQ(hamilton2.messages, 4);
  EXPECT_DOUBLE_EQ(hamilton2.seconds, std::max(3 * 1e-6 + 3 * 1792 / 100e9, 5e-6 + 1792 / 10e9));
  // ulysses, whole forward: to each of 7 peers 1 head of q, k, v (448 bytes each), then 1 head
  // of out (448) and its lse (56 tokens * 4 bytes).
  const Transfer& ulysses = costs.at(Algorithm::ulysses).step.transfer;
  EXPECT_EQ(ulysses.bytes, 7 * (3 * 448) + 7 * (448 + 224));
  EXPECT_EQ(ulysses.inter_node_bytes, 4 * (3 * 448) + 4 * (448 + 224));
  EXPECT_EQ(ulysses.messages, 7 * 3 + 7 * 2);
  EXPECT_EQ(costs.at(Algorithm::ulysses).step.what, "whole pass");
  // allgather, whole forward: the shard's k and v to each of 7 peers.
  const Transfer& allgather = costs.at(Algorithm::allgather).step.transfer;
  EXPECT_EQ(allgather.bytes, 7 * 7168);
  EXPECT_EQ(allgather.messages, 14);
  // usp: Ulysses degree 4, a ring of 2 groups:
  // 2 * 224 tokens * 2 heads * 4 dims * 2 bytes, as much as the ring's step.
  const StrategyCost& usp = costs.at(Algorithm::usp);
  EXPECT_EQ(usp.configuration, "Ulysses 4 x zigzag 2");
  EXPECT_EQ(usp.step.transfer.bytes, 7168);
  EXPECT_EQ(usp.step.transfer.inter_node_bytes, 7168);
  EXPECT_EQ(usp.step.transfer.messages, 1);
}

TEST(CostModel, StepsAndTotalsFollowTheRotation) {
  Cluster cluster = small_cluster();
  cluster.nodes = 1;
  cluster.ranks_per_node = 8;
  const StrategyCost ring = cost_of(Algorithm::ring, cluster, small_shape(), 8);
  // A full 56 x 56 block of 8 heads and 4 dims: 4 * 8 * 56 * 56 * 4 FLOP at 1 TFLOP/s.
  const double compute = 4.0 * 8 * 56 * 56 * 4 / 1e12;
  const double transfer = 1e-6 + 7168 / 100e9;
  ASSERT_EQ(ring.forward.size(), 2u);
  EXPECT_EQ(ring.forward[0].count, 7);
  EXPECT_DOUBLE_EQ(ring.forward[0].compute_seconds, compute);
  EXPECT_EQ(ring.forward[1].what, "none");
  EXPECT_DOUBLE_EQ(ring.forward_seconds, 7 * std::max(compute, transfer) + compute);
  // Backward: K,V; 6 x (K,V + dK,dV in fp32); dK,dV; the last hop to the owners, in the input
  // dtype (the size of K,V).
  const double gradient_transfer = 1e-6 + 14336 / 100e9;
  const double both_transfer = 2e-6 + (7168 + 14336) / 100e9;
  ASSERT_EQ(ring.backward.size(), 4u);
  EXPECT_EQ(ring.backward[1].what, "K,V + dK,dV");
  EXPECT_EQ(ring.backward[1].count, 6);
  EXPECT_EQ(ring.backward[1].transfer.bytes, 7168 + 14336);
  EXPECT_EQ(ring.backward[1].transfer.messages, 2);
  EXPECT_EQ(ring.backward[3].what, "dK,dV to owner");
  EXPECT_EQ(ring.backward[3].transfer.bytes, 7168);
  const double backward = std::max(2.5 * compute, transfer) + 6 * std::max(2.5 * compute, both_transfer) +
                          std::max(2.5 * compute, gradient_transfer) + transfer;
  EXPECT_DOUBLE_EQ(ring.forward_backward_seconds, ring.forward_seconds + backward);
}

TEST(CostModel, CausalZigzagHalvesEveryStepWhileTheRingWaitsForItsLastRank) {
  const Cluster cluster = cluster_preset("nvswitch");
  const AttentionShape shape = llm_shape(8192, 8);
  const StrategyCost ring = cost_of(Algorithm::ring, cluster, shape, 8, true);
  const StrategyCost zigzag = cost_of(Algorithm::zigzag, cluster, shape, 8, true);
  const StrategyCost full = cost_of(Algorithm::ring, cluster, shape, 8, false);
  EXPECT_DOUBLE_EQ(zigzag.step.compute_seconds, full.step.compute_seconds / 2);
  EXPECT_DOUBLE_EQ(ring.step.compute_seconds, full.step.compute_seconds);
  EXPECT_DOUBLE_EQ(ring.forward[0].compute_seconds, full.step.compute_seconds / 2);  // its own block
  EXPECT_LT(zigzag.forward_seconds, ring.forward_seconds);
}

// The causal zigzag's own blocks run a quarter at step 0 and three quarters after the last step,
// beside the last hop (fp32 dK,dV to the owners); the accumulators travel from step 1 on. The
// contiguous ring's lone own block stays whole at step 0 (StepsAndTotalsFollowTheRotation).
TEST(CostModel, ZigzagHidesTheLastHopBehindItsLateOwnBlocks) {
  const Cluster cluster = cluster_preset("nvswitch");
  const AttentionShape shape = llm_shape(8192, 8);
  const StrategyCost zigzag = cost_of(Algorithm::zigzag, cluster, shape, 8, true);
  ASSERT_EQ(zigzag.backward.size(), 5u);
  const double own_backward = 2.5 * zigzag.forward[0].compute_seconds;
  EXPECT_NEAR(zigzag.backward[0].compute_seconds, own_backward / 4, own_backward * 1e-3);
  EXPECT_EQ(zigzag.backward[0].what, "K,V");
  EXPECT_EQ(zigzag.backward[1].what, "K,V");
  EXPECT_EQ(zigzag.backward[2].what, "K,V + dK,dV");
  EXPECT_EQ(zigzag.backward[2].count, 5);
  EXPECT_EQ(zigzag.backward[3].what, "dK,dV");
  EXPECT_EQ(zigzag.backward[4].what, "dK,dV to owner");
  EXPECT_EQ(zigzag.backward[4].transfer.bytes, zigzag.backward[3].transfer.bytes);  // fp32, as every hop
  EXPECT_NEAR(zigzag.backward[4].compute_seconds, 3 * own_backward / 4, own_backward * 1e-3);
  EXPECT_EQ(zigzag.backward[4].exposed_transfer_seconds(), 0.0);
}

// A window as long as the sequence hides nothing: the counted pairs give the closed forms' compute
// (exactly without the causal mask; with it the diagonals' query-key pairs, half a row per token,
// are counted too).
TEST(CostModel, WindowsThatHideNothingCostWhatTheMaskWithoutThemCosts) {
  const Cluster cluster = sized_cluster(cluster_preset("nvswitch"), 8, 2, 4);  // hamilton2 needs 2 nodes
  StrategyOptions options;
  options.nodes = 2;
  const AttentionShape shape = llm_shape(1792, 8);  // S = 14336: a multiple of 2 x 8 x 7, so hamilton runs
  for (Algorithm algorithm : all_algorithms()) {
    SCOPED_TRACE(algorithm_name(algorithm));
    const StrategyCost plain = strategy_cost(cluster, shape, 8, mask_of(false), algorithm, options);
    const StrategyCost windowed =
        strategy_cost(cluster, shape, 8, mask_of(false, shape.seq, shape.seq), algorithm, options);
    ASSERT_TRUE(plain.applies()) << plain.not_applicable;
    if (algorithm == Algorithm::stripe) {  // takes no window at all, as its plan refuses it
      EXPECT_EQ(windowed.not_applicable, mask_unsupported(algorithm, mask_of(false, shape.seq, shape.seq)));
      EXPECT_THAT(windowed.not_applicable, HasSubstr("stripe takes a causal mask or none, not a sliding window"));
      continue;
    }
    EXPECT_DOUBLE_EQ(windowed.forward_seconds, plain.forward_seconds);
    EXPECT_DOUBLE_EQ(windowed.forward_backward_seconds, plain.forward_backward_seconds);
    const StrategyCost causal = strategy_cost(cluster, shape, 8, mask_of(true), algorithm, options);
    const StrategyCost causal_window = strategy_cost(cluster, shape, 8, mask_of(true, shape.seq, -1), algorithm, options);
    EXPECT_GE(causal_window.forward_seconds, causal.forward_seconds);
    EXPECT_LE(causal_window.forward_seconds, causal.forward_seconds * (1 + 1.0 / 1024));
  }
}

// A window shorter than a rank's shard: a contiguous ring step computes only on the blocks next to
// the rank's own (steps 1 and N-1: the neighbours before and after), zigzag only where a chunk
// meets its neighbours; each query sees w + 1 keys (w before it, itself), so Ulysses computes
// (S(w + 1) - w(w + 1) / 2) pairs of H / N heads.
TEST(CostModel, ShortWindowsComputeOnlyBesideTheRanksOwnKeys) {
  const Cluster cluster = cluster_preset("nvswitch");
  const int ranks = 8;
  const AttentionShape shape = llm_shape(4096, ranks);
  const int64_t w = 512;
  const StrategyCost ring = strategy_cost(cluster, shape, ranks, mask_of(false, w, 0), Algorithm::ring);
  ASSERT_TRUE(ring.applies()) << ring.not_applicable;
  double per_step[ranks] = {};
  int step = 0;
  for (const StepCost& cost : ring.forward)
    for (int i = 0; i < cost.count; ++i) per_step[step++] = cost.compute_seconds;
  ASSERT_EQ(step, ranks);
  EXPECT_GT(per_step[0], 0);
  EXPECT_GT(per_step[1], 0);  // the previous rank's last w keys
  for (int later = 2; later < ranks; ++later) EXPECT_EQ(per_step[later], 0) << "step " << later;
  const double per_pair = 4.0 * shape.batch * shape.heads * shape.head_dim / cluster.kernel_flops;
  EXPECT_DOUBLE_EQ(per_step[1], per_pair * (w * (w + 1) / 2));  // rank r's first w queries, r-1's last keys

  const StrategyCost ulysses = strategy_cost(cluster, shape, ranks, mask_of(true, w, -1), Algorithm::ulysses);
  const double pairs = static_cast<double>(shape.seq * (w + 1) - w * (w + 1) / 2);
  double ulysses_compute = 0;  // over its stages
  for (const StepCost& cost : ulysses.forward) ulysses_compute += cost.count * cost.compute_seconds;
  EXPECT_DOUBLE_EQ(ulysses_compute, per_pair / ranks * pairs);

  // Under the causal mask with this window zigzag's slowest step is the rank holding the chunks
  // beside both of its own; every strategy costs far less than without the window.
  for (Algorithm algorithm : all_algorithms()) {
    const StrategyCost windowed = strategy_cost(cluster, shape, ranks, mask_of(true, w, -1), algorithm);
    const StrategyCost causal = strategy_cost(cluster, shape, ranks, mask_of(true), algorithm);
    if (!causal.applies()) continue;
    double windowed_compute = 0, causal_compute = 0;
    for (const StepCost& cost : windowed.forward) windowed_compute += cost.count * cost.compute_seconds;
    for (const StepCost& cost : causal.forward) causal_compute += cost.count * cost.compute_seconds;
    EXPECT_LT(windowed_compute, causal_compute / 2) << algorithm_name(algorithm);
  }
}

TEST(CostModel, WindowSidesBelowMinusOneAreRefused) {
  EXPECT_THAT([] { strategy_cost(cluster_preset("nvswitch"), llm_shape(1024, 8), 8, mask_of(false, -2, 0), Algorithm::ring); },
              ::testing::ThrowsMessage<Error>(HasSubstr("window (-2, 0) is not allowed; each side is >= 0, or -1 for unbounded")));
}

// A pass lasts its compute plus the transfer time that compute does not hide, for every strategy;
// short sequences leave the rotations' transfers exposed, long ones hide them.
TEST(CostModel, PassesAreComputePlusExposedTransfer) {
  const Cluster cluster = sized_cluster(cluster_preset("nvswitch"), 16, 2, 8);
  StrategyOptions options;
  options.nodes = 2;
  for (const int64_t tokens : {1024, 65536}) {
    const AttentionShape shape = llm_shape(tokens, 16);
    for (const StrategyCost& cost : compare_strategies(cluster, shape, 16, mask_of(true), options)) {
      if (!cost.applies()) continue;
      SCOPED_TRACE(algorithm_name(cost.algorithm) + " at " + std::to_string(tokens) + " tokens per rank");
      double forward_compute = 0, backward_compute = 0;
      for (const StepCost& step : cost.forward) forward_compute += step.count * step.compute_seconds;
      for (const StepCost& step : cost.backward) backward_compute += step.count * step.compute_seconds;
      EXPECT_NEAR(cost.forward_seconds, forward_compute + cost.forward_exposed_seconds, 1e-12);
      EXPECT_NEAR(cost.forward_backward_seconds,
                  forward_compute + backward_compute + cost.forward_backward_exposed_seconds, 1e-12);
      EXPECT_GE(cost.forward_exposed_seconds, 0);
    }
  }
  const StrategyCost short_ring = cost_of(Algorithm::zigzag, cluster, llm_shape(1024, 16), 16, true, options);
  const StrategyCost long_ring = cost_of(Algorithm::zigzag, cluster, llm_shape(65536, 16), 16, true, options);
  EXPECT_GT(short_ring.forward_exposed_seconds, 0.5 * short_ring.forward_seconds);
  EXPECT_LT(long_ring.forward_exposed_seconds, 0.01 * long_ring.forward_seconds);
}

TEST(CostModel, SwitchLimitsEgressWhileAFullMeshRunsLinksInParallel) {
  Cluster cluster = small_cluster();
  cluster.nodes = 1;
  StepTraffic traffic{{{0, 1000, 3000, 0}, {0, 0, 0, 0}, {0, 0, 0, 0}, {0, 0, 0, 0}},
                      {{0, 1, 2, 0}, {0, 0, 0, 0}, {0, 0, 0, 0}, {0, 0, 0, 0}}};
  const Transfer switched = step_transfer(cluster, traffic);
  EXPECT_EQ(switched.bytes, 4000);
  EXPECT_EQ(switched.messages, 3);
  EXPECT_DOUBLE_EQ(switched.seconds, 3e-6 + 4000 / 100e9);
  cluster.full_mesh = true;
  EXPECT_DOUBLE_EQ(step_transfer(cluster, traffic).seconds, 3e-6 + 3000 / 100e9);
  // Across nodes: rank 1 on node 0 sends to rank 5 on node 1; NVLink and NIC run concurrently.
  cluster = small_cluster();
  StepTraffic mixed{std::vector<std::vector<int64_t>>(8, std::vector<int64_t>(8, 0)),
                    std::vector<std::vector<int>>(8, std::vector<int>(8, 0))};
  mixed.bytes[1][2] = 50000;
  mixed.messages[1][2] = 1;
  mixed.bytes[1][5] = 1000;
  mixed.messages[1][5] = 1;
  const Transfer across = step_transfer(cluster, mixed);
  EXPECT_EQ(across.inter_node_bytes, 1000);
  EXPECT_DOUBLE_EQ(across.seconds, std::max(1e-6 + 50000 / 100e9, 5e-6 + 1000 / 10e9));
  EXPECT_THROW(
      step_transfer(small_cluster(), StepTraffic{std::vector<std::vector<int64_t>>(9, std::vector<int64_t>(9, 0)),
                                                 std::vector<std::vector<int>>(9, std::vector<int>(9, 0))}),
      Error);
}

TEST(CostModel, HamiltonNeverTransfersLongerThanTheRingOnAFullMesh) {
  const Cluster mesh = cluster_preset("mesh");
  for (int ranks : {3, 5, 7, 8})
    for (int64_t tokens : {2 * 7 * 64, 2 * 7 * 1024, 2 * 7 * 8192}) {
      const AttentionShape shape = llm_shape(tokens * (ranks - 1) / 7, ranks);
      for (bool causal : {false, true}) {
        const StrategyCost ring = cost_of(Algorithm::ring, mesh, shape, ranks, causal);
        const StrategyCost hamilton = cost_of(Algorithm::hamilton, mesh, shape, ranks, causal);
        ASSERT_TRUE(hamilton.applies()) << hamilton.not_applicable;
        EXPECT_LE(hamilton.step.transfer.seconds, ring.step.transfer.seconds) << ranks << " ranks, S " << shape.seq;
      }
    }
  // Without latency the transfer is exactly n-1 times shorter.
  Cluster bandwidth_only = mesh;
  bandwidth_only.within_node.latency = 0;
  const AttentionShape shape = llm_shape(2 * 7 * 1024, 8);
  EXPECT_DOUBLE_EQ(cost_of(Algorithm::hamilton, bandwidth_only, shape, 8).step.transfer.seconds * 7,
                   cost_of(Algorithm::ring, bandwidth_only, shape, 8).step.transfer.seconds);
  // On a switch the egress limit leaves only the latency of 7 messages against 1.
  const Cluster nvswitch = cluster_preset("nvswitch");
  EXPECT_NEAR(cost_of(Algorithm::hamilton, nvswitch, shape, 8).step.transfer.seconds -
                  cost_of(Algorithm::ring, nvswitch, shape, 8).step.transfer.seconds,
              6 * nvswitch.within_node.latency, 1e-12);
}

TEST(CostModel, RingIsComputeBoundForLongSequencesAndTransferBoundForShortOnes) {
  const Cluster nvswitch = cluster_preset("nvswitch");
  const StrategyCost long_ring = cost_of(Algorithm::zigzag, nvswitch, llm_shape(65536, 8), 8, true);
  EXPECT_GT(long_ring.step.compute_seconds, long_ring.step.transfer.seconds);
  EXPECT_DOUBLE_EQ(long_ring.step.seconds(), long_ring.step.compute_seconds);
  const StrategyCost short_ring = cost_of(Algorithm::zigzag, nvswitch, llm_shape(1024, 8), 8, true);
  EXPECT_LT(short_ring.step.compute_seconds, short_ring.step.transfer.seconds);
  EXPECT_DOUBLE_EQ(short_ring.step.seconds(), short_ring.step.transfer.seconds);
}

TEST(CostModel, TwoLevelSendsOneMthOfTheRingsBytesAcrossNodes) {
  const Cluster two_node = sized_cluster(cluster_preset("nvswitch"), 16, 2, 0);
  const AttentionShape shape = llm_shape(8192, 16);
  const StrategyCost ring = cost_of(Algorithm::ring, two_node, shape, 16, true);
  const StrategyCost hamilton2 = cost_of(Algorithm::hamilton2, two_node, shape, 16, true, StrategyOptions{2, 0});
  ASSERT_TRUE(hamilton2.applies()) << hamilton2.not_applicable;
  EXPECT_EQ(hamilton2.configuration, "8 slots, m = 8 ranks x u = 2 nodes");
  EXPECT_EQ(hamilton2.step.transfer.inter_node_bytes * 8, ring.step.transfer.inter_node_bytes);
  EXPECT_EQ(hamilton2.step.transfer.bytes, ring.step.transfer.bytes);
  EXPECT_LT(hamilton2.step.transfer.seconds, ring.step.transfer.seconds);
  // Four nodes of four: m = 4.
  Cluster four_nodes = two_node;
  four_nodes.nodes = 4;
  four_nodes.ranks_per_node = 4;
  const StrategyCost ring4 = cost_of(Algorithm::ring, four_nodes, shape, 16);
  const StrategyCost hamilton2_4 = cost_of(Algorithm::hamilton2, four_nodes, shape, 16, false, StrategyOptions{4, 0});
  EXPECT_EQ(hamilton2_4.step.transfer.inter_node_bytes * 4, ring4.step.transfer.inter_node_bytes);
}

TEST(CostModel, StrategiesThatCannotRunSayWhy) {
  const Cluster nvswitch = cluster_preset("nvswitch");
  for (int ranks : {4, 6}) {
    const StrategyCost hamilton = cost_of(Algorithm::hamilton, nvswitch, llm_shape(8192, ranks), ranks);
    EXPECT_FALSE(hamilton.applies());
    EXPECT_EQ(hamilton.not_applicable, hamiltonian_decomposition_error(ranks));
    EXPECT_TRUE(hamilton.forward.empty());
  }
  // 8k tokens on 8 ranks: S = 65536 has no factor 7.
  EXPECT_EQ(cost_of(Algorithm::hamilton, nvswitch, llm_shape(8192, 8), 8, true).not_applicable,
            "sequence length 65536 cannot be cut into 7 slots per chunk over 8 ranks in the zigzag layout: it must "
            "be a positive multiple of 2 x ranks x slots = 112; nearest valid lengths: 65520 or 65632");
  EXPECT_EQ(cost_of(Algorithm::hamilton, nvswitch, llm_shape(8192, 8), 8, false).not_applicable,
            "sequence length 65536 cannot be cut into 7 slots per chunk over 8 ranks in the contiguous layout: it "
            "must be a positive multiple of ranks x slots = 56; nearest valid lengths: 65520 or 65576");
  AttentionShape odd = llm_shape(8192, 8);
  odd.seq = 8;
  EXPECT_EQ(cost_of(Algorithm::zigzag, nvswitch, odd, 8).not_applicable,
            "sequence length 8 cannot be split over 8 ranks in the zigzag layout: it must be a positive multiple of 2 "
            "x ranks = 16; nearest valid lengths: 16");
  EXPECT_TRUE(cost_of(Algorithm::ring, nvswitch, odd, 8).applies());
  // hamilton2: nodes must divide the ranks, and one node has no two-level scheme.
  EXPECT_THAT(
      cost_of(Algorithm::hamilton2, nvswitch, llm_shape(8192, 8), 8, false, StrategyOptions{3, 0}).not_applicable,
      HasSubstr("ranks (8) to be a multiple of the nodes (3)"));
  EXPECT_EQ(cost_of(Algorithm::hamilton2, nvswitch, llm_shape(8192, 8), 8).not_applicable, two_level_error(8, 1));
  // Heads: Ulysses needs whole heads per rank; usp's degree must divide the ranks.
  AttentionShape gqa = llm_shape(8192, 16);
  gqa.kv_heads = 8;
  const Cluster two_node = sized_cluster(cluster_preset("nvswitch"), 16, 2, 0);
  EXPECT_TRUE(cost_of(Algorithm::ulysses, two_node, gqa, 16).applies());
  AttentionShape few_heads = gqa;
  few_heads.heads = 24;
  EXPECT_EQ(cost_of(Algorithm::ulysses, two_node, few_heads, 16).not_applicable,
            "ulysses splits query heads over ranks: heads (24) must be divisible by ranks (16); use zigzag, ring or "
            "usp for this head count");
  EXPECT_TRUE(cost_of(Algorithm::usp, two_node, gqa, 16).applies());
  // usp's degree is chosen and refused as `spattn run` does it (schedule/ulysses_degree.hpp): the
  // kv heads must split too, so 8 kv heads allow at most 8 ranks per group.
  EXPECT_EQ(cost_of(Algorithm::usp, two_node, gqa, 16, false, StrategyOptions{1, 3}).not_applicable,
            ulysses_degree_error(16, 3, gqa));
  EXPECT_THAT(ulysses_degree_error(16, 3, gqa), HasSubstr("usp: inner (3) must be at least 1 and divide ranks (16), "
                                                          "heads (32) and kv_heads (8); valid inner values here: 1 2 "
                                                          "4 8 (0 chooses the largest)"));
  EXPECT_EQ(cost_of(Algorithm::usp, two_node, gqa, 16, false, StrategyOptions{1, 16}).not_applicable,
            ulysses_degree_error(16, 16, gqa));
  EXPECT_EQ(cost_of(Algorithm::usp, two_node, gqa, 16).configuration, "Ulysses 8 x zigzag 2");
  EXPECT_EQ(cost_of(Algorithm::usp, two_node, few_heads, 16, false, StrategyOptions{1, 16}).not_applicable,
            ulysses_degree_error(16, 16, few_heads));
  // Invalid input throws rather than reporting n/a.
  EXPECT_THROW(cost_of(Algorithm::ring, nvswitch, llm_shape(8192, 16), 16), Error);
  EXPECT_THROW(cost_of(Algorithm::ring, nvswitch, llm_shape(8192, 1), 0), Error);
  // One rank: local attention, nothing sent, the same time for every strategy.
  const StrategyCost alone = cost_of(Algorithm::ring, nvswitch, llm_shape(8192, 1), 1);
  for (Algorithm algorithm : all_algorithms()) {
    const StrategyCost cost = cost_of(algorithm, nvswitch, llm_shape(8192, 1), 1);
    ASSERT_TRUE(cost.applies()) << algorithm_name(algorithm) << ": " << cost.not_applicable;
    EXPECT_DOUBLE_EQ(cost.forward_backward_seconds, alone.forward_backward_seconds) << algorithm_name(algorithm);
    EXPECT_EQ(cost.forward_backward_exposed_seconds, 0) << algorithm_name(algorithm);
  }
  AttentionShape bad_heads = llm_shape(8192, 8);
  bad_heads.kv_heads = 5;
  EXPECT_THROW(cost_of(Algorithm::ring, nvswitch, bad_heads, 8), Error);
}

// Ulysses gives a rank the kv heads its query heads read: with 12 heads over 3 kv heads on 4
// ranks, ranks 1 and 2 read two kv heads each, so every block holds two.
TEST(CostModel, UlyssesReplicatesTheKvHeadsSeveralRanksRead) {
  Cluster cluster = small_cluster();
  cluster.nodes = 1;
  AttentionShape shape = small_shape();
  shape.seq = 16;
  shape.heads = 12;
  shape.kv_heads = 3;
  const StrategyCost ulysses = cost_of(Algorithm::ulysses, cluster, shape, 4);
  ASSERT_TRUE(ulysses.applies()) << ulysses.not_applicable;
  // Per peer: q 4 tokens * 3 heads * 4 dims * 2 bytes = 96, k and v 4 * 2 * 4 * 2 = 64 each, then
  // out 96 and lse 3 heads * 4 tokens * 4 bytes = 48.
  EXPECT_EQ(ulysses.step.transfer.bytes, 3 * (96 + 64 + 64) + 3 * (96 + 48));
}

// Plain Ulysses with 16 query heads per rank runs in two stages (schedule/ulysses_stages.hpp):
// the first stage's inputs and the last stage's results wait for the network, the second stage's
// inputs travel beside the first stage's attention and the first stage's results beside the
// second's; the bytes are those of one stage.
TEST(CostModel, UlyssesStagesExposeOnlyTheFirstInputsAndTheLastResults) {
  const Cluster cluster = sized_cluster(cluster_preset("nvswitch"), 2, 1, 0);
  const AttentionShape shape = llm_shape(8192, 2);
  const StrategyCost ulysses = cost_of(Algorithm::ulysses, cluster, shape, 2, true);
  ASSERT_TRUE(ulysses.applies()) << ulysses.not_applicable;
  EXPECT_EQ(ulysses.configuration, "16 heads per rank in 2 stages");
  // Per stage and peer: q, k, v of 8192 tokens * 8 heads * 128 dims * 2 bytes; out the same, lse
  // 8 heads * 8192 tokens * 4 bytes.
  const int64_t part = 8192 * 8 * 128 * 2, lse = 8 * 8192 * 4;
  ASSERT_EQ(ulysses.forward.size(), 4u);
  const StepCost& first_inputs = ulysses.forward[0];
  const StepCost& first_attention = ulysses.forward[1];
  const StepCost& second_attention = ulysses.forward[2];
  const StepCost& last_results = ulysses.forward[3];
  EXPECT_FALSE(first_inputs.overlapped);
  EXPECT_EQ(first_inputs.transfer.bytes, 3 * part);
  EXPECT_TRUE(first_attention.overlapped);
  EXPECT_EQ(first_attention.transfer.bytes, 3 * part);
  EXPECT_TRUE(second_attention.overlapped);
  EXPECT_EQ(second_attention.transfer.bytes, part + lse);
  EXPECT_DOUBLE_EQ(first_attention.compute_seconds, second_attention.compute_seconds);
  EXPECT_FALSE(last_results.overlapped);
  EXPECT_EQ(last_results.transfer.bytes, part + lse);
  // At 8k tokens per rank the attention hides the transfers beside it.
  EXPECT_DOUBLE_EQ(ulysses.forward_exposed_seconds, first_inputs.transfer.seconds + last_results.transfer.seconds);
  // Backward: dq, dk, dv return in fp32.
  ASSERT_EQ(ulysses.backward.size(), 4u);
  EXPECT_EQ(ulysses.backward.front().transfer.bytes, 5 * part + lse);
  EXPECT_EQ(ulysses.backward.back().transfer.bytes, 3 * 2 * part);
}

TEST(CostModel, UspTradesUlyssesAllToAllsForLongerRingSteps) {
  const Cluster two_node = sized_cluster(cluster_preset("nvswitch"), 16, 2, 0);
  const AttentionShape shape = llm_shape(8192, 16);
  const StrategyCost zigzag = cost_of(Algorithm::zigzag, two_node, shape, 16, true);
  const StrategyCost usp = cost_of(Algorithm::usp, two_node, shape, 16, true, StrategyOptions{1, 8});
  EXPECT_EQ(usp.configuration, "Ulysses 8 x zigzag 2");
  EXPECT_EQ(usp.step.transfer.bytes, zigzag.step.transfer.bytes);
  EXPECT_DOUBLE_EQ(usp.step.compute_seconds, 8 * zigzag.step.compute_seconds);
  EXPECT_EQ(usp.forward.front().what, "all-to-all q,k,v");
  EXPECT_EQ(usp.forward.front().transfer.inter_node_bytes, 0);
  EXPECT_EQ(usp.forward.back().what, "all-to-all out,lse");
  // The whole sequence's attention work is the same for every strategy.
  const auto attention_seconds = [](const StrategyCost& cost) {
    double seconds = 0;
    for (const StepCost& step : cost.forward) seconds += step.count * step.compute_seconds;
    return seconds;
  };
  const StrategyCost ulysses = cost_of(Algorithm::ulysses, two_node, shape, 16, true);
  EXPECT_DOUBLE_EQ(attention_seconds(usp), attention_seconds(zigzag));
  EXPECT_DOUBLE_EQ(attention_seconds(ulysses), attention_seconds(zigzag));
}

TEST(CostModel, UspAcrossItsGroupsAsTheSchemeItRuns) {
  // 5 groups of 2: hamilton across them moves the same bytes per step as the ring in 4 slots of a
  // quarter each, one message per slot, to 4 different groups.
  const Cluster cluster = sized_cluster(cluster_preset("nvswitch"), 10, 0, 16);
  const AttentionShape shape{1, 81920, 32, 8, 128, DType::bf16};
  StrategyOptions across_ring{1, 2, Algorithm::ring}, across_hamilton{1, 2, Algorithm::hamilton};
  const StrategyCost ring = cost_of(Algorithm::usp, cluster, shape, 10, false, across_ring);
  const StrategyCost hamilton = cost_of(Algorithm::usp, cluster, shape, 10, false, across_hamilton);
  EXPECT_EQ(hamilton.configuration, "Ulysses 2 x hamilton 5 (4 slots)");
  EXPECT_EQ(hamilton.step.transfer.bytes, ring.step.transfer.bytes);
  EXPECT_EQ(hamilton.step.transfer.messages, 4 * ring.step.transfer.messages);
  EXPECT_DOUBLE_EQ(hamilton.step.compute_seconds, ring.step.compute_seconds);
  // Causal: the contiguous ring across the groups waits for its last group, which sees whole
  // blocks from step 1 on; zigzag sees half of every block on every group.
  const StrategyCost causal_ring = cost_of(Algorithm::usp, cluster, shape, 10, true, across_ring);
  StrategyOptions across_zigzag{1, 2, Algorithm::zigzag};
  const StrategyCost causal_zigzag = cost_of(Algorithm::usp, cluster, shape, 10, true, across_zigzag);
  EXPECT_DOUBLE_EQ(causal_ring.step.compute_seconds, 2 * causal_zigzag.step.compute_seconds);
}

TEST(CostModel, TimesGrowWithTheSequence) {
  const Cluster two_node = sized_cluster(cluster_preset("nvswitch"), 16, 2, 0);
  for (Algorithm algorithm : all_algorithms())
    for (bool causal : {false, true}) {
      double previous_forward = 0;
      double previous_total = 0;
      for (int64_t multiple = 1; multiple <= 64; multiple *= 2) {
        AttentionShape shape = llm_shape(1, 16);
        shape.seq = 2 * 16 * 15 * 8 * multiple;
        const StrategyCost cost = cost_of(algorithm, two_node, shape, 16, causal, StrategyOptions{2, 0});
        ASSERT_TRUE(cost.applies()) << algorithm_name(algorithm) << ": " << cost.not_applicable;
        EXPECT_GT(cost.forward_seconds, previous_forward) << algorithm_name(algorithm) << " S " << shape.seq;
        EXPECT_GT(cost.forward_backward_seconds, previous_total) << algorithm_name(algorithm) << " S " << shape.seq;
        EXPECT_GT(cost.forward_backward_seconds, cost.forward_seconds);
        previous_forward = cost.forward_seconds;
        previous_total = cost.forward_backward_seconds;
      }
    }
}

TEST(CostModel, PresetsAndComparisonOrder) {
  EXPECT_EQ(cluster_preset_names(), (std::vector<std::string>{"nvswitch", "h100-nvswitch", "h200-nvswitch", "mesh", "pcie", "cpu"}));
  for (const std::string& name : cluster_preset_names()) {
    const Cluster preset = cluster_preset(name);
    EXPECT_EQ(preset.nodes, 1) << name;
    EXPECT_GT(preset.across_nodes.bandwidth, 0) << name << " must say how its nodes are joined";
  }
  // Sized for a run: nodes as the ranks fill them, or as asked; the ranks must fit.
  EXPECT_EQ(sized_cluster(cluster_preset("nvswitch"), 1024, 0, 0).nodes, 128);
  EXPECT_EQ(sized_cluster(cluster_preset("nvswitch"), 9, 0, 0).nodes, 2);
  EXPECT_EQ(sized_cluster(cluster_preset("nvswitch"), 12, 0, 4).nodes, 3);
  EXPECT_EQ(sized_cluster(cluster_preset("nvswitch"), 4, 3, 0).nodes, 3);
  try {
    sized_cluster(cluster_preset("mesh"), 17, 2, 0);
    ADD_FAILURE() << "no Error";
  } catch (const Error& error) {
    EXPECT_THAT(error.what(), HasSubstr("17 ranks do not fit on 2 nodes of 8 ranks (--nodes 2, --gpus-per-node 8): "
                                        "at most 16"));
  }
  const Cluster two_node = sized_cluster(cluster_preset("nvswitch"), 16, 2, 0);
  EXPECT_EQ(two_node.nodes * two_node.ranks_per_node, 16);
  EXPECT_DOUBLE_EQ(two_node.across_nodes.bandwidth, 50e9);
  EXPECT_DOUBLE_EQ(two_node.kernel_flops, 500e12);
  EXPECT_FALSE(cluster_preset("nvswitch").full_mesh);
  EXPECT_TRUE(cluster_preset("mesh").full_mesh);
  try {
    cluster_preset("torus");
    ADD_FAILURE() << "no Error";
  } catch (const Error& error) {
    EXPECT_THAT(error.what(),
                HasSubstr("unknown cluster preset 'torus'; allowed: nvswitch, h100-nvswitch, h200-nvswitch, mesh, pcie, cpu"));
  }
  // The GPU-named presets: NVLink 4 and 400G InfiniBand alike, H200 with its fitted kernel rate.
  const Cluster h100 = cluster_preset("h100-nvswitch"), h200 = cluster_preset("h200-nvswitch");
  EXPECT_DOUBLE_EQ(h100.within_node.bandwidth, 450e9);
  EXPECT_DOUBLE_EQ(h200.within_node.bandwidth, 450e9);
  EXPECT_DOUBLE_EQ(h100.kernel_flops, 500e12);
  EXPECT_DOUBLE_EQ(h200.kernel_flops, 550e12);
  // Networks across nodes: each preset's is one of them.
  EXPECT_DOUBLE_EQ(network_preset("ib-400g").bandwidth, cluster_preset("nvswitch").across_nodes.bandwidth);
  EXPECT_DOUBLE_EQ(network_preset("ib-200g").bandwidth, cluster_preset("pcie").across_nodes.bandwidth);
  EXPECT_DOUBLE_EQ(network_preset("ethernet-25g").latency, cluster_preset("cpu").across_nodes.latency);
  EXPECT_DOUBLE_EQ(network_preset("roce-100g").bandwidth, 12.5e9);
  EXPECT_THAT([] { network_preset("myrinet"); },
              ::testing::ThrowsMessage<Error>(
                  HasSubstr("unknown network 'myrinet'; allowed: ib-400g, ib-200g, roce-100g, ethernet-25g")));
  const std::vector<StrategyCost> costs = compare_strategies(two_node, llm_shape(8192, 16), 16, mask_of(true));
  ASSERT_EQ(costs.size(), all_algorithms().size());
  for (std::size_t i = 0; i < costs.size(); ++i) EXPECT_EQ(costs[i].algorithm, all_algorithms()[i]);
}

TEST(CostModel, RotationTrafficSendsEverySlotToItsNextRank) {
  // One slot per cycle, each to the next rank of its cycle.
  const StepTraffic traffic = rotation_traffic(CycleSchedule(hamiltonian_decomposition(5), 5), 10);
  for (int from = 0; from < 5; ++from)
    for (int to = 0; to < 5; ++to) {
      EXPECT_EQ(traffic.bytes[from][to], from == to ? 0 : 10);
      EXPECT_EQ(traffic.messages[from][to], from == to ? 0 : 1);
    }
}

}  // namespace
}  // namespace spattn
