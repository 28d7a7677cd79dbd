#pragma once
/// \file cli_options.hpp
/// The command line of the `spattn` program: `spattn <command> [options]`, parsed into a struct.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "spattn/attention_options.hpp"
#include "spattn/dtype.hpp"
#include "spattn/error.hpp"

namespace spattn::app {

/// The seed of `spattn run` when --seed is not given.
inline constexpr uint64_t kDefaultSeed = 1234;

/// A mistake in the command line, as opposed to a failure while running. main() exits with
/// status 2 for this and 1 for any other Error.
struct UsageError : Error {
  explicit UsageError(const std::string& message) : Error(kErrorPrefix + message) {}
};

/// --algo of `spattn run` that lets the cost model choose (schedule/cost_model.hpp: fastest_strategy).
inline constexpr const char* kAutoAlgorithm = "auto";

/// Options of `spattn run`, with their defaults.
struct RunOptions {
  std::string algorithm = "zigzag";  // one of all_algorithms() (spattn/distributed_attention.hpp), or "auto"
  std::string preset;                // the cluster model of --algo auto; "": nvswitch on cuda, cpu on cpu
  std::string network;               // --algo auto: the links across its nodes; "": the preset's
  bool causal = false;
  int nodes = 1;  // hamilton2: nodes; ranks per node = ranks / nodes
  int inner = 0;  // usp: Ulysses degree; 0: chosen by the strategy
  std::string across = "zigzag";  // usp: ring, zigzag or hamilton across the groups
  int64_t batch = 1;
  int64_t seq = 4096;  // global sequence length, split over the ranks
  int64_t heads = 8;
  int64_t kv_heads = 8;  // equals heads unless --kv-heads is given
  int64_t head_dim = 64;
  DType dtype = DType::f32;
  int64_t window_left = -1;  // -1: unbounded, as in AttentionOptions
  int64_t window_right = -1;
  std::vector<int64_t> document_lengths;  // --doc-lens: packed documents summing to seq; empty: one
  DocumentSplit document_split = DocumentSplit::per_document;  // --doc-split: how they split over ranks
  std::optional<float> scale;  // softmax scale; 1/sqrt(head_dim) when unset
  bool backward = false;
  bool check = false;  // compare against the fp64 reference and a single-rank run
  bool json = false;   // print one JSON object as the last line
  bool profile_steps = false;
  std::string timeline_path;  // --timeline: every rank's per-step timeline as CSV here; empty: none
  std::string inputs_dir;   // empty: generate inputs from the seed
  std::string outputs_dir;  // empty: write no outputs
  int iters = 1;
  int warmup = 0;
  uint64_t seed = kDefaultSeed;
  int threads = 0;  // CPU threads per rank; 0: chosen automatically
  std::string device = "cpu";      // cpu or cuda: where the shards live and the kernels run
  std::string transport = "auto";  // one of all_transports() (spattn/device_communicator.hpp)
  KernelChoice kernel = KernelChoice::automatic;  // the block kernels on cuda; only automatic on cpu
  bool deterministic = false;                     // AttentionOptions::deterministic
};

/// Options of `spattn plan`, with their defaults: the rotation schedule of one algorithm, or
/// with --compare the modelled cost of every strategy (src/schedule/cost_model.hpp).
struct PlanOptions {
  std::string algorithm = "hamilton";  // ring, zigzag, hamilton or hamilton2: the schedule shown
  int ranks = 0;                       // 0: every rank of the cluster
  int nodes = 0;                       // the cluster's (and hamilton2's) nodes; 0: as many as the ranks fill
  int gpus_per_node = 0;               // ranks per node; 0: the preset's
  int inner = 0;                       // usp's Ulysses degree; 0: the largest run would choose
  std::string across = "zigzag";       // usp's rotation across its groups: ring, zigzag or hamilton
  bool causal = false;
  int64_t window_left = -1;  // -1: unbounded, as in AttentionOptions
  int64_t window_right = -1;
  int64_t batch = 1;
  int64_t seq = 0;  // global sequence length; 0: kPlanTokensPerRank per rank
  int64_t heads = 32;
  int64_t kv_heads = 32;  // equals heads unless --kv-heads is given
  int64_t head_dim = 128;
  DType dtype = DType::bf16;
  std::string preset = "nvswitch";  // one of cluster_preset_names() (schedule/cost_model.hpp)
  std::string network;              // one of network_preset_names(); "": the preset's
  std::optional<double> tflops;     // kernel rate; the preset's when unset
  std::optional<double> intra_bandwidth;  // GB/s within a node; the preset's when unset
  std::optional<double> inter_bandwidth;  // GB/s across nodes; the preset's when unset
  std::optional<double> latency;          // microseconds per message, both link classes
  bool compare = false;
  bool json = false;
};

/// Tokens per rank of `spattn plan` when --seq is not given.
inline constexpr int64_t kPlanTokensPerRank = 8192;

/// A parsed command line.
struct CliCommand {
  enum class Kind { run, info, plan, help };
  Kind kind = Kind::help;
  RunOptions run;     // meaningful for Kind::run
  PlanOptions plan;   // meaningful for Kind::plan
  bool json = false;  // `spattn info --json`
};

/// Parses `argv` (argv[0] is the program name). Throws UsageError naming the option, the value
/// and what is allowed for an unknown command or option, a missing or malformed value, or an
/// impossible size. `--help` anywhere, `-h`, `help` or no arguments at all give Kind::help.
CliCommand parse_command_line(int argc, const char* const* argv);

/// The text of `spattn help`: commands, every option, and its default.
std::string usage_text();

}  // namespace spattn::app
