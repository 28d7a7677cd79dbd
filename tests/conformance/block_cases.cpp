#include "block_cases.hpp"

#include <sstream>
#include <utility>

namespace spattn::test {
namespace {

const AttentionMask kNoMask{-1, -1};
const AttentionMask kCausal{-1, 0};

/// The blocks the attention operations run: where the queries and each key segment sit in the
/// global sequence, and what the mask lets them see. Batch, heads and kv heads last.
std::vector<BlockCase> blocks() {
  BlockCase nine_segments{"causal_nine_segments", 80, 400, {}, kCausal, 1, 4, 2};
  // More segments than the own kernel takes in one launch (8): its later launches accumulate.
  for (int64_t s = 0; s < 9; ++s) nine_segments.segments.push_back({1 + (s * 13) % 29, 45 * s});
  return {
      // Two segments with a gap between them and the queries far from both.
      {"nomask_gap", 48, 1000, {{64, 0}, {80, 1500}}, kNoMask, 1, 4, 2},
      // A zigzag query chunk: all of the first segment, a shifted diagonal of the second that
      // rows 0..63 do not reach. Batch 2, GQA 4:1.
      {"causal_zigzag", 96, 256, {{64, 0}, {64, 320}}, kCausal, 2, 4, 1},
      // The diagonal block (queries and keys at the same positions), MHA.
      {"causal_diagonal", 64, 384, {{64, 384}}, kCausal, 1, 4, 4},
      // Rows 0..31 see no key: out 0, lse -inf, no gradient.
      {"causal_rows_without_keys", 64, 0, {{64, 32}}, kCausal, 1, 4, 2},
      // No row sees any key.
      {"causal_hidden_block", 32, 0, {{48, 100}}, kCausal, 1, 4, 2},
      // Segments out of order; no row before 380 sees the first one.
      {"causal_segments_out_of_order", 120, 300, {{40, 380}, {64, 0}, {50, 250}}, kCausal, 1, 4, 2},
      nine_segments,
      // A causal sliding window of 50 over two segments.
      {"window_left", 96, 200, {{128, 100}, {64, 250}}, AttentionMask{50, 0}, 1, 4, 2},
      {"window_two_sided", 64, 64, {{128, 0}}, AttentionMask{30, 20}, 1, 4, 2},
      // Bounded on the right only; the second segment lies beyond every row's reach.
      {"window_right_only", 70, 100, {{100, 0}, {50, 300}}, AttentionMask{-1, 20}, 1, 4, 2},
      // Each query sees only the key at its own position.
      {"window_zero", 40, 10, {{50, 0}}, AttentionMask{0, 0}, 1, 4, 2},
      // A document of one token: one query, one key (cuDNN's backward refuses s_q = s_kv = 1).
      {"causal_one_query_one_key", 1, 37, {{1, 37}}, kCausal, 1, 4, 2},
      {"nomask_one_query_one_key", 1, 5, {{1, 900}}, kNoMask, 1, 4, 4},
      // Cuts of a packed sequence inside a chunk: many queries against one key, one against many.
      {"causal_one_key", 40, 100, {{1, 60}}, kCausal, 2, 4, 2},
      {"causal_one_query", 1, 200, {{64, 150}}, kCausal, 1, 4, 1},
  };
}

/// The input dtypes and head dims of the attention operations. fp32 runs on the CPU only and head
/// dim 40 has no own kernel: those rows show the targets' refusals.
const std::pair<DType, int64_t> kAttentionInputs[] = {{DType::f32, 40},  {DType::bf16, 40},  {DType::bf16, 64},
                                                      {DType::f16, 64},  {DType::bf16, 128}, {DType::f16, 128}};

const DType kDtypes[] = {DType::f32, DType::bf16, DType::f16};

/// The element-wise operations' tensors: (batch, q_rows x scale, heads, head_dim).
constexpr int64_t kElementwiseBatch = 2, kElementwiseRows = 96, kElementwiseHeads = 4;

BlockCase scaled(BlockCase block, int64_t scale) {
  block.q_rows *= scale;
  block.q_position *= scale;
  for (SegmentSpec& segment : block.segments) {
    segment.keys *= scale;
    segment.position *= scale;
  }
  if (block.mask.left > 0) block.mask.left *= scale;
  if (block.mask.right > 0) block.mask.right *= scale;
  return block;
}

}  // namespace

std::string operation_name(Operation operation) {
  switch (operation) {
    case Operation::forward: return "forward";
    case Operation::forward_accumulate: return "forward_accumulate";
    case Operation::forward_final_out: return "forward_final_out";
    case Operation::backward: return "backward";
    case Operation::merge: return "merge";
    case Operation::softmax_delta: return "softmax_delta";
    case Operation::copy: return "copy";
    case Operation::fill: return "fill";
    case Operation::add: return "add";
  }
  return "unknown";
}

bool attends(Operation operation) {
  return operation == Operation::forward || operation == Operation::forward_accumulate ||
         operation == Operation::forward_final_out || operation == Operation::backward;
}

std::string BlockKernelCase::name() const {
  std::ostringstream text;
  text << operation_name(operation) << "_" << dtype_name(dtype);
  if (operation == Operation::copy) text << "_to_" << dtype_name(destination_dtype);
  text << "_d" << head_dim;
  if (attends(operation)) text << "_" << block.name;
  return text.str();
}

std::string BlockKernelCase::shape() const {
  std::ostringstream text;
  text << "B" << block.batch << " H" << block.heads;
  if (!attends(operation)) {
    text << " S" << block.q_rows << " D" << head_dim;
    return text.str();
  }
  text << ":" << block.kv_heads << " q" << block.q_rows << "@" << block.q_position << " k";
  for (std::size_t s = 0; s < block.segments.size(); ++s)
    text << (s == 0 ? "" : ",") << block.segments[s].keys << "@" << block.segments[s].position;
  text << " D" << head_dim;
  return text.str();
}

std::vector<BlockKernelCase> block_kernel_cases(int64_t scale) {
  std::vector<BlockKernelCase> cases;
  for (const BlockCase& geometry : blocks())
    for (const auto& [dtype, head_dim] : kAttentionInputs)
      for (Operation operation : {Operation::forward, Operation::forward_accumulate, Operation::forward_final_out,
                                  Operation::backward}) {
        // Accumulation needs a segment to write and one to accumulate.
        if (operation == Operation::forward_accumulate && geometry.segments.size() < 2) continue;
        BlockKernelCase c;
        c.operation = operation;
        c.dtype = dtype;
        c.head_dim = head_dim;
        c.block = scaled(geometry, scale);
        cases.push_back(c);
      }

  auto elementwise = [&](Operation operation, DType dtype, int64_t head_dim) {
    BlockKernelCase c;
    c.operation = operation;
    c.dtype = dtype;
    c.head_dim = head_dim;
    c.block.batch = kElementwiseBatch;
    c.block.q_rows = kElementwiseRows * scale;
    c.block.heads = kElementwiseHeads;
    return c;
  };
  for (DType dtype : kDtypes)
    for (int64_t head_dim : {40, 128}) {
      cases.push_back(elementwise(Operation::merge, dtype, head_dim));
      cases.push_back(elementwise(Operation::softmax_delta, dtype, head_dim));
    }
  for (DType source : kDtypes)
    for (DType destination : kDtypes) {
      BlockKernelCase c = elementwise(Operation::copy, source, 40);
      c.destination_dtype = destination;
      cases.push_back(c);
    }
  for (DType dtype : kDtypes) {
    cases.push_back(elementwise(Operation::fill, dtype, 40));
    cases.push_back(elementwise(Operation::add, dtype, 40));
  }
  return cases;
}

}  // namespace spattn::test
