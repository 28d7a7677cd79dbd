#pragma once
// The CUDA BlockKernels, all on one stream, of the user's KernelChoice: the forward through
// spattn's own Hopper kernel (hopper_forward, one launch per block that merges into the running
// result itself) where it runs the block, or through cuDNN's fused attention (CudnnAttention, one
// call per piece of every (query block, key segment) pair, merged by the element-wise kernels);
// the backward likewise through spattn's own Hopper kernel (hopper_backward, one launch per block,
// gradients added in fp32) or through cuDNN (each call's gradients in the input dtype, then
// added). Takes bf16 or fp16 q, k, v (neither has an fp32 path).

#include <cuda_runtime_api.h>

#include <cstddef>
#include <memory>
#include <utility>
#include <vector>

#include "kernels/block_kernels.hpp"
#include "kernels/cuda/cuda_elementwise_kernels.hpp"
#include "kernels/cuda/cudnn_attention.hpp"
#include "kernels/hopper/query_grad_turns.hpp"
#include "kernels/hopper/query_tile_counter.hpp"

namespace spattn::cuda {

class CudaBlockKernels final : public BlockKernels {
 public:
  /// On `device` in a non-blocking stream of its own, blocks through `kernel`'s choice; with
  /// `deterministic` the backward gives the same bits every run (see backward). `inputs`: the
  /// dtype and head dim of the calls' q, k, v, which decide the backward under automatic
  /// (own_backward_runs).
  CudaBlockKernels(const Device& device, KernelChoice kernel, bool deterministic, const KernelInputs& inputs);
  /// On `device` in the caller's `stream` (see CudaElementwiseKernels).
  CudaBlockKernels(const Device& device, cudaStream_t stream, KernelChoice kernel, bool deterministic,
                   const KernelInputs& inputs);
  ~CudaBlockKernels() override;

  Device device() const override { return elementwise_.device(); }
  /// cuDNN's backward recomputes delta from out; the own backward reads delta.
  bool backward_reads_output() const override { return !own_backward_; }
  cudaStream_t stream() const { return elementwise_.stream(); }

  /// With KernelChoice::cudnn, and with automatic where hopper_forward_unsupported(block) says
  /// why the own kernel cannot run it: for every segment, every piece (plan_cudnn_pieces), cuDNN
  /// forward into a workspace (input dtype out, fp32 lse), merged into block.out / block.lse:
  /// into their running result with accumulate; else the first piece writes them when it covers
  /// every row, or they start at out 0, lse -inf, and block.final_out is converted from out
  /// afterwards. Otherwise hopper_forward(block), which writes final_out in its epilogue, or with
  /// own an Error naming why it cannot run the block.
  void forward(const ForwardBlock& block) override;
  /// Where the own backward serves these kernels (own_backward_runs), hopper_backward(block): one
  /// launch, block.delta read, block.out not; deterministic: with the turn counters that order its
  /// dQ adds. A block it cannot run is an Error naming why with KernelChoice::own, and goes to
  /// cuDNN under automatic (which then needs block.out). Otherwise through cuDNN: for every
  /// segment, every piece, cuDNN backward with the final lse (block.lse) and final output
  /// (block.out, required here), gradients in the input dtype in workspaces, added into block.dq
  /// and the segment's dk, dv. block.delta is not read there (cuDNN recomputes it from out);
  /// deterministic: cuDNN's deterministic backward algorithm.
  void backward(const BackwardBlock& block) override;

  void merge(const TensorView& partial_out, const TensorView& partial_lse, TensorView running_out,
             TensorView running_lse) override;
  void softmax_delta(const TensorView& out, const TensorView& dout, TensorView delta) override;
  void copy(const TensorView& src, TensorView dst) override;
  void fill(TensorView dst, float value) override;
  void add(const TensorView& source, TensorView destination) override;
  void* allocate(std::size_t bytes) override;
  void deallocate(void* pointer) override;

  /// Orders later work on `stream` (a cudaStream_t) after the work already enqueued here.
  void set_stream(void* stream) override;
  /// Waits on the host for everything enqueued so far.
  void synchronize() override { elementwise_.synchronize(); }
  /// An event on the stream (CudaStreamMark).
  std::unique_ptr<StreamMark> mark() override;
  /// cuDNN graphs built so far (tests of the cache).
  std::size_t cached_graphs() const { return attention_.cached_graphs(); }

 private:
  /// Device scratch that only grows: reused by every call, reallocated (after the stream has
  /// drained) only when a larger block comes.
  struct Scratch {
    void* data = nullptr;
    std::size_t bytes = 0;
  };
  void* scratch(Scratch& buffer, std::size_t bytes);

  /// What both constructors do once the members are made: the stream-switch event, the own
  /// kernels' counters, the deterministic backward when asked.
  void set_up(bool deterministic);

  /// One cuDNN call of a forward block: a piece of one of its segments.
  struct SegmentPiece {
    const KvSegment* segment;
    CudnnPiece piece;
  };
  /// forward() through cuDNN, after the argument checks.
  void cudnn_forward(const ForwardBlock& block);
  /// k and v (B, 1, HK, D) with their one key written twice: (B, 2, HK, D) each, in key_twice_.
  std::pair<TensorView, TensorView> key_twice(const TensorView& k, const TensorView& v);

  const KernelChoice kernel_;
  const bool own_backward_;  // own_backward_runs for the choice and inputs these kernels were made for
  CudaElementwiseKernels elementwise_;
  cudaEvent_t stream_switch_ = nullptr;  // orders a new stream after the previous one
  CudnnAttention attention_;
  Scratch out_;    // forward: piece out (B, n, H, D); backward: dq (B, n, H, D)
  Scratch stats_;  // piece lse (B, H, n) fp32
  Scratch dk_;     // backward: (B, m, HK, D)
  Scratch dv_;     // backward: (B, m, HK, D)
  Scratch final_out_;   // backward: block.out in q's dtype when it comes in another dtype
  Scratch final_dout_;  // backward: block.dout in q's dtype when it comes in another dtype
  Scratch key_twice_;   // backward: k then v (B, 2, HK, D) of a piece of one query and one key
  std::vector<SegmentPiece> forward_pieces_;  // reused by every forward call: no host allocation per block
  // The own forward's launches, all on this object's stream (set_stream orders a new stream after
  // the old one), share one; none with KernelChoice::cudnn.
  std::unique_ptr<hopper::QueryTileCounter> tile_counter_;
  // The own backward's dQ turns in deterministic mode (else none), on this object's stream.
  std::unique_ptr<hopper::QueryGradTurns> query_grad_turns_;
};

/// Whether the backward of calls with `inputs` goes through spattn's own Hopper kernel under
/// `kernel` on `device`: always with own, never with cudnn, and under automatic where the own
/// backward runs such calls (hopper_backward_unsupported): its gradients stay in fp32 where
/// cuDNN's are rounded to the input dtype after every call, which fails the 2x single-rank
/// criterion (bench/results/gpu-device-run-2026-12-06e.md), at 1.02-1.08x cuDNN's speed (H200,
/// D 128, 80 rows a step: bench/results/gpu-device-run-2026-12-06g.md).
bool own_backward_runs(const Device& device, KernelChoice kernel, const KernelInputs& inputs);

/// The CUDA kernels of `device` (Device{cuda, i}) of `kernel`'s choice for calls with `inputs`,
/// deterministic or not, on a stream of their own.
std::unique_ptr<BlockKernels> make_cuda_block_kernels(const Device& device, KernelChoice kernel, bool deterministic,
                                                      const KernelInputs& inputs);

}  // namespace spattn::cuda
