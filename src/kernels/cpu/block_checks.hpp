#pragma once
// Shape, dtype and device checks of attention blocks, with the sizes they agree on.

#include <cstdint>

#include "kernels/block_kernels.hpp"

namespace spattn::cpu {

/// The sizes every tensor of a block agrees on.
struct BlockShape {
  int64_t batch = 0;
  int64_t query_rows = 0;
  int64_t heads = 0;
  int64_t kv_heads = 0;
  int64_t head_dim = 0;

  /// Query heads that read one kv head (GQA group size).
  int64_t heads_per_kv_head() const { return heads / kv_heads; }
};

/// Throws Error naming the offending tensor unless the block is a valid CPU forward block.
BlockShape check_forward_block(const ForwardBlock& block);

/// Throws Error naming the offending tensor unless the block is a valid CPU backward block.
BlockShape check_backward_block(const BackwardBlock& block);

}  // namespace spattn::cpu
