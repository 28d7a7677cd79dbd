#pragma once
// Into how many CTAs the own backward splits a key tile's GQA group of query heads. One CTA per
// (key tile, kv head) visits every query head of the group and sums their dK and dV in its
// registers: with GQA and short blocks that is few, long CTAs (2x 8k zigzag, GQA 32/8: a rank's
// 4k diagonal block is 256 CTAs of up to 256 steps on 132 multiprocessors), and under the causal
// mask the heaviest of them decide when the launch ends while most multiprocessors idle. Parts of
// the group make more, shorter CTAs, which add their dK and dV into the segment's accumulators by
// atomics: never in deterministic mode, where the order of those adds would vary from run to run.

#include <cstdint>

namespace spattn::cuda::hopper {

/// Waves of CTAs over the multiprocessors from which a launch ends evenly enough as it is: each
/// more part costs one more load of the key tile and one more add of its dK and dV.
constexpr int64_t kBackwardFillWaves = 6;

/// The parts of a GQA group of `group` query heads per kv head (a divisor of `group`) for a launch
/// of `ctas` CTAs of whole groups on `multiprocessors`: the fewest that give kBackwardFillWaves
/// waves, every head apart where none does, and one in deterministic mode.
constexpr int backward_head_parts(int64_t ctas, int group, int multiprocessors, bool deterministic) {
  if (deterministic) return 1;
  for (int parts = 1; parts < group; ++parts)
    if (group % parts == 0 && ctas * parts >= kBackwardFillWaves * multiprocessors) return parts;
  return group;
}

}  // namespace spattn::cuda::hopper
