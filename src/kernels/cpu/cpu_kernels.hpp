#pragma once
// The operations behind the CPU BlockKernels, one translation unit per kind of work.

#include "kernels/block_kernels.hpp"

namespace spattn::cpu {

/// Flash-style forward: online softmax over key tiles, tile products through BLAS.
void attention_forward(const ForwardBlock& block);

/// FlashAttention-2 backward, recomputing probabilities tile by tile.
void attention_backward(const BackwardBlock& block);

/// See BlockKernels::merge.
void merge_partial(const TensorView& partial_out, const TensorView& partial_lse,
                   TensorView running_out, TensorView running_lse);

/// See BlockKernels::softmax_delta.
void softmax_delta(const TensorView& out, const TensorView& dout, TensorView delta);

/// See BlockKernels::copy.
void copy_converting(const TensorView& source, TensorView destination);

/// See BlockKernels::add.
void add_converting(const TensorView& source, TensorView destination);

/// See BlockKernels::fill.
void fill(TensorView destination, float value);

}  // namespace spattn::cpu
