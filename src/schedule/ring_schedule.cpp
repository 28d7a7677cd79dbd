#include "schedule/ring_schedule.hpp"

namespace spattn {

int ring_source_rank(int rank, int step, int ranks) { return ((rank - step) % ranks + ranks) % ranks; }

std::vector<RingStepBlock> ring_step_blocks(const SequenceLayout& layout, const AttentionMask& mask, int rank,
                                            int step) {
  const std::vector<SequenceChunk> sources = layout.chunks(ring_source_rank(rank, step, layout.ranks()));
  std::vector<RingStepBlock> blocks;
  for (const SequenceChunk& queries : layout.chunks(rank)) {
    RingStepBlock block{queries, {}};
    for (const SequenceChunk& keys : sources)
      if (mask.any_visible(queries.position, queries.position + queries.length, keys.position,
                           keys.position + keys.length))
        block.keys.push_back(keys);
    if (!block.keys.empty()) blocks.push_back(block);
  }
  return blocks;
}

}  // namespace spattn
