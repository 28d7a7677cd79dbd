#pragma once
// The kernel interface that strategies are written against: one implementation per device
// (cpu/ here; cuda/ on NVIDIA GPUs, through cuDNN or spattn's own Hopper kernels). Kernels know
// nothing of ranks, steps or strategies: a block is queries at global positions against a list of
// key/value segments at global positions.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kernels/stream_mark.hpp"
#include "spattn/attention_options.hpp"
#include "spattn/tensor.hpp"

namespace spattn {

/// A contiguous stretch of keys and values of the global sequence.
struct KvSegment {
  TensorView k;          // (B, Sk, HK, D)
  TensorView v;          // (B, Sk, HK, D)
  int64_t position = 0;  // global position of token 0 of k and v
};

/// A segment with the gradient buffers its backward accumulates into.
struct KvGradSegment {
  KvSegment kv;
  TensorView dk;  // (B, Sk, HK, D) fp32, accumulated: dk += this block's contribution
  TensorView dv;  // (B, Sk, HK, D) fp32, accumulated: dv += this block's contribution
};

/// Forward of queries over the concatenation of `segments`. Writes the partial result of these
/// keys only; a row that sees no key here gets out = 0 and lse = -inf. With `accumulate`, out and
/// lse hold a running result (of earlier blocks; out 0, lse -inf where there is none yet) and the
/// block's result is merged into it as merge() would, without a partial buffer or a second pass.
/// With `final_out` the block is the last of its rows: the result goes to final_out, rounded to
/// its dtype, instead of a separate conversion of out afterwards.
struct ForwardBlock {
  TensorView q;            // (B, Sq, H, D), H % HK == 0 (GQA: head h reads kv head h / (H/HK))
  int64_t q_position = 0;  // global position of query row 0
  std::vector<KvSegment> segments;
  AttentionMask mask;
  float scale = 1.0f;
  TensorView out;  // (B, Sq, H, D) fp32, written (or merged into, with accumulate)
  TensorView lse;  // (B, H, Sq) fp32, written: log sum_j exp(scale * q.k_j) over visible keys
  bool accumulate = false;
  TensorView final_out;  // (B, Sq, H, D) any dtype, or empty; when set, written, and out is left
                         // unspecified (kernels that cannot write it directly convert out into it)
};

/// Backward of queries over the concatenation of `segments`, given the final lse and delta of
/// the whole attention (not of this block). Accumulates into dq and every segment's dk, dv.
struct BackwardBlock {
  TensorView q;            // (B, Sq, H, D)
  int64_t q_position = 0;  // global position of query row 0
  std::vector<KvGradSegment> segments;
  TensorView dout;   // (B, Sq, H, D)
  TensorView out;    // (B, Sq, H, D) final output of the full attention, any dtype. The CUDA kernels
                     // need it (cuDNN's backward recomputes delta from out and dout and takes no
                     // delta); the CPU kernels use delta and ignore it (may be left empty there).
  TensorView lse;    // (B, H, Sq) fp32, final lse of the full attention; -inf rows are skipped
  TensorView delta;  // (B, H, Sq) fp32, rowsum(dout * out) of the full attention
  AttentionMask mask;
  float scale = 1.0f;
  TensorView dq;  // (B, Sq, H, D) fp32, accumulated: dq += this block's contribution
};

/// Block attention and the small element-wise operations around it, for one device.
class BlockKernels {
 public:
  virtual ~BlockKernels() = default;

  virtual Device device() const = 0;

  /// Whether backward reads BackwardBlock::out (cuDNN recomputes delta from it) rather than
  /// only delta: strategies that move the forward output to where backward runs ask this.
  virtual bool backward_reads_output() const { return false; }

  virtual void forward(const ForwardBlock& block) = 0;
  virtual void backward(const BackwardBlock& block) = 0;

  /// Folds a partial result into the running one, stably:
  ///   lse' = max(lse, lse_b) + log1p(exp(min(lse, lse_b) - max(lse, lse_b)))
  ///   out' = out * exp(lse - lse') + out_b * exp(lse_b - lse')
  /// Rows where both lse are -inf stay out = 0, lse = -inf.
  virtual void merge(const TensorView& partial_out,  // (B, S, H, D) any dtype
                     const TensorView& partial_lse,  // (B, H, S) fp32
                     TensorView running_out,         // (B, S, H, D) fp32
                     TensorView running_lse) = 0;    // (B, H, S) fp32

  /// delta[b, h, i] = sum_d out[b, i, h, d] * dout[b, i, h, d], the softmax backward's row term.
  virtual void softmax_delta(const TensorView& out,   // (B, S, H, D)
                             const TensorView& dout,  // (B, S, H, D)
                             TensorView delta) = 0;   // (B, H, S) fp32

  /// BackwardBlock::delta as these kernels need it: softmax_delta where backward reads delta,
  /// nothing where it recomputes delta from out (backward_reads_output()), so that no pass is
  /// spent on a term that would never be read.
  void prepare_backward_delta(const TensorView& out, const TensorView& dout, TensorView delta) {
    if (!backward_reads_output()) softmax_delta(out, dout, delta);
  }

  /// dst = src element-wise, converting dtypes (rounding to nearest even), any strides,
  /// same shape.
  virtual void copy(const TensorView& src, TensorView dst) = 0;

  virtual void fill(TensorView dst, float value) = 0;

  /// destination += source, element-wise (fp32 accumulators, e.g. gradients arriving from a peer).
  virtual void add(const TensorView& source, TensorView destination) = 0;

  /// The device stream that later calls enqueue their work on (a cudaStream_t for CUDA; nullptr
  /// is the legacy default stream). Work enqueued before on the previous stream is ordered
  /// before later work, so a plan may follow its caller from stream to stream (PyTorch's current
  /// stream changes). CPU kernels run on the calling thread and ignore it.
  virtual void set_stream(void* stream) { (void)stream; }

  /// Blocks the host until all work enqueued so far has run: only for callers that time or read
  /// results on the host (a Profile). CPU kernels are synchronous already.
  virtual void synchronize() {}

  /// A mark placed after the work enqueued so far (a Profile's clock). CPU kernels have run it
  /// already: the host clock.
  virtual std::unique_ptr<StreamMark> mark() { return std::make_unique<HostClockMark>(); }

  /// Device memory for workspaces, allocated once per plan, never inside a step loop.
  virtual void* allocate(std::size_t bytes) = 0;
  virtual void deallocate(void* pointer) = 0;

 protected:
  /// ForwardBlock::final_out for kernels that write out first: converts it there.
  void write_final_out(const ForwardBlock& block) {
    if (block.final_out.data != nullptr) copy(block.out, block.final_out);
  }
};

/// The q, k, v that a plan's block kernels are made for: on CUDA, under KernelChoice::automatic,
/// they decide which kernel runs the backward (cuda::own_backward_runs).
struct KernelInputs {
  DType dtype = DType::bf16;
  int64_t head_dim = 0;
};

/// The kernels of `device` for calls with `inputs`, of `kernel`'s choice on CUDA (see
/// CudaBlockKernels), with a deterministic backward when asked (AttentionOptions::deterministic;
/// the CPU's always is); throws Error when spattn was built without that device's backend, or for
/// a choice other than automatic on the CPU.
std::unique_ptr<BlockKernels> make_block_kernels(const Device& device, const KernelInputs& inputs,
                                                 KernelChoice kernel = KernelChoice::automatic,
                                                 bool deterministic = false);

/// The CPU implementation (multi-threaded with OpenMP, tile products through BLAS).
std::unique_ptr<BlockKernels> make_cpu_block_kernels();

}  // namespace spattn
