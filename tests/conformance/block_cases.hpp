#pragma once
// The one list of cases that every block-kernel target is held to (see main.cpp): each
// BlockKernels operation over block geometries (masks none, causal and sliding windows in global
// positions, rows that see no key, a block that sees none, GQA and MHA, several segments per block,
// q at a global offset), input dtypes and head dims 64 and 128 (the own kernel's) and 40 (small,
// not a multiple of 16). The test mode runs the list as it is; the perf mode multiplies every
// length of it by its --scale.

#include <cstdint>
#include <string>
#include <vector>

#include "block_reference.hpp"
#include "spattn/dtype.hpp"

namespace spattn::test {

enum class Operation {
  forward,             // ForwardBlock into NaN-poisoned out and lse
  forward_accumulate,  // the first segment written, the others accumulated onto it (accumulate)
  forward_final_out,   // ForwardBlock::final_out in the input dtype
  backward,            // prepare_backward_delta, then BackwardBlock into random dq, dk, dv
  merge,
  softmax_delta,
  copy,
  fill,
  add,
};

/// The name a case's name starts with: "forward_accumulate", "softmax_delta", ...
std::string operation_name(Operation operation);

/// forward, forward_accumulate, forward_final_out and backward: the operations that attend.
bool attends(Operation operation);

struct BlockKernelCase {
  Operation operation = Operation::forward;
  // q, k, v of the attention operations; partial out (merge); out and dout (softmax_delta); the
  // source (copy, add); the destination (fill).
  DType dtype = DType::f32;
  DType destination_dtype = DType::f32;  // copy's
  int64_t head_dim = 64;
  // The attention operations' block. The element-wise ones take only its batch, q_rows and heads:
  // their tensors are (batch, q_rows, heads, head_dim).
  BlockCase block;

  /// "<operation>_<dtype>[_to_<dtype>]_d<head_dim>[_<block>]": unique in the list, and a GoogleTest name.
  std::string name() const;
  /// The tensors' sizes and positions: "B2 H4:1 q96@256 k64@0,64@320 D64".
  std::string shape() const;
};

/// Every case, with every length, position and window side multiplied by `scale`: the same
/// blocks, larger (the rows that see no key grow in proportion).
std::vector<BlockKernelCase> block_kernel_cases(int64_t scale = 1);

}  // namespace spattn::test
