#include "schedule/ulysses_degree.hpp"

#include <sstream>

namespace spattn {

bool valid_ulysses_degree(int ranks, int inner, const AttentionShape& shape) {
  return inner >= 1 && ranks % inner == 0 && shape.heads % inner == 0 && shape.kv_heads % inner == 0;
}

int resolved_ulysses_degree(int ranks, int inner, const AttentionShape& shape) {
  if (inner != 0) return inner;
  int largest = 1;
  for (int degree = 1; degree <= ranks; ++degree)
    if (valid_ulysses_degree(ranks, degree, shape)) largest = degree;
  return largest;
}

std::string ulysses_degree_error(int ranks, int inner, const AttentionShape& shape) {
  if (valid_ulysses_degree(ranks, inner, shape)) return "";
  std::ostringstream message;
  message << "usp: inner (" << inner << ") must be at least 1 and divide ranks (" << ranks << "), heads ("
          << shape.heads << ") and kv_heads (" << shape.kv_heads << "); valid inner values here:";
  for (int degree = 1; degree <= ranks; ++degree)
    if (valid_ulysses_degree(ranks, degree, shape)) message << " " << degree;
  message << " (0 chooses the largest)";
  return message.str();
}

}  // namespace spattn
