#pragma once
// Which blocks a rank computes at each step of ring attention, as pure functions of the layout
// and the mask: at step s rank r holds the keys and values of rank (r - s) mod N, and pairs each
// of its query chunks with the key chunks of that rank it can see.

#include <vector>

#include "spattn/attention_options.hpp"
#include "spattn/sequence_layout.hpp"

namespace spattn {

/// A query chunk and the key chunks it sees at one step (in the order they sit in the holder's
/// shard). Under a causal zigzag layout every block of a step > 0 is fully visible.
struct RingStepBlock {
  SequenceChunk queries;
  std::vector<SequenceChunk> keys;
};

/// The rank whose keys and values rank `rank` holds at `step`.
int ring_source_rank(int rank, int step, int ranks);

/// The blocks of `rank` at `step`; query chunks that see nothing of the source are left out.
std::vector<RingStepBlock> ring_step_blocks(const SequenceLayout& layout, const AttentionMask& mask, int rank,
                                            int step);

}  // namespace spattn
