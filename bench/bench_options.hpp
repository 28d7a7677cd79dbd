#pragma once
// The command-line values the GPU benchmarks share: comma-separated lists.

#include <cstdint>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include "spattn/error.hpp"

namespace spattn {

/// "a,b,,c" -> {"a", "b", "c"}.
inline std::vector<std::string> split_list(const std::string& text) {
  std::vector<std::string> items;
  std::stringstream stream(text);
  for (std::string item; std::getline(stream, item, ',');)
    if (!item.empty()) items.push_back(item);
  return items;
}

/// Positive integers separated by commas, the value of `flag`; throws Error naming both otherwise.
inline std::vector<int64_t> parse_counts(const std::string& flag, const std::string& text) {
  std::vector<int64_t> counts;
  for (const std::string& item : split_list(text)) {
    char* end = nullptr;
    const long long value = std::strtoll(item.c_str(), &end, 10);
    SPATTN_CHECK(end && *end == '\0' && value > 0,
                 flag << " expects positive integers separated by commas, got '" << text << "'");
    counts.push_back(value);
  }
  SPATTN_CHECK(!counts.empty(), flag << " expects at least one value");
  return counts;
}

}  // namespace spattn
