#pragma once
// The tile shape of the own backward, for the host and the kernel alike (and the CPU tests, which
// have no CUDA headers).

namespace spattn::cuda::hopper {

/// Keys per CTA of the own backward: 64 for each of its two warpgroups.
constexpr int kBackwardKeyTile = 128;
/// Query rows per step of a CTA's loop at `head_dim`, FlashAttention-3's choices: at D 128, 80
/// (1.5-2.6% faster than 64 on an H200 with and without a mask, GQA 32/8, 8k and 16k; kernel-ab
/// 2026-12-06); at D 64, whose steps are half as long for the same barriers and waits, 128, which
/// its registers (dK and dV half D 128's) and shared memory hold: 1.16-1.20x faster than 80 without
/// a mask and 1.08x causal (one H100, GQA 32/8, 8k and 16k; kernel-ab 2026-12-07c). The rows are
/// wgmma's N in every product (a multiple of 8, where M must be a multiple of 64): hence dQ's
/// product is transposed, dQ^T = K^T dS^T.
constexpr int backward_query_tile(int head_dim) { return head_dim == 64 ? 128 : 80; }

}  // namespace spattn::cuda::hopper
