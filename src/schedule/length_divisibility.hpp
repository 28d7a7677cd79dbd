#pragma once
// The one wording of "this length does not split", with the nearest lengths that do.

#include <cstdint>
#include <sstream>
#include <string>

namespace spattn {

/// "<what_fails>: it must be a positive multiple of <what_multiple><multiple>; nearest valid
/// lengths: <lower> or <upper>" (the lower one only when positive).
inline std::string not_a_multiple(const std::string& what_fails, const std::string& what_multiple, int64_t length,
                                  int64_t multiple) {
  const int64_t lower = length / multiple * multiple;
  std::ostringstream reason;
  reason << what_fails << ": it must be a positive multiple of " << what_multiple << multiple
         << "; nearest valid lengths: ";
  if (lower > 0) reason << lower << " or ";
  reason << lower + multiple;
  return reason.str();
}

}  // namespace spattn
