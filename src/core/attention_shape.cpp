#include <sstream>

#include "spattn/attention_shape.hpp"

namespace spattn {

std::string shape_error(const AttentionShape& shape) {
  std::ostringstream error;
  if (shape.batch < 1) error << "batch must be at least 1, got " << shape.batch;
  else if (shape.seq < 1) error << "sequence length must be at least 1, got " << shape.seq;
  else if (shape.heads < 1) error << "heads must be at least 1, got " << shape.heads;
  else if (shape.kv_heads < 1) error << "kv_heads must be at least 1, got " << shape.kv_heads;
  else if (shape.heads % shape.kv_heads != 0)
    error << "heads (" << shape.heads << ") must be divisible by kv_heads (" << shape.kv_heads
          << "); every query head reads one kv head";
  else if (shape.head_dim < 1 || shape.head_dim > kMaxHeadDim)
    error << "head_dim " << shape.head_dim << " is not supported; allowed: 1 to " << kMaxHeadDim;
  return error.str();
}

}  // namespace spattn
