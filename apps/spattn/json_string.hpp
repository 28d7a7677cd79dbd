#pragma once
// Text as a JSON string, for the program's --json outputs.

#include <string>

namespace spattn::app {

/// `text` in double quotes, its quotes and backslashes escaped.
inline std::string json_string(const std::string& text) {
  std::string quoted = "\"";
  for (char character : text) {
    if (character == '"' || character == '\\') quoted += '\\';
    quoted += character;
  }
  return quoted + "\"";
}

}  // namespace spattn::app
