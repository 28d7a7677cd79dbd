#pragma once
// A whole-sequence attention problem for the kernel tests: random inputs, the fp64 reference,
// and the block decompositions that the strategies use (whole, zigzag pairs of chunks), run
// through BlockKernels and assembled back into whole-sequence results.

#include <cstdint>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "host_tensor.hpp"
#include "kernels/block_kernels.hpp"
#include "spattn/reference_attention.hpp"

namespace spattn::test {

/// How a test splits the sequence into blocks.
enum class Decomposition {
  whole,         // one block: all queries against one segment of all keys
  two_segments,  // one block: all queries against the keys as two segments, second half first
  zigzag,        // 4 chunks; each query chunk against {chunk 0, 3} and {chunk 1, 2}, merged
};

struct AttentionCase {
  int64_t batch = 1;
  int64_t sequence = 1;
  int64_t heads = 1;
  int64_t kv_heads = 1;
  int64_t head_dim = 32;
  DType dtype = DType::f32;
  AttentionOptions options;
  Decomposition decomposition = Decomposition::whole;
  bool packed_qkv = false;  // q, k, v are head slices of one (B, S, H + 2 HK, D) buffer
  // Standard deviations of the normal random inputs (dout's is 1): large ones make extreme
  // scores (q, k) or extreme outputs and gradients (v). Not with packed_qkv.
  double qk_deviation = 1.0;
  double v_deviation = 1.0;

  std::string name() const;
};

void PrintTo(const AttentionCase& attention_case, std::ostream* stream);

/// The cases that forward and backward tests sweep.
std::vector<AttentionCase> attention_cases();

/// Max |a - b| / max |reference| over finite entries (1 if they disagree on which are finite).
double relative_error(const std::vector<double>& actual, const std::vector<double>& reference);

class AttentionProblem {
 public:
  explicit AttentionProblem(const AttentionCase& attention_case, uint32_t seed = 1234);

  const AttentionCase& attention_case() const { return case_; }
  const TensorView& q() const { return q_; }
  const TensorView& k() const { return k_; }
  const TensorView& v() const { return v_; }
  const TensorView& dout() const { return dout_.view(); }
  float scale() const;

  ReferenceResult reference(bool with_gradients) const;

  /// out (B, S, H, D) and lse (B, H, S) assembled from block forwards (merged where a query
  /// chunk has several blocks). Fails the test if a block left an output unwritten or NaN.
  void run_forward(BlockKernels& kernels, std::vector<double>& out, std::vector<double>& lse) const;

  /// dq, dk, dv from block backwards given the reference's lse and out (for delta).
  void run_backward(BlockKernels& kernels, const ReferenceResult& reference, std::vector<double>& dq,
                    std::vector<double>& dk, std::vector<double>& dv) const;

 private:
  struct Block {
    int64_t query_begin, query_length;
    std::vector<std::pair<int64_t, int64_t>> key_chunks;  // (begin, length) of each segment
  };
  std::vector<Block> blocks() const;

  AttentionCase case_;
  std::unique_ptr<HostTensor> packed_;
  std::unique_ptr<HostTensor> q_storage_, k_storage_, v_storage_;
  HostTensor dout_;
  TensorView q_, k_, v_;
};

}  // namespace spattn::test
