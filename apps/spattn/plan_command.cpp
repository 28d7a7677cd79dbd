#include "plan_command.hpp"

#include <algorithm>
#include <iomanip>
#include <map>
#include <sstream>
#include <utility>
#include <vector>

#include "json_string.hpp"
#include "schedule/step_traffic.hpp"
#include "schedule/strategy_rules.hpp"

namespace spattn::app {
namespace {

// The most ranks whose sources table `spattn plan` prints (see schedule_text).
constexpr int kMaxRanksWithSources = 128;

// The options with the preset's defaults filled in.
struct PlanCase {
  Cluster cluster;
  int ranks = 0;
  AttentionShape shape;
  AttentionOptions attention;  // its mask: causal and the window
  StrategyOptions strategy_options;
};

PlanCase plan_case(const PlanOptions& options) {
  PlanCase plan;
  Cluster kind = cluster_preset(options.preset);
  if (!options.network.empty()) kind.across_nodes = network_preset(options.network);
  if (options.tflops) kind.kernel_flops = *options.tflops * 1e12;
  if (options.intra_bandwidth) kind.within_node.bandwidth = *options.intra_bandwidth * 1e9;
  if (options.inter_bandwidth) kind.across_nodes.bandwidth = *options.inter_bandwidth * 1e9;
  if (options.latency) kind.within_node.latency = kind.across_nodes.latency = *options.latency * 1e-6;
  const int ranks_per_node = options.gpus_per_node > 0 ? options.gpus_per_node : kind.ranks_per_node;
  plan.ranks = options.ranks > 0 ? options.ranks : std::max(options.nodes, 1) * ranks_per_node;
  plan.cluster = sized_cluster(kind, plan.ranks, options.nodes, ranks_per_node);
  plan.shape.batch = options.batch;
  plan.shape.seq = options.seq > 0 ? options.seq : kPlanTokensPerRank * plan.ranks;
  plan.shape.heads = options.heads;
  plan.shape.kv_heads = options.kv_heads;
  plan.shape.head_dim = options.head_dim;
  plan.shape.dtype = options.dtype;
  plan.attention.causal = options.causal;
  plan.attention.window_left = options.window_left;
  plan.attention.window_right = options.window_right;
  plan.strategy_options.nodes = plan.cluster.nodes;
  plan.strategy_options.inner = options.inner;
  plan.strategy_options.across = parse_algorithm(options.across);
  return plan;
}

std::string format_bytes(int64_t bytes) {
  constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double value = static_cast<double>(bytes);
  std::size_t unit = 0;
  while (value >= 1024 && unit + 1 < std::size(kUnits)) {
    value /= 1024;
    ++unit;
  }
  std::ostringstream text;
  text << std::fixed << std::setprecision(unit == 0 ? 0 : 2) << value << " " << kUnits[unit];
  return text.str();
}

std::string milliseconds(double seconds) {
  std::ostringstream text;
  text << std::fixed << std::setprecision(3) << seconds * 1e3;
  return text.str();
}

std::string shape_summary(const PlanCase& plan) {
  const AttentionShape& shape = plan.shape;
  std::ostringstream text;
  text << "S = " << shape.seq << " (" << shape.seq / plan.ranks << " per rank), B " << shape.batch << ", H "
       << shape.heads << ", HK " << shape.kv_heads << ", D " << shape.head_dim << ", " << dtype_name(shape.dtype)
       << (plan.attention.causal ? ", causal" : ", not causal");
  if (plan.attention.window_left >= 0 || plan.attention.window_right >= 0)
    text << ", window " << plan.attention.window_left << "," << plan.attention.window_right;
  return text.str();
}

// "1 rank", "8 ranks".
std::string count_of(int64_t count, const std::string& thing) {
  return std::to_string(count) + " " + thing + (count == 1 ? "" : "s");
}

std::string json_value(int64_t value) { return std::to_string(value); }
std::string json_value(int value) { return std::to_string(value); }
std::string json_value(bool value) { return value ? "true" : "false"; }
std::string json_value(double value) {
  std::ostringstream text;
  text << std::setprecision(6) << value;
  return text.str();
}
template <typename Item>
std::string json_value(const std::vector<Item>& items) {
  std::string list = "[";
  for (const Item& item : items) list += (list.size() > 1 ? ", " : "") + json_value(item);
  return list + "]";
}

// An n x n table with a header of column numbers; -1 marks "none".
std::string rank_table(const std::vector<std::vector<int>>& table) {
  const int width = static_cast<int>(std::max<std::size_t>(std::to_string(table.size()).size(), 2)) + 1;
  std::ostringstream text;
  text << std::setw(width + 2) << "";
  for (std::size_t column = 0; column < table.size(); ++column) text << std::setw(width) << column;
  text << "\n";
  for (std::size_t row = 0; row < table.size(); ++row) {
    text << "  " << std::setw(width) << row;
    for (int value : table[row]) text << std::setw(width) << value;
    text << "\n";
  }
  return text.str();
}

// sources[r][s][c]: the rank whose slot c rank r holds at step s.
std::vector<std::vector<std::vector<int>>> source_table(const CycleSchedule& schedule) {
  std::vector<std::vector<std::vector<int>>> sources;
  for (int rank = 0; rank < schedule.ranks(); ++rank) {
    std::vector<std::vector<int>> steps;
    for (int step = 0; step < schedule.ranks(); ++step) {
      std::vector<int> slots;
      for (int cycle = 0; cycle < schedule.slots(); ++cycle) slots.push_back(schedule.source(cycle, rank, step));
      steps.push_back(slots);
    }
    sources.push_back(steps);
  }
  return sources;
}

// How many links carry how many slots per step, within nodes and across them.
std::string link_summary(const PlanCase& plan, const CycleSchedule& schedule, const StepTraffic& slots_per_link,
                         const StrategyCost& cost) {
  std::map<std::pair<bool, int>, int> links;  // (across nodes, slots) -> links
  const int ranks_per_node = plan.cluster.ranks_per_node;
  for (int from = 0; from < plan.ranks; ++from)
    for (int to = 0; to < plan.ranks; ++to) {
      const int slots = slots_per_link.messages[static_cast<std::size_t>(from)][static_cast<std::size_t>(to)];
      if (slots > 0) ++links[{from / ranks_per_node != to / ranks_per_node, slots}];
    }
  std::ostringstream text;
  text << "bytes per link per step (" << shape_summary(plan) << "):\n";
  for (const auto& [kind, count] : links) {
    const auto& [across, slots] = kind;
    text << "  " << count << (count == 1 ? " link " : " links ") << (across ? "across nodes" : "within a node")
         << " carry " << slots << (slots == 1 ? " slot" : " slots");
    if (cost.applies()) {
      text << ": " << format_bytes(slots * kv_slot_bytes(plan.shape, plan.ranks, schedule.slots(), plan.shape.dtype))
           << " of K,V forward; backward adds "
           << format_bytes(slots * kv_slot_bytes(plan.shape, plan.ranks, schedule.slots(), DType::f32))
           << " of fp32 dK,dV";
    }
    text << "\n";
  }
  if (!cost.applies()) {
    text << "  sizes n/a: " << cost.not_applicable << "\n";
    return text.str();
  }
  const Transfer& transfer = cost.step.transfer;
  text << "  per rank and forward step: " << format_bytes(transfer.bytes) << " in " << transfer.messages
       << " messages, " << format_bytes(transfer.inter_node_bytes) << " across nodes; model on " << plan.cluster.name
       << ": transfer " << milliseconds(transfer.seconds) << " ms, compute " << milliseconds(cost.step.compute_seconds)
       << " ms\n";
  return text.str();
}

// The cluster's size, links and kernel rate as one JSON object.
std::string cluster_json(const Cluster& cluster) {
  std::ostringstream json;
  json << "{\"nodes\": " << cluster.nodes << ", \"ranks_per_node\": " << cluster.ranks_per_node
       << ", \"full_mesh\": " << json_value(cluster.full_mesh)
       << ", \"within_node_bandwidth\": " << json_value(cluster.within_node.bandwidth)
       << ", \"within_node_latency\": " << json_value(cluster.within_node.latency)
       << ", \"across_nodes_bandwidth\": " << json_value(cluster.across_nodes.bandwidth)
       << ", \"across_nodes_latency\": " << json_value(cluster.across_nodes.latency)
       << ", \"kernel_flops\": " << json_value(cluster.kernel_flops) << "}";
  return json.str();
}

std::string schedule_text(const PlanOptions& options) {
  const PlanCase plan = plan_case(options);
  const Algorithm algorithm = parse_algorithm(options.algorithm);
  const CycleSchedule schedule(rotation_cycles(algorithm, plan.ranks, plan.strategy_options.nodes), plan.ranks);
  const StrategyCost cost =
      strategy_cost(plan.cluster, plan.shape, plan.ranks, plan.attention, algorithm, plan.strategy_options);
  // The sources table holds N^2 (N - 1) numbers for a Hamiltonian schedule: 2 million at 128
  // ranks, a billion at 1024. Past kMaxRanksWithSources the cycles say the same thing (slot c at
  // step s is cycle c walked s hops back) and the table is left out.
  const bool with_sources = plan.ranks <= kMaxRanksWithSources;
  const auto sources = with_sources ? source_table(schedule) : std::vector<std::vector<std::vector<int>>>{};
  const std::string sources_left_out = "the sources table of " + std::to_string(plan.ranks) +
                                       " ranks is left out (printed up to " + std::to_string(kMaxRanksWithSources) +
                                       " ranks): rank r holds at step s the slot c of the rank s hops back along cycle c";
  // Whole slots per link: the traffic of one-byte slots counts them.
  const StepTraffic slots_per_link = rotation_traffic(schedule, 1);
  std::vector<std::vector<int64_t>> link_bytes;
  if (cost.applies()) {
    link_bytes =
        rotation_traffic(schedule, kv_slot_bytes(plan.shape, plan.ranks, schedule.slots(), plan.shape.dtype)).bytes;
  }

  std::ostringstream text;
  if (options.json) {
    text << "{\"algo\": " << json_string(options.algorithm) << ", \"ranks\": " << plan.ranks;
    if (algorithm == Algorithm::hamilton2) text << ", \"nodes\": " << plan.strategy_options.nodes;
    text << ", \"preset\": " << json_string(plan.cluster.name) << ", \"cluster\": " << cluster_json(plan.cluster)
         << ", \"slots\": " << schedule.slots()
         << ", \"cycles\": " << json_value(schedule.cycles())
         << ", \"out_mapping\": " << json_value(schedule.out_mapping())
         << ", \"in_mapping\": " << json_value(schedule.in_mapping())
         << ", \"sources\": " << (with_sources ? json_value(sources) : "null")
         << ", \"sources_left_out\": " << (with_sources ? "null" : json_string(sources_left_out))
         << ", \"slots_per_link\": " << json_value(slots_per_link.messages)
         << ", \"link_bytes\": " << (cost.applies() ? json_value(link_bytes) : "null")
         << ", \"not_applicable\": " << (cost.applies() ? "null" : json_string(cost.not_applicable)) << "}";
    return text.str();
  }
  text << options.algorithm << " on " << count_of(plan.ranks, "rank");
  if (algorithm == Algorithm::hamilton2) {
    text << " (" << count_of(plan.strategy_options.nodes, "node") << " of " << plan.ranks / plan.strategy_options.nodes
         << ")";
  }
  text << ": " << schedule.slots() << (schedule.slots() == 1 ? " cycle" : " cycles") << ", one K,V slot per cycle\n"
       << "cycles (slot c moves one hop along cycle c at every step):\n";
  for (int cycle = 0; cycle < schedule.slots(); ++cycle) {
    text << "  " << std::setw(3) << cycle << ":";
    for (int rank : schedule.cycles()[static_cast<std::size_t>(cycle)]) text << " " << rank;
    text << "\n";
  }
  text << "out mapping (row r, column p: the slot r sends to p; -1: none):\n"
       << rank_table(schedule.out_mapping())
       << "in mapping (row r, column p: the slot r receives from p and stores as that slot; -1: none):\n"
       << rank_table(schedule.in_mapping());
  if (!with_sources) text << sources_left_out << "\n";
  else
    text << "sources (the rank whose slot c rank r holds at step s; under a causal mask a source below r\n"
            "gives all of r's queries its front half, one above r its whole slot to r's back half):\n";
  for (int rank = 0; with_sources && rank < plan.ranks; ++rank) {
    text << "  rank " << rank << ", slots 0.." << schedule.slots() - 1 << ":\n";
    for (int step = 0; step < plan.ranks; ++step) {
      text << "    step " << std::setw(3) << step << ":";
      for (int source : sources[static_cast<std::size_t>(rank)][static_cast<std::size_t>(step)]) {
        text << std::setw(4) << source;
      }
      text << "\n";
    }
  }
  text << link_summary(plan, schedule, slots_per_link, cost);
  return text.str();
}

std::string step_json(const StepCost& step) {
  std::ostringstream json;
  json << "{\"what\": " << json_string(step.what) << ", \"count\": " << step.count
       << ", \"compute_s\": " << json_value(step.compute_seconds)
       << ", \"transfer_s\": " << json_value(step.transfer.seconds) << ", \"step_s\": " << json_value(step.seconds())
       << ", \"bytes\": " << step.transfer.bytes << ", \"inter_node_bytes\": " << step.transfer.inter_node_bytes
       << ", \"messages\": " << step.transfer.messages << ", \"overlapped\": " << json_value(step.overlapped) << "}";
  return json.str();
}

std::string steps_json(const std::vector<StepCost>& steps) {
  std::string list = "[";
  for (const StepCost& step : steps) list += (list.size() > 1 ? ", " : "") + step_json(step);
  return list + "]";
}

std::string comparison_json(const PlanCase& plan, const std::vector<StrategyCost>& costs) {
  const Cluster& cluster = plan.cluster;
  const AttentionShape& shape = plan.shape;
  std::ostringstream json;
  json << "{\"preset\": " << json_string(cluster.name) << ", \"cluster\": " << cluster_json(cluster)
       << ", \"ranks\": " << plan.ranks
       << ", \"shape\": {\"batch\": " << shape.batch << ", \"seq\": " << shape.seq << ", \"heads\": " << shape.heads
       << ", \"kv_heads\": " << shape.kv_heads << ", \"head_dim\": " << shape.head_dim
       << ", \"dtype\": " << json_string(dtype_name(shape.dtype)) << "}, \"causal\": " << json_value(plan.attention.causal)
       << ", \"window\": [" << plan.attention.window_left << ", " << plan.attention.window_right << "]"
       << ", \"strategies\": [";
  for (std::size_t i = 0; i < costs.size(); ++i) {
    const StrategyCost& cost = costs[i];
    json << (i > 0 ? ", " : "") << "{\"algo\": " << json_string(algorithm_name(cost.algorithm));
    if (!cost.applies()) {
      json << ", \"not_applicable\": " << json_string(cost.not_applicable) << "}";
      continue;
    }
    json << ", \"not_applicable\": null, \"configuration\": " << json_string(cost.configuration)
         << ", \"step\": " << step_json(cost.step) << ", \"forward_s\": " << json_value(cost.forward_seconds)
         << ", \"forward_backward_s\": " << json_value(cost.forward_backward_seconds)
         << ", \"forward_exposed_transfer_s\": " << json_value(cost.forward_exposed_seconds)
         << ", \"forward_backward_exposed_transfer_s\": " << json_value(cost.forward_backward_exposed_seconds)
         << ", \"forward\": " << steps_json(cost.forward) << ", \"backward\": " << steps_json(cost.backward) << "}";
  }
  json << "]}";
  return json.str();
}

std::string comparison_table(const PlanCase& plan, const std::vector<StrategyCost>& costs) {
  std::ostringstream text;
  text << "model of " << count_of(plan.ranks, "rank") << " on " << plan.cluster.name << " (" << cluster_summary(plan.cluster)
       << ")\n"
       << shape_summary(plan) << "\n"
       << "per rank and forward step: a rotation step (ring, zigzag, hamilton, hamilton2, usp's ring), or the\n"
          "whole forward pass where nothing overlaps (ulysses, allgather); steps: how many such steps; exposed:\n"
          "transfer time that compute does not hide, forward and backward; times in ms\n";
  const std::vector<int> widths = {11, 7, 12, 12, 6, 10, 10, 10, 10, 10, 10};
  const auto row = [&](const std::vector<std::string>& cells) {
    for (std::size_t i = 0; i < cells.size(); ++i)
      text << std::left << std::setw(i < widths.size() ? widths[i] : 0) << cells[i];
    text << "\n";
  };
  row({"algo", "steps", "sent", "across", "msgs", "compute", "transfer", "step", "forward", "fwd+bwd", "exposed",
       "setup"});
  for (const StrategyCost& cost : costs) {
    if (!cost.applies()) {
      text << std::left << std::setw(widths[0]) << algorithm_name(cost.algorithm) << "n/a: " << cost.not_applicable
           << "\n";
      continue;
    }
    const StepCost& step = cost.step;
    row({algorithm_name(cost.algorithm), std::to_string(step.count), format_bytes(step.transfer.bytes),
         format_bytes(step.transfer.inter_node_bytes), std::to_string(step.transfer.messages),
         milliseconds(step.compute_seconds), milliseconds(step.transfer.seconds), milliseconds(step.seconds()),
         milliseconds(cost.forward_seconds), milliseconds(cost.forward_backward_seconds),
         milliseconds(cost.forward_backward_exposed_seconds), cost.configuration});
  }
  return text.str();
}

}  // namespace

std::string plan_refusal(const PlanOptions& options) {
  if (options.compare) return "";
  const PlanCase plan = plan_case(options);
  const Algorithm algorithm = parse_algorithm(options.algorithm);
  const std::string mask = mask_unsupported(algorithm, plan.attention);
  if (!mask.empty()) return mask;
  return strategy_error(algorithm, plan.shape, plan.ranks, plan.attention.causal, plan.strategy_options);
}

std::string plan_text(const PlanOptions& options) {
  if (!options.compare) return schedule_text(options);
  const PlanCase plan = plan_case(options);
  const std::vector<StrategyCost> costs =
      compare_strategies(plan.cluster, plan.shape, plan.ranks, plan.attention, plan.strategy_options);
  return options.json ? comparison_json(plan, costs) : comparison_table(plan, costs);
}

}  // namespace spattn::app
