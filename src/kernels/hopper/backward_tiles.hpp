#pragma once
// The tile shape of the own backward, for the host and the kernel alike (and the CPU tests, which
// have no CUDA headers).

namespace spattn::cuda::hopper {

/// Keys per CTA of the own backward: 64 for each of its two warpgroups.
constexpr int kBackwardKeyTile = 128;
/// Query rows per step of a CTA's loop. 80, FlashAttention-3's choice at head dim 128 without a
/// mask: 1.5-2.6% faster than 64 on an H200 with and without one (GQA 32/8, D 128, 8k and 16k;
/// kernel-ab 2026-12-06). The rows are wgmma's N in every product (a multiple of 8, where M must be
/// a multiple of 64): hence dQ's product is transposed, dQ^T = K^T dS^T.
constexpr int kBackwardQueryTile = 80;

}  // namespace spattn::cuda::hopper
