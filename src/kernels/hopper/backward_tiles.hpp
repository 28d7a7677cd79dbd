#pragma once
// The tile shape of the own backward, for the host and the kernel alike (and the CPU tests, which
// have no CUDA headers).

namespace spattn::cuda::hopper {

/// Keys per CTA of the own backward: 64 for each of its two warpgroups.
constexpr int kBackwardKeyTile = 128;
/// Query rows per step of a CTA's loop.
constexpr int kBackwardQueryTile = 64;

}  // namespace spattn::cuda::hopper
