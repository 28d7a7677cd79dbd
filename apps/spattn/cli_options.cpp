#include "cli_options.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <iterator>
#include <sstream>
#include <string_view>
#include <vector>

#include "spattn/distributed_attention.hpp"

namespace spattn::app {
namespace {

constexpr char kSeeHelp[] = "see 'spattn help'";

std::string algorithm_list() {
  std::string names;
  for (Algorithm algorithm : all_algorithms()) names += (names.empty() ? "" : ", ") + algorithm_name(algorithm);
  return names;
}

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

void parse_window(RunOptions& options, const std::string& text) {
  const std::size_t comma = text.find(',');
  const std::optional<int64_t> left =
      comma == std::string::npos ? std::nullopt : parse_whole_integer<int64_t>(text.substr(0, comma));
  const std::optional<int64_t> right =
      comma == std::string::npos ? std::nullopt : parse_whole_integer<int64_t>(text.substr(comma + 1));
  if (!left || !right || *left < -1 || *right < -1) {
    fail_value("--window", "L,R with each an integer >= -1 (-1: unbounded), e.g. 128,0 or -1,-1", text);
  }
  options.window_left = *left;
  options.window_right = *right;
}

float parse_scale(const std::string& text) {
  float value = 0.0f;
  const char* end = text.data() + text.size();
  const auto [stop, error] = std::from_chars(text.data(), end, value);
  if (error != std::errc() || stop != end || !std::isfinite(value) || value <= 0.0f) {
    fail_value("--scale", "a finite number > 0", text);
  }
  return value;
}

void parse_algorithm(RunOptions& options, const std::string& name) {
  const auto& algorithms = all_algorithms();
  const bool known = std::any_of(algorithms.begin(), algorithms.end(),
                                 [&](Algorithm algorithm) { return algorithm_name(algorithm) == name; });
  if (!known) throw UsageError("unknown --algo '" + name + "'; allowed: " + algorithm_list());
  options.algorithm = name;
}

DType parse_dtype_option(const std::string& name) {
  try {
    return parse_dtype(name);
  } catch (const Error& error) {
    // Reuse the library's list of spellings; drop its "spattn: " so that it is not repeated.
    const std::string_view message = error.what();
    const std::string_view prefix = "spattn: ";
    throw UsageError("--dtype: " + std::string(message.substr(message.rfind(prefix, 0) == 0 ? prefix.size() : 0)));
  }
}

// One option of `spattn run`: what it is called, what it does, and how it sets RunOptions.
struct RunOption {
  const char* name;
  const char* value_name;  // shown in the usage text; nullptr for a flag, which takes no value
  std::string description;
  void (*apply)(RunOptions& options, const std::string& value);
};

const std::vector<RunOption>& run_option_table() {
  const RunOptions defaults;
  static const std::vector<RunOption> table = {
      {"--algo", "NAME", "strategy: " + algorithm_list() + " (default " + defaults.algorithm + ")",
       [](RunOptions& options, const std::string& value) { parse_algorithm(options, value); }},
      {"--causal", nullptr, "causal mask: query i sees keys j <= i",
       [](RunOptions& options, const std::string&) { options.causal = true; }},
      {"--batch", "B", "batch size (default " + std::to_string(defaults.batch) + ")",
       [](RunOptions& options, const std::string& value) { options.batch = parse_size("--batch", value); }},
      {"--seq", "S", "global sequence length, split over the ranks (default " + std::to_string(defaults.seq) + ")",
       [](RunOptions& options, const std::string& value) { options.seq = parse_size("--seq", value); }},
      {"--heads", "H", "query heads (default " + std::to_string(defaults.heads) + ")",
       [](RunOptions& options, const std::string& value) { options.heads = parse_size("--heads", value); }},
      {"--kv-heads", "HK", "key/value heads, dividing H (default H)",
       [](RunOptions& options, const std::string& value) { options.kv_heads = parse_size("--kv-heads", value); }},
      {"--head-dim", "D", "head dimension (default " + std::to_string(defaults.head_dim) + ")",
       [](RunOptions& options, const std::string& value) { options.head_dim = parse_size("--head-dim", value); }},
      {"--dtype", "T", "element type: fp32, fp16 or bf16 (default " + dtype_name(defaults.dtype) + ")",
       [](RunOptions& options, const std::string& value) { options.dtype = parse_dtype_option(value); }},
      {"--window", "L,R", "sliding window: query i sees keys i-L..i+R; each >= -1, -1 unbounded (default -1,-1)",
       [](RunOptions& options, const std::string& value) { parse_window(options, value); }},
      {"--scale", "X", "softmax scale, finite and > 0 (default 1/sqrt(D))",
       [](RunOptions& options, const std::string& value) { options.scale = parse_scale(value); }},
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
      {"--threads", "N", "CPU threads per rank (default: automatic)",
       [](RunOptions& options, const std::string& value) { options.threads = parse_count("--threads", value, 1); }},
  };
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

RunOptions parse_run_options(const std::vector<std::string>& arguments) {
  RunOptions options;
  // 0 marks "not given": --kv-heads must be positive, so it cannot be confused with a value.
  options.kv_heads = 0;
  for (std::size_t i = 0; i < arguments.size(); ++i) {
    const SplitArgument argument = split_argument(arguments[i]);
    const auto& specs = run_option_table();
    const auto spec = std::find_if(specs.begin(), specs.end(),
                                   [&](const RunOption& option) { return argument.name == option.name; });
    if (spec == specs.end()) {
      const char* kind = argument.name.rfind("-", 0) == 0 ? "unknown option" : "unexpected argument";
      throw UsageError(std::string(kind) + " '" + argument.name + "' for 'spattn run'; " + kSeeHelp);
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

bool asks_for_help(const std::string& argument) { return argument == "--help" || argument == "-h"; }

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
    command.run = parse_run_options(options);
  } else if (name == "info") {
    command.kind = CliCommand::Kind::info;
    command.json = parse_info_options(options);
  } else if (name == "help") {
    if (!options.empty()) throw UsageError("'spattn help' takes no arguments, got '" + options.front() + "'");
    command.kind = CliCommand::Kind::help;
  } else {
    throw UsageError("unknown command '" + name + "'; allowed: run, info, help; " + kSeeHelp);
  }
  return command;
}

std::string usage_text() {
  constexpr std::size_t kDescriptionColumn = 22;
  const auto option_line = [&](const std::string& usage, const std::string& description) {
    const std::string indented = "  " + usage;
    return indented + std::string(std::max<std::size_t>(kDescriptionColumn, indented.size() + 2) - indented.size(), ' ') +
           description + "\n";
  };
  std::ostringstream text;
  text << "usage: spattn <command> [options]\n"
          "       mpirun -n P spattn run [options]\n\n"
          "commands:\n"
       << option_line("run", "compute exact attention over the ranks and report time (and errors with --check)")
       << option_line("info", "print how spattn was built and what this machine offers")
       << option_line("help", "print this text (also: --help, -h)")
       << "\noptions of 'spattn run' (--name value or --name=value):\n";
  for (const RunOption& option : run_option_table()) {
    const std::string usage = std::string(option.name) + (option.value_name ? std::string(" ") + option.value_name : "");
    text << option_line(usage, option.description);
  }
  text << option_line("--help", "print this text") << "\noptions of 'spattn info':\n"
       << option_line("--json", "print one JSON object as the last line");
  return text.str();
}

}  // namespace spattn::app
