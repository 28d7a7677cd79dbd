#include "cli_options.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <iterator>
#include <sstream>
#include <vector>

#include "spattn/cost_model.hpp"
#include "spattn/device_communicator.hpp"
#include "spattn/distributed_attention.hpp"

namespace spattn::app {
namespace {

constexpr char kSeeHelp[] = "see 'spattn help'";

std::string algorithm_list(const std::vector<Algorithm>& algorithms = all_algorithms()) {
  std::string names;
  for (Algorithm algorithm : algorithms) names += (names.empty() ? "" : ", ") + algorithm_name(algorithm);
  return names;
}

std::string name_list(const std::vector<std::string>& names) {
  std::string list;
  for (const std::string& name : names) list += (list.empty() ? "" : ", ") + name;
  return list;
}

std::string preset_list() { return name_list(cluster_preset_names()); }

[[noreturn]] void fail_value(const std::string& option, const std::string& allowed, const std::string& value) {
  throw UsageError(option + " expects " + allowed + ", got '" + value + "'");
}

// The whole of `text` as an Integer: no sign other than '-', no spaces, no trailing characters.
template <typename Integer>
std::optional<Integer> parse_whole_integer(const std::string& text) {
  Integer value{};
  const char* end = text.data() + text.size();
  const auto [stop, error] = std::from_chars(text.data(), end, value);
  if (error != std::errc() || stop != end) return std::nullopt;
  return value;
}

template <typename Integer>
Integer parse_integer(const std::string& option, const std::string& text, Integer minimum,
                      const std::string& allowed) {
  const std::optional<Integer> value = parse_whole_integer<Integer>(text);
  if (!value || *value < minimum) fail_value(option, allowed, text);
  return *value;
}

int64_t parse_size(const std::string& option, const std::string& text) {
  return parse_integer<int64_t>(option, text, 1, "a positive integer");
}

int parse_count(const std::string& option, const std::string& text, int minimum) {
  return parse_integer<int>(option, text, minimum, minimum > 0 ? "a positive integer" : "an integer >= 0");
}

std::string parse_directory(const std::string& option, const std::string& path) {
  if (path.empty()) fail_value(option, "a directory", path);
  return path;
}

template <typename Options>
void parse_window(Options& options, const std::string& text) {
  const std::size_t comma = text.find(',');
  const std::optional<int64_t> left =
      comma == std::string::npos ? std::nullopt : parse_whole_integer<int64_t>(text.substr(0, comma));
  const std::optional<int64_t> right =
      comma == std::string::npos ? std::nullopt : parse_whole_integer<int64_t>(text.substr(comma + 1));
  if (!left || !right) fail_value("--window", "L,R with each an integer >= -1 (-1: unbounded), e.g. 128,0 or -1,-1", text);
  const std::string reason = window_error(*left, *right);
  if (!reason.empty()) throw UsageError("--window " + text + ": " + reason);
  options.window_left = *left;
  options.window_right = *right;
}

// --doc-lens L1,L2,...: document lengths, each an integer >= 1 (document_lengths_error).
void parse_document_lengths(RunOptions& options, const std::string& text) {
  const char* allowed = "document lengths L1,L2,... with each an integer >= 1, e.g. 4096,1024,3072";
  std::vector<int64_t> lengths;
  std::size_t begin = 0;
  while (begin <= text.size()) {
    const std::size_t comma = std::min(text.find(',', begin), text.size());
    const std::optional<int64_t> length = parse_whole_integer<int64_t>(text.substr(begin, comma - begin));
    if (!length) fail_value("--doc-lens", allowed, text);
    lengths.push_back(*length);
    begin = comma + 1;
  }
  const std::string reason = document_lengths_error(lengths);
  if (!reason.empty()) throw UsageError("--doc-lens " + text + ": " + reason);
  options.document_lengths = std::move(lengths);
}

// --doc-lens and --seq: the documents fill the sequence; without --seq, they give it.
void match_documents_and_seq(RunOptions& options, const std::vector<std::string>& arguments) {
  if (options.document_lengths.empty()) {
    if (options.document_split != DocumentSplit::per_document)
      throw UsageError("--doc-split " + document_split_name(options.document_split) +
                       " needs packed documents: give their lengths with --doc-lens");
    return;
  }
  int64_t tokens = 0;
  for (int64_t length : options.document_lengths) tokens += length;
  const bool seq_given = std::any_of(arguments.begin(), arguments.end(),
                                     [](const std::string& argument) { return argument.rfind("--seq", 0) == 0; });
  if (seq_given && options.seq != tokens)
    throw UsageError("--doc-lens sums to " + std::to_string(tokens) + " tokens but --seq is " +
                     std::to_string(options.seq) + "; the documents fill the sequence (leave --seq out to take their sum)");
  options.seq = tokens;
}

template <typename Real>
Real parse_positive_real(const std::string& option, const std::string& text) {
  Real value = 0;
  const char* end = text.data() + text.size();
  const auto [stop, error] = std::from_chars(text.data(), end, value);
  if (error != std::errc() || stop != end || !std::isfinite(value) || value <= 0) {
    fail_value(option, "a finite number > 0", text);
  }
  return value;
}

// --across of run and plan: usp's rotation across its groups.
template <typename Options>
void parse_across(Options& options, const std::string& name) {
  if (name != "ring" && name != "zigzag" && name != "hamilton")
    throw UsageError("unknown --across '" + name + "'; allowed: ring, zigzag, hamilton");
  options.across = name;
}

void parse_device(RunOptions& options, const std::string& name) {
  if (name != "cpu" && name != "cuda") fail_value("--device", "cpu or cuda", name);
  options.device = name;
}

template <typename Options>
void parse_preset(Options& options, const std::string& name) {
  const auto& names = cluster_preset_names();
  if (std::find(names.begin(), names.end(), name) == names.end()) {
    fail_value("--preset", "one of " + preset_list(), name);
  }
  options.preset = name;
}

template <typename Options>
void parse_network(Options& options, const std::string& name) {
  const auto& names = network_preset_names();
  if (std::find(names.begin(), names.end(), name) == names.end()) {
    fail_value("--network", "one of " + name_list(names), name);
  }
  options.network = name;
}

void parse_algorithm(RunOptions& options, const std::string& name) {
  const auto& algorithms = all_algorithms();
  const bool known = name == kAutoAlgorithm ||
                     std::any_of(algorithms.begin(), algorithms.end(),
                                 [&](Algorithm algorithm) { return algorithm_name(algorithm) == name; });
  if (!known) throw UsageError("unknown --algo '" + name + "'; allowed: " + algorithm_list() + ", " + kAutoAlgorithm);
  options.algorithm = name;
}

// `parse(text)` of the library, its Error turned into a UsageError of `option`: the library's
// list of allowed spellings is reused, without its kErrorPrefix so that it is not repeated.
template <typename Parse>
auto parse_with_library(const char* option, Parse&& parse, const std::string& text) {
  try {
    return parse(text);
  } catch (const Error& error) {
    throw UsageError(std::string(option) + ": " + without_error_prefix(error.what()));
  }
}

DType parse_dtype_option(const std::string& name) { return parse_with_library("--dtype", parse_dtype, name); }

void parse_transport_option(RunOptions& options, const std::string& name) {
  options.transport = transport_name(parse_with_library("--transport", parse_transport, name));
}

void parse_kernel_option(RunOptions& options, const std::string& name) {
  options.kernel = parse_with_library("--kernel", parse_kernel_choice, name);
}

void parse_document_split_option(RunOptions& options, const std::string& name) {
  options.document_split = parse_with_library("--doc-split", parse_document_split, name);
}

// One option of a command: what it is called, what it does, and how it sets the command's
// options (RunOptions or PlanOptions).
template <typename Options>
struct CommandOption {
  const char* name;
  const char* value_name;  // shown in the usage text; nullptr for a flag, which takes no value
  std::string description;
  void (*apply)(Options& options, const std::string& value);
};

template <typename Options>
using OptionTable = std::vector<CommandOption<Options>>;

template <typename Options>
OptionTable<Options> concatenated(std::initializer_list<OptionTable<Options>> parts) {
  OptionTable<Options> table;
  for (const OptionTable<Options>& part : parts) table.insert(table.end(), part.begin(), part.end());
  return table;
}

// The options that give the mask, alike in run and plan.
template <typename Options>
OptionTable<Options> mask_options() {
  return {
      {"--causal", nullptr, "causal mask: query i sees keys j <= i",
       [](Options& options, const std::string&) { options.causal = true; }},
      {"--window", "L,R", "sliding window: query i sees keys i-L..i+R; each >= -1, -1 unbounded (default -1,-1)",
       [](Options& options, const std::string& value) { parse_window(options, value); }},
  };
}

// The options that give the attention shape, alike in every command that takes one.
template <typename Options>
OptionTable<Options> shape_options(const std::string& seq_description) {
  const Options defaults;
  return {
      {"--batch", "B", "batch size (default " + std::to_string(defaults.batch) + ")",
       [](Options& options, const std::string& value) { options.batch = parse_size("--batch", value); }},
      {"--seq", "S", seq_description,
       [](Options& options, const std::string& value) { options.seq = parse_size("--seq", value); }},
      {"--heads", "H", "query heads (default " + std::to_string(defaults.heads) + ")",
       [](Options& options, const std::string& value) { options.heads = parse_size("--heads", value); }},
      {"--kv-heads", "HK", "key/value heads, dividing H (default H)",
       [](Options& options, const std::string& value) { options.kv_heads = parse_size("--kv-heads", value); }},
      {"--head-dim", "D", "head dimension (default " + std::to_string(defaults.head_dim) + ")",
       [](Options& options, const std::string& value) { options.head_dim = parse_size("--head-dim", value); }},
      {"--dtype", "T", "element type: fp32, fp16 or bf16 (default " + dtype_name(defaults.dtype) + "; bf16 on cuda)",
       [](Options& options, const std::string& value) { options.dtype = parse_dtype_option(value); }},
  };
}

const OptionTable<RunOptions>& run_option_table() {
  const RunOptions defaults;
  static const OptionTable<RunOptions> table = concatenated<RunOptions>({
      {{"--algo", "NAME",
        "strategy: " + algorithm_list() + ", or " + kAutoAlgorithm +
            " (the fastest in spattn plan --compare's model of this shape on --preset) (default " +
            defaults.algorithm + ")",
        [](RunOptions& options, const std::string& value) { parse_algorithm(options, value); }},
       {"--nodes", "U", "hamilton2: nodes, of N/U ranks each (default 1)",
        [](RunOptions& options, const std::string& value) { options.nodes = parse_count("--nodes", value, 1); }},
       {"--inner", "N1", "usp: Ulysses degree, ranks per group (default: the largest dividing N, H and HK)",
        [](RunOptions& options, const std::string& value) { options.inner = parse_count("--inner", value, 1); }},
       {"--across", "NAME", "usp: ring, zigzag or hamilton across the groups (default zigzag)",
        [](RunOptions& options, const std::string& value) { parse_across(options, value); }},
       {"--preset", "NAME",
        "--algo auto: the cluster the cost model prices, " + preset_list() + " (default nvswitch on cuda, cpu on cpu)",
        [](RunOptions& options, const std::string& value) { parse_preset(options, value); }},
       {"--network", "NAME", "--algo auto: the links across nodes, " + name_list(network_preset_names()) +
                                 " (default: the preset's)",
        [](RunOptions& options, const std::string& value) { parse_network(options, value); }}},
      mask_options<RunOptions>(),
      shape_options<RunOptions>("global sequence length, split over the ranks (default " +
                                std::to_string(defaults.seq) + ")"),
      {{"--doc-lens", "L1,L2,...",
        "packed documents, their lengths summing to --seq (which they give when it is left out): a query sees only "
        "its own document; each document is split over the ranks (padded where it does not split); every "
        "strategy but stripe (usp: over its groups) (default: one document)",
        [](RunOptions& options, const std::string& value) { parse_document_lengths(options, value); }},
       {"--doc-split", "NAME",
        "with --doc-lens, how the documents split over the ranks: per_document (default: each on its own, "
        "balanced) or whole_sequence (the packed sequence cut contiguously as one, Llama 3's; allgather only)",
        [](RunOptions& options, const std::string& value) { parse_document_split_option(options, value); }},
       {"--scale", "X", "softmax scale, finite and > 0 (default 1/sqrt(D))",
       [](RunOptions& options, const std::string& value) {
         options.scale = parse_positive_real<float>("--scale", value);
       }},
      {"--backward", nullptr, "also run the backward pass",
       [](RunOptions& options, const std::string&) { options.backward = true; }},
      {"--check", nullptr, "compare against the fp64 reference and a single-rank run",
       [](RunOptions& options, const std::string&) { options.check = true; }},
      {"--inputs", "DIR", "read the input tensors (.npy) from DIR instead of generating them",
       [](RunOptions& options, const std::string& value) { options.inputs_dir = parse_directory("--inputs", value); }},
      {"--outputs", "DIR", "write the output tensors (.npy) to DIR",
       [](RunOptions& options, const std::string& value) { options.outputs_dir = parse_directory("--outputs", value); }},
      {"--iters", "N", "timed iterations (default " + std::to_string(defaults.iters) + ")",
       [](RunOptions& options, const std::string& value) { options.iters = parse_count("--iters", value, 1); }},
      {"--warmup", "N", "untimed iterations before them (default " + std::to_string(defaults.warmup) + ")",
       [](RunOptions& options, const std::string& value) { options.warmup = parse_count("--warmup", value, 0); }},
      {"--seed", "N", "seed of the generated inputs (default " + std::to_string(defaults.seed) + ")",
       [](RunOptions& options, const std::string& value) {
         options.seed = parse_integer<uint64_t>("--seed", value, 0, "an integer >= 0");
       }},
      {"--json", nullptr, "print one JSON object as the last line",
       [](RunOptions& options, const std::string&) { options.json = true; }},
      {"--profile-steps", nullptr, "print a table of per-step timings",
       [](RunOptions& options, const std::string&) { options.profile_steps = true; }},
      {"--timeline", "FILE",
       "write every rank's timeline of the last timed call to FILE as CSV: each step's compute and the time it "
       "stood waiting for transfers, on the device's clock (bench/plot_timeline.py draws it)",
       [](RunOptions& options, const std::string& value) {
         if (value.empty()) fail_value("--timeline", "a file path", value);
         options.timeline_path = value;
       }},
      {"--threads", "N", "CPU threads per rank (default: automatic)",
       [](RunOptions& options, const std::string& value) { options.threads = parse_count("--threads", value, 1); }},
      {"--device", "KIND", "cpu or cuda (bf16/fp16; a machine's ranks are dealt over its GPUs) (default cpu)",
       [](RunOptions& options, const std::string& value) { parse_device(options, value); }},
      {"--transport", "NAME",
       "auto, mpi, oneccl, nccl or staged-mpi (default auto: mpi on cpu, where oneccl is the other choice, and "
       "oneccl in a job started without mpirun; on cuda nccl when every rank has a GPU of its own, else staged-mpi)",
       [](RunOptions& options, const std::string& value) { parse_transport_option(options, value); }},
      {"--kernel", "NAME",
       "block kernels on cuda: auto (own Hopper kernels where they run the call, else cuDNN), own (an error where "
       "they cannot) or cudnn; cpu takes only auto (default auto)",
       [](RunOptions& options, const std::string& value) { parse_kernel_option(options, value); }},
      {"--deterministic", nullptr,
       "the same bits every run: on cuda the backward adds dq in one order (slower; cpu always does)",
       [](RunOptions& options, const std::string&) { options.deterministic = true; }}},
  });
  return table;
}

void parse_plan_algorithm(PlanOptions& options, const std::string& name) {
  const auto& algorithms = rotation_algorithms();
  const bool rotates = std::any_of(algorithms.begin(), algorithms.end(),
                                   [&](Algorithm algorithm) { return algorithm_name(algorithm) == name; });
  if (!rotates) {
    fail_value("--algo", "a rotation schedule: " + algorithm_list(algorithms) + " (--compare shows every strategy)",
               name);
  }
  options.algorithm = name;
}

const OptionTable<PlanOptions>& plan_option_table() {
  const PlanOptions defaults;
  static const OptionTable<PlanOptions> table = concatenated<PlanOptions>({
      {{"--algo", "NAME",
        "schedule to show: " + algorithm_list(rotation_algorithms()) + " (default " + defaults.algorithm + ")",
        [](PlanOptions& options, const std::string& value) { parse_plan_algorithm(options, value); }},
       {"--ranks", "N", "ranks, 1 or more (default: every rank of --nodes, or one node)",
        [](PlanOptions& options, const std::string& value) {
          options.ranks = parse_integer<int>("--ranks", value, 1, "an integer >= 1");
        }},
       {"--nodes", "U", "nodes of the cluster, ranks filling them in order; hamilton2 groups by them (default: as many "
                        "as N needs)",
        [](PlanOptions& options, const std::string& value) { options.nodes = parse_count("--nodes", value, 1); }},
       {"--gpus-per-node", "G", "ranks per node (default: the preset's, 8)",
        [](PlanOptions& options, const std::string& value) {
          options.gpus_per_node = parse_count("--gpus-per-node", value, 1);
        }},
       {"--inner", "N1", "usp: Ulysses degree, ranks per group (default: the largest dividing N, H and HK, as run)",
        [](PlanOptions& options, const std::string& value) { options.inner = parse_count("--inner", value, 1); }},
       {"--across", "NAME", "usp: ring, zigzag or hamilton across the groups (default zigzag)",
        [](PlanOptions& options, const std::string& value) { parse_across(options, value); }}},
      mask_options<PlanOptions>(),
      shape_options<PlanOptions>("global sequence length (default " + std::to_string(kPlanTokensPerRank) +
                                 " per rank)"),
      {{"--preset", "NAME", "cluster: " + preset_list() + " (default " + defaults.preset + "; see below)",
        [](PlanOptions& options, const std::string& value) { parse_preset(options, value); }},
       {"--network", "NAME", "links across nodes: " + name_list(network_preset_names()) + " (default: the preset's)",
        [](PlanOptions& options, const std::string& value) { parse_network(options, value); }},
       {"--tflops", "R", "attention kernel rate in TFLOP/s (default: the preset's)",
        [](PlanOptions& options, const std::string& value) {
          options.tflops = parse_positive_real<double>("--tflops", value);
        }},
       {"--intra-bandwidth", "GBPS", "within a node: GB/s per rank on a switch, per link on a mesh (default: the preset's)",
        [](PlanOptions& options, const std::string& value) {
          options.intra_bandwidth = parse_positive_real<double>("--intra-bandwidth", value);
        }},
       {"--inter-bandwidth", "GBPS", "across nodes: GB/s per rank (default: the preset's)",
        [](PlanOptions& options, const std::string& value) {
          options.inter_bandwidth = parse_positive_real<double>("--inter-bandwidth", value);
        }},
       {"--latency", "US", "microseconds per message, within and across nodes (default: the preset's)",
        [](PlanOptions& options, const std::string& value) {
          options.latency = parse_positive_real<double>("--latency", value);
        }},
       {"--compare", nullptr, "the modelled time of every strategy side by side",
        [](PlanOptions& options, const std::string&) { options.compare = true; }},
       {"--json", nullptr, "print one JSON object",
        [](PlanOptions& options, const std::string&) { options.json = true; }}},
  });
  return table;
}

// One argument split into the option's name and, in the --name=value form, its value.
struct SplitArgument {
  std::string name;
  std::optional<std::string> attached_value;
};

SplitArgument split_argument(const std::string& argument) {
  const std::size_t equals = argument.find('=');
  if (argument.rfind("--", 0) != 0 || equals == std::string::npos) return {argument, std::nullopt};
  return {argument.substr(0, equals), argument.substr(equals + 1)};
}

// The options of `spattn <command>`, which takes a shape (--kv-heads defaults to --heads).
template <typename Options>
Options parse_options(const OptionTable<Options>& specs, const std::string& command,
                      const std::vector<std::string>& arguments) {
  Options options;
  // 0 marks "not given": --kv-heads must be positive, so it cannot be confused with a value.
  options.kv_heads = 0;
  for (std::size_t i = 0; i < arguments.size(); ++i) {
    const SplitArgument argument = split_argument(arguments[i]);
    const auto spec = std::find_if(specs.begin(), specs.end(), [&](const CommandOption<Options>& option) {
      return argument.name == option.name;
    });
    if (spec == specs.end()) {
      const char* kind = argument.name.rfind("-", 0) == 0 ? "unknown option" : "unexpected argument";
      throw UsageError(std::string(kind) + " '" + argument.name + "' for 'spattn " + command + "'; " + kSeeHelp);
    }
    if (spec->value_name == nullptr) {
      if (argument.attached_value) {
        throw UsageError(std::string(spec->name) + " takes no value, got '" + arguments[i] + "'");
      }
      spec->apply(options, "");
      continue;
    }
    if (argument.attached_value) {
      spec->apply(options, *argument.attached_value);
      continue;
    }
    // A following option means the value was forgotten; --name=--value still passes such a value.
    if (i + 1 == arguments.size() || arguments[i + 1].rfind("--", 0) == 0) {
      throw UsageError(std::string("missing value after ") + spec->name + "; usage: " + spec->name + " " +
                       spec->value_name);
    }
    spec->apply(options, arguments[++i]);
  }
  if (options.kv_heads == 0) options.kv_heads = options.heads;
  return options;
}

bool parse_info_options(const std::vector<std::string>& arguments) {
  bool json = false;
  for (const std::string& argument : arguments) {
    if (argument != "--json") {
      throw UsageError("unknown option '" + argument + "' for 'spattn info' (it takes only --json); " + kSeeHelp);
    }
    json = true;
  }
  return json;
}

std::string option_line(const std::string& usage, const std::string& description) {
  constexpr std::size_t kDescriptionColumn = 22;
  const std::string indented = "  " + usage;
  return indented + std::string(std::max<std::size_t>(kDescriptionColumn, indented.size() + 2) - indented.size(), ' ') +
         description + "\n";
}

template <typename Options>
std::string option_lines(const OptionTable<Options>& table) {
  std::string lines;
  for (const CommandOption<Options>& option : table) {
    const std::string usage = std::string(option.name) + (option.value_name ? std::string(" ") + option.value_name : "");
    lines += option_line(usage, option.description);
  }
  return lines + option_line("--help", "print this text");
}

bool asks_for_help(const std::string& argument) { return argument == "--help" || argument == "-h"; }

// On the CPU the library's rule for a kernel choice (block_kernels_unsupported) needs nothing
// but the options, so a choice it refuses there is a mistake of the command line. On CUDA it
// depends on each rank's GPU: the plan checks it on every rank.
void check_kernel_for_device(const RunOptions& options) {
  if (options.device != "cpu") return;
  const std::string reason = block_kernels_unsupported(Device::cpu(), options.kernel, options.dtype, options.head_dim);
  if (!reason.empty())
    throw UsageError("--kernel " + kernel_choice_name(options.kernel) + " with --device cpu: " + reason);
}

// The CUDA kernels take no fp32 (input_dtype_unsupported): on cuda the element type defaults to
// bf16, and a given fp32 is a mistake of the command line.
void choose_device_dtype(RunOptions& options, const std::vector<std::string>& arguments) {
  if (options.device != "cuda") return;
  const bool dtype_given = std::any_of(arguments.begin(), arguments.end(),
                                       [](const std::string& argument) { return argument.rfind("--dtype", 0) == 0; });
  if (!dtype_given) options.dtype = DType::bf16;
  const std::string reason = input_dtype_unsupported(DeviceKind::cuda, options.dtype);
  if (!reason.empty()) throw UsageError("--device cuda with --dtype " + dtype_name(options.dtype) + ": " + reason);
}

}  // namespace

CliCommand parse_command_line(int argc, const char* const* argv) {
  const std::vector<std::string> arguments(argv + std::min(argc, 1), argv + std::max(argc, 0));
  CliCommand command;
  if (arguments.empty() || std::any_of(arguments.begin(), arguments.end(), asks_for_help)) {
    command.kind = CliCommand::Kind::help;
    return command;
  }
  const std::string& name = arguments.front();
  const std::vector<std::string> options(arguments.begin() + 1, arguments.end());
  if (name == "run") {
    command.kind = CliCommand::Kind::run;
    command.run = parse_options(run_option_table(), name, options);
    match_documents_and_seq(command.run, options);
    choose_device_dtype(command.run, options);
    check_kernel_for_device(command.run);
  } else if (name == "plan") {
    command.kind = CliCommand::Kind::plan;
    command.plan = parse_options(plan_option_table(), name, options);
  } else if (name == "info") {
    command.kind = CliCommand::Kind::info;
    command.json = parse_info_options(options);
  } else if (name == "help") {
    if (!options.empty()) throw UsageError("'spattn help' takes no arguments, got '" + options.front() + "'");
    command.kind = CliCommand::Kind::help;
  } else {
    throw UsageError("unknown command '" + name + "'; allowed: run, info, plan, help; " + kSeeHelp);
  }
  return command;
}

std::string usage_text() {
  std::ostringstream text;
  text << "usage: spattn <command> [options]\n"
          "       mpirun -n P spattn run [options]\n"
          "       torchrun --nproc-per-node P --no-python spattn run [options]\n\n"
          "A job started without mpirun (torchrun, or P processes of a shell loop) takes its ranks from torchrun's\n"
          "variables RANK (0..P-1), WORLD_SIZE (P), MASTER_ADDR and MASTER_PORT (where rank 0 listens) and runs on\n"
          "cpu over oneccl; under mpirun those variables are ignored.\n\n"
          "commands:\n"
       << option_line("run", "compute exact attention over the ranks and report time (and errors with --check)")
       << option_line("info", "print how spattn was built and what this machine offers")
       << option_line("plan", "print a rotation schedule (cycles, routing tables, bytes per link; exit 1 with")
       << option_line("", "run's message where run would refuse the shape), or with --compare the")
       << option_line("", "modelled time of every strategy for a shape and a cluster")
       << option_line("help", "print this text (also: --help, -h)")
       << "\noptions of 'spattn run' (--name value or --name=value):\n"
       << option_lines(run_option_table()) << "\noptions of 'spattn info':\n"
       << option_line("--json", "print one JSON object as the last line")
       << "\noptions of 'spattn plan' (no ranks needed; it runs no attention):\n"
       << option_lines(plan_option_table())
       << "presets of --preset (src/schedule/cost_model.hpp):\n";
  for (const std::string& preset : cluster_preset_names()) {
    text << option_line(preset, cluster_summary(cluster_preset(preset)));
  }
  text << "networks of --network (across nodes, per rank):\n";
  for (const std::string& network : network_preset_names()) {
    const LinkCost link = network_preset(network);
    std::ostringstream figures;
    figures << link.bandwidth / 1e9 << " GB/s, " << link.latency * 1e6 << " us per message";
    text << option_line(network, figures.str());
  }
  return text.str();
}

}  // namespace spattn::app
