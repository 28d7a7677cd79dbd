#pragma once
// How the parser tests run the command line: parse words after the program name, and observe
// the UsageError or exit status main() would produce.

#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "cli_options.hpp"

namespace spattn::app {

inline CliCommand parse(const std::vector<std::string>& arguments) {
  std::vector<const char*> argv = {"spattn"};
  for (const std::string& argument : arguments) argv.push_back(argument.c_str());
  return parse_command_line(static_cast<int>(argv.size()), argv.data());
}

/// The message of the UsageError that parsing `arguments` throws (a test failure when none).
inline std::string usage_error(const std::vector<std::string>& arguments) {
  try {
    parse(arguments);
  } catch (const UsageError& error) {
    return error.what();
  }
  ADD_FAILURE() << "no UsageError";
  return "";
}

/// What main() does with the exceptions: 2 for a usage error, 1 for any other Error.
inline int exit_status(const std::function<void()>& action) {
  try {
    action();
  } catch (const UsageError&) {
    return 2;
  } catch (const Error&) {
    return 1;
  }
  return 0;
}

}  // namespace spattn::app
