#include "schedule/step_traffic.hpp"

#include <algorithm>
#include <sstream>

#include "schedule/rotation_schedule.hpp"
#include "schedule/strategy_rules.hpp"
#include "schedule/ulysses_degree.hpp"
#include "schedule/ulysses_stages.hpp"
#include "spattn/error.hpp"
#include "spattn/sequence_layout.hpp"

namespace spattn {
namespace {

// Flash-attention convention: backward = 2.5x the forward FLOP of the same blocks.
constexpr double kBackwardFlopRatio = 2.5;
// Bytes of an fp32 element: lse, and the dK, dV accumulators that travel between ranks.
constexpr int64_t kFp32Bytes = 4;

constexpr double kGigabyte = 1e9;
constexpr double kMicrosecond = 1e-6;

// One node of each preset's kind with the links that join such nodes (sized_cluster gives it the
// nodes a run needs); the values are cost_model.hpp's, in cluster_preset_names() order.
Cluster preset_node(const std::string& name, LinkCost within_node, bool full_mesh, LinkCost across_nodes,
                    double kernel_flops) {
  Cluster cluster;
  cluster.name = name;
  cluster.within_node = within_node;
  cluster.full_mesh = full_mesh;
  cluster.across_nodes = across_nodes;
  cluster.kernel_flops = kernel_flops;
  return cluster;
}

// "a, b, c": the names a preset lookup allows.
std::string comma_separated(const std::vector<std::string>& names) {
  std::string list;
  for (const std::string& name : names) list += (list.empty() ? "" : ", ") + name;
  return list;
}

// The links that join nodes, per rank, in network_preset_names() order.
const std::vector<std::pair<std::string, LinkCost>>& networks() {
  static const std::vector<std::pair<std::string, LinkCost>> all = {
      {"ib-400g", {50 * kGigabyte, 20 * kMicrosecond}},
      {"ib-200g", {25 * kGigabyte, 20 * kMicrosecond}},
      {"roce-100g", {12.5 * kGigabyte, 25 * kMicrosecond}},
      {"ethernet-25g", {3 * kGigabyte, 30 * kMicrosecond}},
  };
  return all;
}

const std::vector<Cluster>& presets() {
  // NVLink 4 through NVSwitch: 450 GB/s per GPU and direction, the same for H100 and H200.
  const LinkCost nvlink4{450 * kGigabyte, 10 * kMicrosecond};
  constexpr double kH100Kernel = 500e12, kH200Kernel = 550e12;  // see cost_model.hpp
  static const std::vector<Cluster> all = {
      preset_node("nvswitch", nvlink4, false, network_preset("ib-400g"), kH100Kernel),
      preset_node("h100-nvswitch", nvlink4, false, network_preset("ib-400g"), kH100Kernel),
      preset_node("h200-nvswitch", nvlink4, false, network_preset("ib-400g"), kH200Kernel),
      preset_node("mesh", {64 * kGigabyte, 10 * kMicrosecond}, true, network_preset("ib-400g"), kH100Kernel),
      preset_node("pcie", {25 * kGigabyte, 15 * kMicrosecond}, false, network_preset("ib-200g"), 400e12),
      preset_node("cpu", {5 * kGigabyte, 2 * kMicrosecond}, false, network_preset("ethernet-25g"), 0.05e12),
  };
  return all;
}

void check_ranks_fit(const Cluster& cluster, int ranks) {
  const int64_t capacity = int64_t{cluster.nodes} * cluster.ranks_per_node;
  SPATTN_CHECK(ranks <= capacity, ranks << " ranks do not fit on " << cluster.nodes
                                        << (cluster.nodes == 1 ? " node" : " nodes") << " of " << cluster.ranks_per_node
                                        << " ranks (--nodes " << cluster.nodes << ", --gpus-per-node "
                                        << cluster.ranks_per_node << "): at most " << capacity);
}

StepTraffic no_traffic(int ranks) {
  const auto size = static_cast<std::size_t>(ranks);
  return {std::vector<std::vector<int64_t>>(size, std::vector<int64_t>(size, 0)),
          std::vector<std::vector<int>>(size, std::vector<int>(size, 0))};
}

void add_message(StepTraffic& traffic, int from, int to, int64_t bytes) {
  traffic.bytes[static_cast<std::size_t>(from)][static_cast<std::size_t>(to)] += bytes;
  ++traffic.messages[static_cast<std::size_t>(from)][static_cast<std::size_t>(to)];
}

StepTraffic combined(const StepTraffic& first, const StepTraffic& second) {
  StepTraffic sum = first;
  for (std::size_t from = 0; from < sum.bytes.size(); ++from)
    for (std::size_t to = 0; to < sum.bytes.size(); ++to) {
      sum.bytes[from][to] += second.bytes[from][to];
      sum.messages[from][to] += second.messages[from][to];
    }
  return sum;
}

// A direct all-to-all inside groups of `group_size` consecutive ranks: every rank sends each
// other rank of its group one message per tensor, of the given sizes.
StepTraffic group_all_to_all(int ranks, int group_size, const std::vector<int64_t>& bytes_per_peer_of_each_tensor) {
  StepTraffic traffic = no_traffic(ranks);
  for (int from = 0; from < ranks; ++from) {
    const int group_start = from / group_size * group_size;
    for (int to = group_start; to < group_start + group_size; ++to) {
      if (to == from) continue;
      for (int64_t bytes : bytes_per_peer_of_each_tensor) add_message(traffic, from, to, bytes);
    }
  }
  return traffic;
}

// Rank i of group g sends each slot along its cycle over the groups to rank i of the group next on
// that cycle: a rotation over `over_groups.ranks()` groups of `inner` consecutive ranks (usp's
// scheme across its Ulysses groups; with inner 1 a rotation over the ranks themselves).
StepTraffic grouped_rotation_traffic(const CycleSchedule& over_groups, int inner, int64_t slot_bytes) {
  StepTraffic traffic = no_traffic(over_groups.ranks() * inner);
  for (int cycle = 0; cycle < over_groups.slots(); ++cycle)
    for (int group = 0; group < over_groups.ranks(); ++group)
      for (int member = 0; member < inner; ++member)
        add_message(traffic, group * inner + member, over_groups.successor(cycle, group) * inner + member, slot_bytes);
  return traffic;
}

// Whether a rotation step's attention is half its block under a causal mask: on the balanced
// layouts (zigzag, stripe, and hamilton's over zigzag) every step sees half of its keys on every rank; on
// the contiguous ring the last rank sees every earlier rank's keys in full and the steps wait for
// it, so only its own block, step 0, is halved.
bool rotation_step_halved(Algorithm algorithm, bool causal, int step) {
  return causal && (algorithm != Algorithm::ring || step == 0);
}

bool same_step(const StepCost& a, const StepCost& b) {
  return a.what == b.what && a.compute_seconds == b.compute_seconds && a.overlapped == b.overlapped &&
         a.transfer.bytes == b.transfer.bytes && a.transfer.inter_node_bytes == b.transfer.inter_node_bytes &&
         a.transfer.messages == b.transfer.messages && a.transfer.seconds == b.transfer.seconds;
}

// Appends one step, counting it into the previous entry when they are the same.
void append_step(std::vector<StepCost>& steps, const StepCost& step) {
  if (!steps.empty() && same_step(steps.back(), step)) {
    ++steps.back().count;
  } else {
    steps.push_back(step);
  }
}

double pass_seconds(const std::vector<StepCost>& steps) {
  double seconds = 0;
  for (const StepCost& step : steps) seconds += step.count * step.seconds();
  return seconds;
}

// A pass with no overlap as one step: its compute and its transfers add up.
StepCost whole_pass(const std::vector<StepCost>& steps) {
  StepCost pass;
  pass.what = "whole pass";
  for (const StepCost& step : steps) {
    pass.compute_seconds += step.count * step.compute_seconds;
    pass.transfer.bytes += step.count * step.transfer.bytes;
    pass.transfer.inter_node_bytes += step.count * step.transfer.inter_node_bytes;
    pass.transfer.messages += step.count * step.transfer.messages;
    pass.transfer.seconds += step.count * step.transfer.seconds;
  }
  return pass;
}

// The most repeated overlapped step that moves data, or the whole pass when none overlaps.
StepCost typical_step(const std::vector<StepCost>& forward) {
  const StepCost* typical = nullptr;
  for (const StepCost& step : forward)
    if (step.overlapped && step.transfer.bytes > 0 && (typical == nullptr || step.count > typical->count))
      typical = &step;
  return typical != nullptr ? *typical : whole_pass(forward);
}

void finish(StrategyCost& cost) {
  cost.step = typical_step(cost.forward);
  cost.forward_seconds = pass_seconds(cost.forward);
  cost.forward_backward_seconds = cost.forward_seconds + pass_seconds(cost.backward);
  const auto exposed = [](const std::vector<StepCost>& steps) {
    double seconds = 0;
    for (const StepCost& step : steps) seconds += step.count * step.exposed_transfer_seconds();
    return seconds;
  };
  cost.forward_exposed_seconds = exposed(cost.forward);
  cost.forward_backward_exposed_seconds = cost.forward_exposed_seconds + exposed(cost.backward);
}

// The kv heads a rank reads when Ulysses gives each of `degree` ranks heads / degree consecutive
// query heads; a kv head read by several ranks goes to each of them, and every rank's block has
// room for the most any rank reads (src/strategies/ulysses_strategy.cpp).
int64_t ulysses_kv_heads_per_rank(const AttentionShape& shape, int degree) {
  const int64_t heads_per_rank = shape.heads / degree;
  const int64_t group = shape.heads / shape.kv_heads;  // query heads per kv head
  int64_t most = 0;
  for (int64_t rank = 0; rank < degree; ++rank) {
    const int64_t first = rank * heads_per_rank;
    most = std::max(most, (first + heads_per_rank - 1) / group - first / group + 1);
  }
  return most;
}

// The shape, N, the mask and the cluster: what every strategy needs to size its messages and blocks.
struct Problem {
  const Cluster& cluster;
  const AttentionShape& shape;
  int ranks;
  bool causal;         // picks the balanced layouts, as in run
  AttentionMask mask;  // what the blocks see
  // No mask, or the causal mask with its balanced layouts: the closed forms (rotation_step_halved,
  // half of S x S). Any other mask (a sliding window) counts its visible pairs per rank and step.
  bool windowed() const {
    const bool no_mask = mask.left < 0 && mask.right < 0;
    const bool causal_mask = causal && mask.left < 0 && mask.right == 0;
    return !no_mask && !causal_mask;
  }

  int64_t element_bytes() const { return static_cast<int64_t>(dtype_size(shape.dtype)); }
  // Bytes of `tokens` tokens of `heads` heads with elements of `element_bytes`.
  int64_t bytes(int64_t tokens, int64_t heads, int64_t element_bytes) const {
    return shape.batch * tokens * heads * shape.head_dim * element_bytes;
  }
  int64_t tokens_per_rank() const { return shape.seq / ranks; }
  // Forward FLOP of `queries` x `keys` heads-wide block, halved when the causal mask hides half.
  double flop(int64_t heads, int64_t queries, int64_t keys, bool causally_halved) const {
    const double full = 4.0 * static_cast<double>(shape.batch * heads * shape.head_dim) * static_cast<double>(queries) *
                        static_cast<double>(keys);
    return causally_halved ? full / 2 : full;
  }
  // Forward FLOP of `pairs` visible (query, key) pairs of `heads` heads.
  double pairs_flop(int64_t heads, double pairs) const {
    return 4.0 * static_cast<double>(shape.batch * heads * shape.head_dim) * pairs;
  }
  double seconds(double flop) const { return flop / cluster.kernel_flops; }
};

// Forward FLOP of each step of `algorithm` rotating along `schedule` over its members (the ranks,
// or usp's groups; `nodes` for hamilton2), `heads` heads per member: the closed forms without a
// window, else the visible pairs of each step's slowest member in the algorithm's layout.
std::vector<double> rotation_step_flops(const Problem& problem, Algorithm algorithm, const CycleSchedule& schedule,
                                        int nodes, int64_t heads) {
  const int members = schedule.ranks();
  std::vector<double> flops;
  if (problem.windowed()) {
    const SequenceLayout layout(rotation_form(algorithm, members, problem.causal, nodes).layout, problem.shape.seq,
                                members);
    for (const std::vector<int64_t>& step : rotation_visible_pairs(layout, schedule, problem.mask))
      flops.push_back(problem.pairs_flop(heads, static_cast<double>(*std::max_element(step.begin(), step.end()))));
  } else {
    const int64_t tokens = problem.shape.seq / members;
    for (int step = 0; step < members; ++step)
      flops.push_back(problem.flop(heads, tokens, tokens, rotation_step_halved(algorithm, problem.causal, step)));
  }
  return flops;
}

// How the backward runs the own blocks of a rotation in the algorithm's layout over the
// schedule's members: whether the owners keep their gradient (keeps_own_gradient) and the share of
// step 0's attention that runs after the last step (own_late_share).
struct OwnBlocksPlan {
  bool gradient_stays = false;
  double late_share = 0.0;
};

OwnBlocksPlan own_blocks_plan(const Problem& problem, Algorithm algorithm, const CycleSchedule& schedule, int nodes) {
  const int members = schedule.ranks();
  const SequenceLayout layout(rotation_form(algorithm, members, problem.causal, nodes).layout, problem.shape.seq,
                              members);
  return {keeps_own_gradient(layout), own_late_share(layout, schedule, problem.mask)};
}

// Forward: compute on the held K,V while the next step's K,V travel; K,V move after every step but
// the last. Backward, as src/strategies/rotation_attention.cpp runs it: K,V rotate again and the
// dK,dV accumulators of step s follow one hop behind during step s + 1. Where the owners keep
// their own gradient (`own`), the accumulators start at step 1 and their last hop (to the
// owners, in fp32) overlaps the late part of the own blocks (the rest runs at step 0); else the
// last hop carries them in the input dtype after the last step.
void add_rotation_passes(StrategyCost& cost, const Problem& problem, const std::vector<double>& forward_flops,
                         const OwnBlocksPlan& own, const StepTraffic& kv, const StepTraffic& kv_gradient) {
  const int steps = static_cast<int>(forward_flops.size());
  const Transfer kv_transfer = step_transfer(problem.cluster, kv);
  const Transfer gradient_transfer = step_transfer(problem.cluster, kv_gradient);
  const Transfer both_transfer = step_transfer(problem.cluster, combined(kv, kv_gradient));
  for (int step = 0; step < steps; ++step) {
    const bool sends_kv = step + 1 < steps;
    const double compute = problem.seconds(forward_flops[static_cast<std::size_t>(step)]);
    append_step(cost.forward, {sends_kv ? "K,V" : "none", 1, compute, sends_kv ? kv_transfer : Transfer{}, true});
  }
  const double own_backward = problem.seconds(kBackwardFlopRatio * forward_flops.front());
  for (int step = 0; step < steps; ++step) {
    const bool sends_kv = step + 1 < steps;
    const bool sends_gradient = step >= (own.gradient_stays ? 2 : 1);
    StepCost backward{"none", 1,
                      step == 0 ? own_backward * (1.0 - own.late_share)
                                : problem.seconds(kBackwardFlopRatio * forward_flops[static_cast<std::size_t>(step)]),
                      Transfer{}, true};
    if (sends_kv && sends_gradient) {
      backward.what = "K,V + dK,dV";
      backward.transfer = both_transfer;
    } else if (sends_kv) {
      backward.what = "K,V";
      backward.transfer = kv_transfer;
    } else if (sends_gradient) {
      backward.what = "dK,dV";
      backward.transfer = gradient_transfer;
    }
    append_step(cost.backward, backward);
  }
  if (steps > 1)
    append_step(cost.backward, {"dK,dV to owner", 1, own_backward * own.late_share,
                                own.gradient_stays ? gradient_transfer : kv_transfer, true});
}

void add_transfer_phase(std::vector<StepCost>& pass, const Problem& problem, const std::string& what,
                        const StepTraffic& traffic) {
  append_step(pass, {what, 1, 0.0, step_transfer(problem.cluster, traffic), false});
}

void add_attention_phase(std::vector<StepCost>& pass, const Problem& problem, double flop) {
  append_step(pass, {"attention", 1, problem.seconds(flop), Transfer{}, false});
}

void cost_rotation(StrategyCost& cost, const Problem& problem, const StrategyOptions& options) {
  const Algorithm algorithm = cost.algorithm;
  const int ranks = problem.ranks;
  const CycleSchedule schedule(rotation_cycles(algorithm, ranks, options.nodes), ranks);
  const int slots = schedule.slots();
  cost.configuration = std::to_string(slots) + (slots == 1 ? " slot" : " slots");
  if (algorithm == Algorithm::hamilton2) {
    cost.configuration += ", m = " + std::to_string(slots) + " ranks x u = " + std::to_string(options.nodes) + " nodes";
  }

  const StepTraffic kv = rotation_traffic(schedule, kv_slot_bytes(problem.shape, ranks, slots, problem.shape.dtype));
  const StepTraffic kv_gradient = rotation_traffic(schedule, kv_slot_bytes(problem.shape, ranks, slots, DType::f32));
  const std::vector<double> flops =
      rotation_step_flops(problem, algorithm, schedule, options.nodes, problem.shape.heads);
  add_rotation_passes(cost, problem, flops, own_blocks_plan(problem, algorithm, schedule, options.nodes), kv,
                      kv_gradient);
}

// A pass of plain Ulysses in `stages` stages (schedule/ulysses_stages.hpp), each moving
// `inputs` (one stage's all-to-all) to head shards and `results` back: every stage's inputs set off
// at once, the first's exposed; the others travel during the first stage's attention, each
// stage's results during the next stage's attention, and the last stage's results after all.
void add_ulysses_pass(std::vector<StepCost>& pass, const Problem& problem, int stages, double flop,
                      const std::string& inputs_what, const StepTraffic& inputs, const std::string& results_what,
                      const StepTraffic& results) {
  add_transfer_phase(pass, problem, inputs_what, inputs);
  if (stages == 1) {
    add_attention_phase(pass, problem, flop);
    add_transfer_phase(pass, problem, results_what, results);
    return;
  }
  StepTraffic later_inputs = inputs;
  for (int stage = 2; stage < stages; ++stage) later_inputs = combined(later_inputs, inputs);
  const double stage_seconds = problem.seconds(flop / stages);
  append_step(pass, {"attention + " + inputs_what + " of the later stages", 1, stage_seconds,
                     step_transfer(problem.cluster, later_inputs), true});
  for (int stage = 1; stage < stages; ++stage)
    append_step(pass, {"attention + " + results_what + " of the stage before", 1, stage_seconds,
                       step_transfer(problem.cluster, results), true});
  add_transfer_phase(pass, problem, results_what + " of the last stage", results);
}

void cost_ulysses(StrategyCost& cost, const Problem& problem) {
  const int ranks = problem.ranks;
  const AttentionShape& shape = problem.shape;
  const int64_t heads_per_rank = shape.heads / ranks;
  const int stages = ulysses_stages(heads_per_rank, shape.heads / shape.kv_heads, ranks);
  cost.configuration = std::to_string(heads_per_rank) + " heads per rank";
  if (stages > 1) cost.configuration += " in " + std::to_string(stages) + " stages";
  // Each rank sends peer p the p-th N-th of its heads for its S/N tokens, and back, a stage's
  // slice of them at a time (whole kv-head groups, so the kv heads divide evenly too).
  const int64_t tokens = problem.tokens_per_rank();
  const int64_t e = problem.element_bytes();
  const int64_t stage_heads = heads_per_rank / stages;
  const int64_t stage_kv_heads = ulysses_kv_heads_per_rank(shape, ranks) / stages;
  const int64_t q_part = problem.bytes(tokens, stage_heads, e);
  const int64_t kv_part = problem.bytes(tokens, stage_kv_heads, e);
  const int64_t lse_part = shape.batch * stage_heads * tokens * kFp32Bytes;
  const double flop =
      problem.windowed()
          ? problem.pairs_flop(heads_per_rank,
                               static_cast<double>(problem.mask.visible_pairs(0, shape.seq, 0, shape.seq)))
          : problem.flop(heads_per_rank, shape.seq, shape.seq, problem.causal);

  add_ulysses_pass(cost.forward, problem, stages, flop, "all-to-all q,k,v",
                   group_all_to_all(ranks, ranks, {q_part, kv_part, kv_part}), "all-to-all out,lse",
                   group_all_to_all(ranks, ranks, {q_part, lse_part}));
  // The block kernels' gradients travel in fp32, so that the contributions of several ranks to a
  // kv head are summed before the one rounding to the input dtype (ulysses_strategy.cpp).
  const int64_t q_gradient_part = problem.bytes(tokens, stage_heads, kFp32Bytes);
  const int64_t kv_gradient_part = problem.bytes(tokens, stage_kv_heads, kFp32Bytes);
  add_ulysses_pass(cost.backward, problem, stages, kBackwardFlopRatio * flop, "all-to-all q,k,v,out,dout,lse",
                   group_all_to_all(ranks, ranks, {q_part, kv_part, kv_part, q_part, q_part, lse_part}),
                   "all-to-all dq,dk,dv (fp32)",
                   group_all_to_all(ranks, ranks, {q_gradient_part, kv_gradient_part, kv_gradient_part}));
}

void cost_allgather(StrategyCost& cost, const Problem& problem) {
  const int ranks = problem.ranks;
  const AttentionShape& shape = problem.shape;
  const int64_t tokens = problem.tokens_per_rank();
  const int64_t k_shard = problem.bytes(tokens, shape.kv_heads, problem.element_bytes());
  const int64_t k_gradient_shard = problem.bytes(tokens, shape.kv_heads, kFp32Bytes);
  double flop = problem.flop(shape.heads, tokens, shape.seq, problem.causal);
  if (problem.windowed()) {  // the rank whose chunks see the most keys
    const SequenceLayout layout(LayoutKind::zigzag, shape.seq, ranks);
    double most = 0;
    for (int rank = 0; rank < ranks; ++rank) {
      double pairs = 0;
      for (const SequenceChunk& chunk : layout.chunks(rank))
        pairs += static_cast<double>(problem.mask.visible_pairs(chunk.position, chunk.position + chunk.length, 0, shape.seq));
      most = std::max(most, pairs);
    }
    flop = problem.pairs_flop(shape.heads, most);
  }
  const StepTraffic gather = group_all_to_all(ranks, ranks, {k_shard, k_shard});

  add_transfer_phase(cost.forward, problem, "all-gather k,v", gather);
  add_attention_phase(cost.forward, problem, flop);

  add_transfer_phase(cost.backward, problem, "all-gather k,v", gather);
  add_attention_phase(cost.backward, problem, kBackwardFlopRatio * flop);
  add_transfer_phase(cost.backward, problem, "reduce-scatter dk,dv (fp32)",
                     group_all_to_all(ranks, ranks, {k_gradient_shard, k_gradient_shard}));
}

// Ulysses inside groups of N1 consecutive ranks, then a rotation (options.across: ring, zigzag or
// hamilton) over the N2 = N/N1 groups: rank i of group g sends rank i of the next group on each
// cycle one slot of the K,V of the group's S/N2 tokens for its kv heads (HK/N1 when N1 divides
// HK); over all slots 2*B*(S/N2)*(HK/N1)*D*e = 2*B*(S/N)*HK*D*e bytes per step, as much as a ring
// of N, against N1 times a ring step's attention (H/N1 heads of S/N2 x S/N2 tokens).
void cost_usp(StrategyCost& cost, const Problem& problem, const StrategyOptions& options) {
  const int ranks = problem.ranks;
  const AttentionShape& shape = problem.shape;
  // The degree exactly as `spattn run` chooses it (schedule/ulysses_degree.hpp).
  const int inner = resolved_ulysses_degree(ranks, options.inner, shape);
  const int groups = ranks / inner;
  const CycleSchedule over_groups(rotation_cycles(options.across, groups, 1), groups);
  const int slots = over_groups.slots();
  cost.configuration = "Ulysses " + std::to_string(inner) + " x " + algorithm_name(options.across) + " " +
                       std::to_string(groups) + (slots > 1 ? " (" + std::to_string(slots) + " slots)" : "");
  const int64_t tokens = problem.tokens_per_rank();
  const int64_t group_tokens = shape.seq / groups;
  const int64_t heads = shape.heads / inner;
  const int64_t kv_heads = ulysses_kv_heads_per_rank(shape, inner);
  const int64_t e = problem.element_bytes();
  const int64_t q_part = problem.bytes(tokens, heads, e);
  const int64_t kv_part = problem.bytes(tokens, kv_heads, e);
  const int64_t lse_part = shape.batch * heads * tokens * kFp32Bytes;

  add_transfer_phase(cost.forward, problem, "all-to-all q,k,v",
                     group_all_to_all(ranks, inner, {q_part, kv_part, kv_part}));
  add_transfer_phase(cost.backward, problem, "all-to-all q,k,v,out,dout,lse",
                     group_all_to_all(ranks, inner, {q_part, kv_part, kv_part, q_part, q_part, lse_part}));
  const int64_t slot_tokens = group_tokens / slots;
  add_rotation_passes(
      cost, problem, rotation_step_flops(problem, options.across, over_groups, 1, heads),
      own_blocks_plan(problem, options.across, over_groups, 1),
      grouped_rotation_traffic(over_groups, inner, 2 * problem.bytes(slot_tokens, kv_heads, e)),
      grouped_rotation_traffic(over_groups, inner, 2 * problem.bytes(slot_tokens, kv_heads, kFp32Bytes)));
  add_transfer_phase(cost.forward, problem, "all-to-all out,lse", group_all_to_all(ranks, inner, {q_part, lse_part}));
  add_transfer_phase(cost.backward, problem, "all-to-all dq,dk,dv",
                     group_all_to_all(ranks, inner, {q_part, kv_part, kv_part}));
}

}  // namespace

const std::vector<std::string>& cluster_preset_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> list;
    for (const Cluster& preset : presets()) list.push_back(preset.name);
    return list;
  }();
  return names;
}

Cluster cluster_preset(const std::string& name) {
  for (const Cluster& preset : presets())
    if (preset.name == name) return preset;
  SPATTN_FAIL("unknown cluster preset '" << name << "'; allowed: " << comma_separated(cluster_preset_names()));
}

Cluster sized_cluster(const Cluster& kind, int ranks, int nodes, int ranks_per_node) {
  SPATTN_CHECK(ranks >= 1, "a cluster needs at least 1 rank, got " << ranks);
  SPATTN_CHECK(nodes >= 0 && ranks_per_node >= 0,
               "nodes (" << nodes << ") and ranks per node (" << ranks_per_node << ") must be positive, or 0 for the default");
  Cluster cluster = kind;
  if (ranks_per_node > 0) cluster.ranks_per_node = ranks_per_node;
  cluster.nodes = nodes > 0 ? nodes : (ranks + cluster.ranks_per_node - 1) / cluster.ranks_per_node;
  check_ranks_fit(cluster, ranks);
  return cluster;
}

const std::vector<std::string>& network_preset_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> list;
    for (const auto& [name, link] : networks()) list.push_back(name);
    return list;
  }();
  return names;
}

LinkCost network_preset(const std::string& name) {
  for (const auto& [preset, link] : networks())
    if (preset == name) return link;
  SPATTN_FAIL("unknown network '" << name << "'; allowed: " << comma_separated(network_preset_names()));
}

std::string cluster_summary(const Cluster& cluster) {
  std::ostringstream summary;
  summary << cluster.nodes << (cluster.nodes == 1 ? " node" : " nodes") << " of " << cluster.ranks_per_node
          << " ranks; within a node " << (cluster.full_mesh ? "a link per pair of " : "a switch, ")
          << cluster.within_node.bandwidth / kGigabyte << (cluster.full_mesh ? " GB/s" : " GB/s per rank") << ", "
          << cluster.within_node.latency / kMicrosecond << " us per message; across nodes "
          << cluster.across_nodes.bandwidth / kGigabyte << " GB/s per rank, "
          << cluster.across_nodes.latency / kMicrosecond << " us per message";
  summary << "; kernel " << cluster.kernel_flops / 1e12 << " TFLOP/s";
  return summary.str();
}

int64_t kv_slot_bytes(const AttentionShape& shape, int ranks, int slots, DType dtype) {
  return 2 * shape.batch * (shape.seq / ranks) * shape.kv_heads * shape.head_dim *
         static_cast<int64_t>(dtype_size(dtype)) / slots;
}

StepTraffic rotation_traffic(const CycleSchedule& schedule, int64_t slot_bytes) {
  return grouped_rotation_traffic(schedule, 1, slot_bytes);
}

Transfer step_transfer(const Cluster& cluster, const StepTraffic& traffic) {
  const int ranks = static_cast<int>(traffic.bytes.size());
  check_ranks_fit(cluster, ranks);
  SPATTN_CHECK(traffic.messages.size() == traffic.bytes.size(),
               "traffic has bytes for " << ranks << " ranks but messages for " << traffic.messages.size());
  Transfer slowest;
  for (int from = 0; from < ranks; ++from) {
    int64_t within_bytes = 0;
    int64_t busiest_link_bytes = 0;
    int64_t across_bytes = 0;
    int within_messages = 0;
    int across_messages = 0;
    for (int to = 0; to < ranks; ++to) {
      const int64_t bytes = traffic.bytes[static_cast<std::size_t>(from)][static_cast<std::size_t>(to)];
      const int messages = traffic.messages[static_cast<std::size_t>(from)][static_cast<std::size_t>(to)];
      if (from / cluster.ranks_per_node == to / cluster.ranks_per_node) {
        within_bytes += bytes;
        busiest_link_bytes = std::max(busiest_link_bytes, bytes);
        within_messages += messages;
      } else {
        across_bytes += bytes;
        across_messages += messages;
      }
    }
    const int64_t limiting_bytes = cluster.full_mesh ? busiest_link_bytes : within_bytes;
    const double within_seconds = within_messages * cluster.within_node.latency +
                                  static_cast<double>(limiting_bytes) / cluster.within_node.bandwidth;
    const double across_seconds = across_messages == 0
                                      ? 0.0
                                      : across_messages * cluster.across_nodes.latency +
                                            static_cast<double>(across_bytes) / cluster.across_nodes.bandwidth;
    slowest.bytes = std::max(slowest.bytes, within_bytes + across_bytes);
    slowest.inter_node_bytes = std::max(slowest.inter_node_bytes, across_bytes);
    slowest.messages = std::max(slowest.messages, within_messages + across_messages);
    slowest.seconds = std::max({slowest.seconds, within_seconds, across_seconds});
  }
  return slowest;
}

double StepCost::seconds() const {
  return overlapped ? std::max(compute_seconds, transfer.seconds) : compute_seconds + transfer.seconds;
}

double StepCost::exposed_transfer_seconds() const {
  return overlapped ? std::max(0.0, transfer.seconds - compute_seconds) : transfer.seconds;
}

const std::vector<Algorithm>& rotation_algorithms() {
  static const std::vector<Algorithm> algorithms = {Algorithm::ring, Algorithm::zigzag, Algorithm::stripe,
                                                    Algorithm::hamilton, Algorithm::hamilton2};
  return algorithms;
}

StrategyCost strategy_cost(const Cluster& cluster, const AttentionShape& shape, int ranks,
                           const AttentionOptions& attention, Algorithm algorithm, const StrategyOptions& strategy_options) {
  SPATTN_CHECK(ranks >= 1, "the cost model needs at least 1 rank, got " << ranks);
  check_ranks_fit(cluster, ranks);
  const std::string shape_problem = shape_error(shape);
  SPATTN_CHECK(shape_problem.empty(), shape_problem);
  SPATTN_CHECK(cluster.kernel_flops > 0, "the kernel rate must be positive");
  const std::string window_problem = window_error(attention.window_left, attention.window_right);
  SPATTN_CHECK(window_problem.empty(), window_problem);
  const Problem problem{cluster, shape, ranks, attention.causal, AttentionMask::from_options(attention)};
  StrategyCost cost;
  cost.algorithm = algorithm;
  cost.not_applicable = mask_unsupported(algorithm, attention);
  if (cost.not_applicable.empty())
    cost.not_applicable = strategy_error(algorithm, shape, ranks, attention.causal, strategy_options);
  if (!cost.applies()) return cost;
  switch (algorithm) {
    case Algorithm::ring:
    case Algorithm::zigzag:
    case Algorithm::stripe:
    case Algorithm::hamilton:
    case Algorithm::hamilton2:
      cost_rotation(cost, problem, strategy_options);
      break;
    case Algorithm::ulysses:
      cost_ulysses(cost, problem);
      break;
    case Algorithm::allgather:
      cost_allgather(cost, problem);
      break;
    case Algorithm::usp:
      cost_usp(cost, problem, strategy_options);
      break;
  }
  finish(cost);
  return cost;
}

bool modelled_faster(const StrategyCost& a, const StrategyCost& b, bool with_backward) {
  if (a.applies() != b.applies()) return a.applies();
  return with_backward ? a.forward_backward_seconds < b.forward_backward_seconds
                       : a.forward_seconds < b.forward_seconds;
}

const StrategyCost& fastest_strategy(const std::vector<StrategyCost>& costs, bool with_backward) {
  const auto fastest = std::min_element(costs.begin(), costs.end(), [with_backward](const auto& a, const auto& b) {
    return modelled_faster(a, b, with_backward);
  });
  if (fastest == costs.end() || !fastest->applies()) {
    std::ostringstream reasons;
    for (const StrategyCost& cost : costs)
      reasons << "; " << algorithm_name(cost.algorithm) << ": " << cost.not_applicable;
    SPATTN_FAIL("no strategy runs this case" << reasons.str());
  }
  return *fastest;
}

std::vector<StrategyCost> compare_strategies(const Cluster& cluster, const AttentionShape& shape, int ranks,
                                             const AttentionOptions& attention,
                                             const StrategyOptions& strategy_options) {
  std::vector<StrategyCost> costs;
  for (Algorithm algorithm : all_algorithms())
    costs.push_back(strategy_cost(cluster, shape, ranks, attention, algorithm, strategy_options));
  return costs;
}

}  // namespace spattn
