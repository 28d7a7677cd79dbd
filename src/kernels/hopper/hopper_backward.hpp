#pragma once
// spattn's own attention backward for Hopper GPUs (sm_90: H100, H200), BlockKernels::backward in
// one launch per block of up to kMaxSegmentsPerLaunch key segments: query rows at a global
// position against every key segment of the block, masks in global positions, GQA, bf16/fp16
// inputs. dq, dk and dv are added into the block's fp32 accumulators straight from the kernel's
// fp32 registers: nothing is rounded to 16 bits on the way (cuDNN writes each call's gradients in
// the inputs' dtype). It reads BackwardBlock::delta and never BackwardBlock::out. Plain C++ here;
// the CuTe kernel lives in the .cu files beside.

#include <cuda_runtime_api.h>

#include <string>

#include "kernels/block_kernels.hpp"
#include "kernels/hopper/query_grad_turns.hpp"
#include "spattn/device.hpp"
#include "spattn/dtype.hpp"

namespace spattn::cuda {

/// "" when this build and `device` run the own backward for inputs of `dtype` and `head_dim`;
/// otherwise why not (no sm_90 kernels in this build, another GPU, a head dim or dtype it lacks).
std::string hopper_backward_unsupported(const Device& device, DType dtype, int64_t head_dim);

/// "" when it runs `block`: the above, plus what only the block's tensors tell (q, dout, k, v
/// readable by the tensor memory accelerator, fp32 lse, delta, dq, dk, dv with head_dim
/// contiguous, a finite positive scale); otherwise why not.
std::string hopper_backward_unsupported(const BackwardBlock& block);

/// Enqueues `block` (see BackwardBlock) on `stream`; hopper_backward_unsupported(block) must be "".
/// dk and dv of each segment are added once per key, by one thread (the same bits every run); dq
/// gathers the key tiles' contributions by the TMA unit's fp32 reduce-add, in an order that varies
/// from run to run (differences of fp32 round-off) unless `turns` is given (on the block's
/// device): then in the key tiles' order, the same bits every run (QueryGradTurns says the cost).
/// Blocks of more segments than one launch takes run as several launches.
void hopper_backward(const BackwardBlock& block, cudaStream_t stream, hopper::QueryGradTurns* turns = nullptr);

/// hopper_backward where it runs `block`, returning ""; otherwise enqueues nothing and returns why
/// not (hopper_backward_unsupported(block)): the block's tensors are checked once.
[[nodiscard]] std::string try_hopper_backward(const BackwardBlock& block, cudaStream_t stream,
                                              hopper::QueryGradTurns* turns);

/// What the own backward supports in this build, in words (`spattn info`).
std::string hopper_backward_description();

}  // namespace spattn::cuda
