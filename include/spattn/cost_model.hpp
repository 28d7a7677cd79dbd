#pragma once
// An alpha-beta model of what every strategy sends and computes per rank and per step, so that
// strategies can be compared for a shape and a cluster before anything runs (`spattn plan
// --compare`, `--algo auto`, spattn.estimate_strategies in Python). Pure functions. The traffic
// of single steps, which takes the internal cycle schedules, is src/schedule/step_traffic.hpp.
//
// Assumptions:
// - Ranks fill nodes in order: rank r sits on node r / ranks_per_node.
// - A message costs its link's latency (alpha) plus bytes / bandwidth. The messages of one rank
//   in one step are issued one after another, so their latencies add up; their bytes flow
//   concurrently, limited as follows.
// - Within a node, on a switch (NVSwitch) a GPU's total egress is the per-GPU bandwidth however
//   many peers it sends to; on a full mesh (xGMI) every pair has its own link of that bandwidth,
//   so sends to distinct peers run in parallel and the busiest link decides.
// - Across nodes every GPU has its own NIC: all its remote bytes share the per-GPU bandwidth.
//   NVLink and NIC traffic run concurrently: a step's transfer lasts the longer of the two.
// - In every strategy here a rank receives as much as it sends, so egress alone decides.
// - Steps are synchronous: a step lasts as long as its slowest rank.
// - Collectives (all-to-all, all-gather, reduce-scatter) are direct: each rank sends its part to
//   every peer at once, one message per tensor and peer.
// - Attention costs 4 * B * H * D FLOP forward per visible (query, key) pair (flash-attention
//   convention: 4 * B * H * Sq * Sk * D for a whole block, half under a causal mask); with a
//   sliding window each rank's visible pairs at each step are counted (rotation_visible_pairs);
//   backward costs 2.5x forward; both at one kernel rate.
// - Backward takes the call's q, k, v, out, dout as they are (nothing is kept from forward), and
//   returns dq, dk, dv in the input dtype; rotating dK, dV accumulators travel in fp32.

#include <cstdint>
#include <string>
#include <vector>

#include "spattn/attention_options.hpp"
#include "spattn/attention_shape.hpp"
#include "spattn/algorithm.hpp"

namespace spattn {

/// One class of links, per direction.
struct LinkCost {
  double bandwidth = 0;  ///< bytes per second
  double latency = 0;    ///< seconds per message (alpha)
};

/// Where the ranks run and how they are connected.
struct Cluster {
  std::string name;
  int nodes = 1;
  int ranks_per_node = 8;
  /// Within a node: one GPU's egress on a switch, or each direct link's on a full mesh.
  LinkCost within_node;
  bool full_mesh = false;
  /// Across nodes: one GPU's share (its NIC); unused when nodes == 1.
  LinkCost across_nodes;
  double kernel_flops = 500e12;  ///< attention kernel rate, FLOP/s, forward and backward
};

/// The preset names: "nvswitch", "h100-nvswitch", "h200-nvswitch", "mesh", "pcie", "cpu".
const std::vector<std::string>& cluster_preset_names();

/// The networks that join nodes, per rank (one NIC each): "ib-400g" (400 Gb/s InfiniBand, 50 GB/s,
/// 20 us per message), "ib-200g" (25 GB/s, 20 us), "roce-100g" (12.5 GB/s, 25 us), "ethernet-25g"
/// (3 GB/s, 30 us: TCP between CPU hosts).
const std::vector<std::string>& network_preset_names();

/// A network of network_preset_names(); throws Error naming the networks for an unknown name.
LinkCost network_preset(const std::string& name);

/// A preset: one node of its kind, with the links that join such nodes (sized_cluster gives it
/// more); throws Error naming the presets for an unknown name.
///   nvswitch: 8 GPUs on NVSwitch, 450 GB/s egress per GPU (H100/H200 NVLink 4), 10 us per
///             message (the order of an NCCL send/recv launch and handshake); across nodes ib-400g.
///             Kernel 500 TFLOP/s: dense bf16 attention on an H100 measured 500 to 630 (cuDNN and
///             the own forward, bench/results).
///   h100-nvswitch: the same, named for its GPU.
///   h200-nvswitch: the same links; kernel 550 TFLOP/s, the one rate fitted to 96 runs on 2 H200
///             (bench/results/cost-model-calibration-2026-11-25.md).
///   mesh:     8 GPUs with a direct 64 GB/s link between every pair (MI300X xGMI style), 10 us;
///             across nodes ib-400g. Kernel 500 TFLOP/s.
///   pcie:     8 GPUs behind a PCIe Gen5 switch, 25 GB/s per GPU, 15 us; across nodes ib-200g.
///             Kernel 400 TFLOP/s (PCIe cards clock lower).
///   cpu:      8 processes of one host over shared memory, 5 GB/s per rank, 2 us; across hosts
///             ethernet-25g. Kernel 0.05 TFLOP/s per rank (the CPU kernels ran at 120 GFLOP/s on
///             2 cores, bench/results/cpu-kernels-2026-11-22.txt).
Cluster cluster_preset(const std::string& name);

/// `kind` (a preset, or one with its links changed) as `nodes` nodes of `ranks_per_node` ranks
/// (0: kind's ranks per node) for a run of `ranks`: nodes 0 means as many as the ranks fill, in
/// order. Throws Error naming the values (as --nodes and --gpus-per-node) when the ranks do not
/// fit.
Cluster sized_cluster(const Cluster& kind, int ranks, int nodes, int ranks_per_node);

/// One line on the cluster: nodes, GPUs, links and kernel rate.
std::string cluster_summary(const Cluster& cluster);

/// What one rank sends in one step and how long that takes, taking the most over ranks.
struct Transfer {
  int64_t bytes = 0;             ///< all bytes one rank sends
  int64_t inter_node_bytes = 0;  ///< the part that leaves the node
  int messages = 0;
  double seconds = 0;  ///< of the slowest rank
};

/// A kind of step of a pass, `count` times in a row.
struct StepCost {
  std::string what;  ///< what moves, e.g. "K,V" or "all-to-all q,k,v"
  int count = 1;
  double compute_seconds = 0;  ///< attention of one such step
  Transfer transfer;           ///< of one such step
  bool overlapped = false;     ///< compute and transfer run concurrently
  /// max(compute, transfer) when overlapped, else their sum.
  double seconds() const;
  /// The part of the transfer that compute does not hide: transfer - compute when overlapped
  /// (none when compute is longer), else all of it.
  double exposed_transfer_seconds() const;
};

/// The modelled cost of one algorithm for one shape, number of ranks and cluster.
struct StrategyCost {
  Algorithm algorithm = Algorithm::ring;
  std::string not_applicable;  ///< why the algorithm cannot run this case; "" when it can
  std::string configuration;   ///< slots, or how usp and hamilton2 split the ranks
  /// A typical forward step: the most repeated rotation step, or for a strategy that does not
  /// overlap (ulysses, allgather) its whole forward pass as one step.
  StepCost step;
  std::vector<StepCost> forward;  ///< every step, in order
  std::vector<StepCost> backward;
  double forward_seconds = 0;
  double forward_backward_seconds = 0;
  double forward_exposed_seconds = 0;           ///< transfer time not hidden by compute, forward
  double forward_backward_exposed_seconds = 0;  ///< the same over forward and backward
  bool applies() const { return not_applicable.empty(); }
};

/// The algorithms that rotate along cycles: ring, zigzag, stripe, hamilton, hamilton2.
const std::vector<Algorithm>& rotation_algorithms();

/// The cost of `algorithm` on `ranks` ranks (1 or more; on one rank every strategy is local
/// attention) of `cluster`. A case the strategy cannot run gives not_applicable, strategy_error's
/// message (src/schedule/strategy_rules.hpp), which is what constructing the plan refuses with; an
/// invalid shape, or more ranks than the cluster has, throw Error.
/// strategy_options.nodes: hamilton2's node count; .inner: usp's Ulysses degree, chosen and
/// refused as `spattn run` does (src/schedule/ulysses_degree.hpp). Ulysses gives a rank the kv heads
/// its query heads read, replicated when fewer kv heads than ranks.
/// `attention`: its causal flag picks the balanced layouts (as run does) and, with its window,
/// makes the mask (AttentionMask::from_options); its scale and kernel choice are not read.
StrategyCost strategy_cost(const Cluster& cluster, const AttentionShape& shape, int ranks,
                           const AttentionOptions& attention, Algorithm algorithm,
                           const StrategyOptions& strategy_options = {});

/// Whether the model expects `a` to run faster than `b` (forward and backward together, or forward
/// alone); a strategy that applies runs faster than one that does not.
bool modelled_faster(const StrategyCost& a, const StrategyCost& b, bool with_backward);

/// The strategy of `costs` that the model expects fastest among those that apply
/// (modelled_faster), the earliest on a tie; throws Error listing why each one cannot run when
/// none can.
const StrategyCost& fastest_strategy(const std::vector<StrategyCost>& costs, bool with_backward);

/// strategy_cost of every algorithm, in all_algorithms() order.
std::vector<StrategyCost> compare_strategies(const Cluster& cluster, const AttentionShape& shape, int ranks,
                                             const AttentionOptions& attention,
                                             const StrategyOptions& strategy_options = {});

}  // namespace spattn
