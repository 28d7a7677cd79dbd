#pragma once
// spattn's own attention forward for Hopper GPUs (sm_90: H100, H200), BlockKernels::forward in
// one launch per block: query rows at a global position against every key segment of the block,
// masks in global positions, GQA, bf16/fp16 inputs, out and lse in fp32. With accumulate the
// kernel's epilogue merges into the running (out, lse) itself: no partial buffer, no merge pass,
// nothing rounded to 16 bits. Plain C++ here; the CuTe kernel lives in the .cu files beside.

#include <cuda_runtime_api.h>

#include <string>

#include "kernels/block_kernels.hpp"
#include "kernels/hopper/query_tile_counter.hpp"
#include "spattn/device.hpp"
#include "spattn/dtype.hpp"

namespace spattn::cuda {

/// "" when this build and `device` run the own forward for inputs of `dtype` and `head_dim`;
/// otherwise why not (no sm_90 kernels in this build, another GPU, a head dim or dtype it lacks).
/// Plans ask this once, before their first transfer.
std::string hopper_forward_unsupported(const Device& device, DType dtype, int64_t head_dim);

/// "" when it runs `block`: the above, plus what only the block's tensors tell (head_dim
/// contiguous, 16-byte aligned rows for the tensor memory accelerator, fp32 out and lse, a
/// finite positive scale); otherwise why not.
std::string hopper_forward_unsupported(const ForwardBlock& block);

/// Enqueues `block` (see ForwardBlock) on `stream`; hopper_forward_unsupported(block) must be "".
/// Blocks of more segments than one launch takes run as several launches, the later ones
/// accumulating, so the result is the same. Under a mask the query tiles' work differs, and
/// `tile_counter` (on the block's device, only ever used by launches that run one after another)
/// hands them out to the multiprocessors as they come free; with nullptr, or while `stream` is
/// captured into a CUDA graph, a static schedule takes them (about 3% slower at 4k causal, the
/// same bits).
void hopper_forward(const ForwardBlock& block, cudaStream_t stream, const hopper::QueryTileCounter* tile_counter);

/// hopper_forward where it runs `block`, returning ""; otherwise enqueues nothing and returns why
/// not (hopper_forward_unsupported(block)): the block's tensors are checked once, not once to ask
/// and again to launch.
[[nodiscard]] std::string try_hopper_forward(const ForwardBlock& block, cudaStream_t stream,
                                             const hopper::QueryTileCounter* tile_counter);

/// What the own forward supports in this build, in words (`spattn info`).
std::string hopper_forward_description();

}  // namespace spattn::cuda
