#pragma once
// Host entry points of the CUDA kernels: each enqueues its kernel on `stream` and checks the
// launch; none waits for the device. Operands are already checked by CudaElementwiseKernels.

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/cuda/strided_operand.hpp"

namespace spattn::cuda {

/// destination = source element-wise, converting dtypes; both have `numel` elements, same shape.
void launch_copy(const StridedOperand& source, const StridedOperand& destination, int64_t numel,
                 cudaStream_t stream);

/// destination = value, rounded to destination's dtype.
void launch_fill(const StridedOperand& destination, int64_t numel, float value, cudaStream_t stream);

/// destination += source, destination fp32.
void launch_add(const StridedOperand& source, const StridedOperand& destination, int64_t numel,
                cudaStream_t stream);

/// See BlockKernels::merge; a group of lanes per (b, s, h) row (row_kernels.cu). When
/// `running_is_empty` the running result holds nothing yet (as if out 0, lse -inf): it is
/// written, not read, which saves filling it first and reading it back.
void launch_merge(const StridedOperand& partial_out,  // (B, S, H, D) any dtype
                  const StridedOperand& partial_lse,  // (B, H, S) fp32
                  const StridedOperand& running_out,  // (B, S, H, D) fp32
                  const StridedOperand& running_lse,  // (B, H, S) fp32
                  bool running_is_empty, cudaStream_t stream);

/// See BlockKernels::softmax_delta; a group of lanes per (b, s, h) row (row_kernels.cu).
void launch_softmax_delta(const StridedOperand& out,    // (B, S, H, D) any dtype
                          const StridedOperand& dout,   // (B, S, H, D) any dtype
                          const StridedOperand& delta,  // (B, H, S) fp32
                          cudaStream_t stream);

}  // namespace spattn::cuda
