// libFuzzer target for the command line parser (apps/spattn/cli_options.cpp): the input becomes
// an argv after the program name, split at NUL bytes when it has any (so that arguments may hold
// spaces) and at whitespace otherwise. Any command line must parse or throw spattn::Error (a
// UsageError), never crash, hang, leak or invoke undefined behaviour; what parses must be in range.

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "cli_options.hpp"
#include "spattn/error.hpp"

namespace {

std::vector<std::string> split_arguments(const char* text, std::size_t size) {
  const bool has_nul = std::memchr(text, '\0', size) != nullptr;
  const auto separates = [has_nul](char c) {
    return has_nul ? c == '\0' : c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
  };
  std::vector<std::string> arguments;
  std::string current;
  for (std::size_t i = 0; i < size; ++i) {
    if (!separates(text[i])) {
      current.push_back(text[i]);
      continue;
    }
    // Between NULs an empty argument is a real one (""); runs of whitespace separate once.
    if (has_nul || !current.empty()) arguments.push_back(current);
    current.clear();
  }
  if (!current.empty()) arguments.push_back(current);
  return arguments;
}

// What the parser promises of a run it accepts (the library validates the rest at the call).
bool in_range(const spattn::app::RunOptions& run) {
  return run.batch >= 1 && run.seq >= 1 && run.heads >= 1 && run.kv_heads >= 1 && run.head_dim >= 1 &&
         run.window_left >= -1 && run.window_right >= -1 && run.iters >= 1 && run.warmup >= 0 && run.threads >= 0 &&
         (!run.scale || (std::isfinite(*run.scale) && *run.scale > 0));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  const std::vector<std::string> arguments = split_arguments(reinterpret_cast<const char*>(data), size);
  std::vector<const char*> argv = {"spattn"};
  for (const std::string& argument : arguments) argv.push_back(argument.c_str());
  try {
    const spattn::app::CliCommand command = spattn::app::parse_command_line(static_cast<int>(argv.size()), argv.data());
    if (command.kind == spattn::app::CliCommand::Kind::run && !in_range(command.run)) std::abort();
  } catch (const spattn::Error&) {
    // A usage error: the expected outcome for most inputs.
  }
  return 0;
}
