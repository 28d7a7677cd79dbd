#pragma once
// Forward and backward of ONE (query rows, key rows) pair through cuDNN's fused attention (SDPA),
// bf16 or fp16, GQA, BSHD views of any strides cuDNN accepts. Graphs are built once per
// (direction, dtype, shape, strides, mask, scale) and cached. The cuDNN headers compile slowly,
// so only cudnn_attention.cpp includes them; this header does not.
//
// cuDNN expresses masks relative to its own diagonal (top-left aligned here: query row r, key
// column c, both local to the call):
//   right bound R (>= 0):  c <= r + R
//   left bound L  (>= 1):  c >  r - L
// spattn's masks are in global positions, so a (query block, segment) pair of offset
// d = q_position - k_position sees c <= r + d + right and c >= r + d - left. plan_cudnn_pieces
// cuts the pair into at most two calls (pieces) that cuDNN can express with R >= 0, L >= 1.

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include "spattn/attention_options.hpp"
#include "spattn/device.hpp"
#include "spattn/tensor.hpp"

namespace spattn::cuda {

/// One call of cuDNN: query rows [q_begin, q_begin + q_count) of the block against keys
/// [k_begin, k_begin + k_count) of the segment, with a top-left aligned mask (-1: no bound).
/// Every query row of a piece sees at least one of its keys.
struct CudnnPiece {
  int64_t q_begin = 0;
  int64_t q_count = 0;
  int64_t k_begin = 0;
  int64_t k_count = 0;
  int64_t right_bound = -1;  // R: local key c is visible from local row r iff c <= r + R
  int64_t left_bound = -1;   // L: ... and c > r - L

  /// Whether local row r sees local key c in this piece (the mask cuDNN is given).
  bool visible(int64_t r, int64_t c) const {
    return (right_bound < 0 || c <= r + right_bound) && (left_bound < 0 || c > r - left_bound);
  }
};

/// The pieces of `q_count` queries at global `q_position` against `k_count` keys at global
/// `k_position` under `mask`: every visible (query, key) pair lies in exactly one piece, and
/// rows that see no key of the segment lie in none. At most two pieces:
///   rows whose window starts at or before the segment's first key: keys [0, ...), right bound
///     only (none when every row sees the whole key range);
///   rows whose window starts inside the segment: keys from the first row's first visible key,
///     left bound 1 (c >= r) and right bound left + right (or the last key when unbounded).
/// The second piece never has more rows than keys (cuDNN's sliding window needs s_q <= s_kv).
std::vector<CudnnPiece> plan_cudnn_pieces(int64_t q_count, int64_t q_position, int64_t k_count,
                                          int64_t k_position, const AttentionMask& mask);

/// cuDNN's fused attention on one device and stream. Graphs take a while to build (cuDNN compiles
/// their kernels at run time), so the live CudnnAttention objects of a device share one cuDNN
/// handle and one graph cache: a plan of a shape that another live plan built builds nothing. The
/// workspace is each object's own, so plans on different streams never share scratch.
class CudnnAttention {
 public:
  /// A cuDNN handle on `device` whose work goes to `stream` (which must outlive this object).
  CudnnAttention(const Device& device, cudaStream_t stream);
  ~CudnnAttention();
  CudnnAttention(const CudnnAttention&) = delete;
  CudnnAttention& operator=(const CudnnAttention&) = delete;

  /// Enqueues later work on `stream`; the caller orders it after the previous stream's work.
  void set_stream(cudaStream_t stream);

  /// Later backward calls run cuDNN's deterministic algorithm (the same bits every run; dq
  /// without atomics, slower), or its default one. Graphs of either kind are cached apart.
  void set_deterministic_backward(bool deterministic) { deterministic_backward_ = deterministic; }

  /// out = softmax(scale * q k^T, masked) v and stats = its log-sum-exp per row, for one piece.
  /// Throws Error for fp32 (cuDNN's fused attention has no fp32 path) or an unsupported shape.
  void forward(const TensorView& q,     // (B, n, H, D) bf16/fp16, stride 1 along D
               const TensorView& k,     // (B, m, HK, D) same dtype
               const TensorView& v,     // (B, m, HK, D) same dtype
               const CudnnPiece& mask,  // right_bound / left_bound used
               float scale,
               TensorView out,          // (B, n, H, D) same dtype, written
               TensorView stats);       // (B, H, n) fp32 contiguous, written (natural log)

  /// Gradients of one piece given the FINAL output and lse of the whole attention:
  ///   P = exp(scale * q k^T - stats), delta = rowsum(dout * out) (cuDNN recomputes it),
  ///   dv = P^T dout, dS = P * (dout v^T - delta), dq = scale dS k, dk = scale dS^T q.
  /// dq, dk, dv are written (not accumulated), in the input dtype.
  void backward(const TensorView& q,     // (B, n, H, D)
                const TensorView& k,     // (B, m, HK, D)
                const TensorView& v,     // (B, m, HK, D)
                const TensorView& out,   // (B, n, H, D) final output, same dtype as q
                const TensorView& dout,  // (B, n, H, D) same dtype as q
                const TensorView& stats, // (B, H, n) fp32 contiguous: final lse
                const CudnnPiece& mask, float scale,
                TensorView dq,   // (B, n, H, D) same dtype, written
                TensorView dk,   // (B, m, HK, D) same dtype, written
                TensorView dv);  // (B, m, HK, D) same dtype, written

  /// Graphs built so far on this device by the live objects (one per distinct key), for tests.
  std::size_t cached_graphs() const;

  struct Graph;        // a built cuDNN graph and its workspace size (defined in the .cpp)
  struct SharedGraphs; // a device's handle and graph cache (defined in the .cpp)

 private:
  const Graph& graph_for(const std::vector<int64_t>& key, bool backward, const TensorView* operands,
                         const CudnnPiece& mask, float scale);
  void* workspace(std::size_t bytes);

  Device device_;
  cudaStream_t stream_;
  std::shared_ptr<SharedGraphs> shared_;  // this device's, shared with its other live objects
  void* workspace_ = nullptr;  // cuDNN's workspace, grown to the largest graph's need
  std::size_t workspace_bytes_ = 0;
  bool deterministic_backward_ = false;
};

}  // namespace spattn::cuda
