// The CUDA BlockKernels (cuDNN fused attention) beyond the block geometries of the conformance
// suite (tests/conformance, which holds kernel cudnn to fp64 over masks, segments, dtypes and head
// dims): the plan of cuDNN calls (CudnnPieces, checked without a GPU, on every machine), a block
// that is the whole attention against reference_attention, the graph cache, refusals. Outputs are
// NaN-poisoned so unwritten elements show.
//
// Tolerance: cuDNN rounds the probabilities P to the input dtype before P.V and writes out and
// the gradients of each piece in the input dtype, so its error is a few units of that dtype's
// rounding (bf16: 2^-8 = 3.9e-3, fp16: 2^-11 = 4.9e-4), while the CPU kernels keep fp32 and are
// near fp64. So the bound is fixed, relative to the largest reference magnitude of each tensor:
// 2e-2 for bf16 and 5e-3 for fp16 (about 5 and 10 units), plus that relative bound per element.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "block_reference.hpp"
#include "cuda_test_support.hpp"
#include "kernels/cuda/cuda_block_kernels.hpp"
#include "kernels/cuda/cudnn_attention.hpp"
#include "spattn/error.hpp"
#include "spattn/reference_attention.hpp"

namespace spattn::test {
namespace {

// ---- the plan of cuDNN calls, checked everywhere (no GPU needed) ---------------------------------

TEST(CudnnPieces, CoverEveryVisiblePairExactlyOnceWithBoundsCudnnAccepts) {
  std::mt19937 generator(7);
  std::uniform_int_distribution<int64_t> size(1, 40), position(0, 120), bound(-1, 30);
  for (int trial = 0; trial < 4000; ++trial) {
    const int64_t q_count = size(generator), k_count = size(generator);
    const int64_t q_position = position(generator), k_position = position(generator);
    AttentionMask mask;
    mask.left = bound(generator);
    mask.right = trial % 3 == 0 ? 0 : bound(generator);
    SCOPED_TRACE("q " + std::to_string(q_count) + " at " + std::to_string(q_position) + ", k " +
                 std::to_string(k_count) + " at " + std::to_string(k_position) + ", left " +
                 std::to_string(mask.left) + " right " + std::to_string(mask.right));
    const auto pieces = cuda::plan_cudnn_pieces(q_count, q_position, k_count, k_position, mask);
    ASSERT_LE(pieces.size(), 2u);
    std::vector<int> covered(static_cast<std::size_t>(q_count * k_count), 0);
    for (const cuda::CudnnPiece& piece : pieces) {
      ASSERT_GT(piece.q_count, 0);
      ASSERT_GT(piece.k_count, 0);
      ASSERT_GE(piece.q_begin, 0);
      ASSERT_LE(piece.q_begin + piece.q_count, q_count);
      ASSERT_GE(piece.k_begin, 0);
      ASSERT_LE(piece.k_begin + piece.k_count, k_count);
      ASSERT_TRUE(piece.right_bound == -1 || piece.right_bound >= 0);
      ASSERT_TRUE(piece.left_bound == -1 || piece.left_bound >= 1);
      // cuDNN's sliding window (a left bound) needs no more query rows than keys.
      if (piece.left_bound >= 0) {
        ASSERT_LE(piece.q_count, piece.k_count);
      }
      for (int64_t r = 0; r < piece.q_count; ++r) {
        bool row_sees_a_key = false;
        for (int64_t c = 0; c < piece.k_count; ++c)
          if (piece.visible(r, c)) {
            row_sees_a_key = true;
            ++covered[static_cast<std::size_t>((piece.q_begin + r) * k_count + piece.k_begin + c)];
          }
        ASSERT_TRUE(row_sees_a_key) << "row " << r << " of a piece sees none of its keys";
      }
    }
    for (int64_t i = 0; i < q_count; ++i)
      for (int64_t j = 0; j < k_count; ++j)
        ASSERT_EQ(covered[static_cast<std::size_t>(i * k_count + j)],
                  mask.visible(q_position + i, k_position + j) ? 1 : 0)
            << "query " << i << ", key " << j;
  }
}

// The cases' default shape (BlockCase): batch 2, 8 heads, 2 kv heads.
constexpr int64_t kBatch = 2, kHeads = 8, kKvHeads = 2;

class CudnnBlockKernels : public CudaKernelTest {
 protected:
  void SetUp() override {
    CudaKernelTest::SetUp();
    if (IsSkipped()) return;
    // The cuDNN path by name: automatic would send forward blocks to the own kernel on sm_90.
    kernels_ = std::make_unique<cuda::CudaBlockKernels>(Device{DeviceKind::cuda, 0}, gpu_->stream(),
                                                        KernelChoice::cudnn, /*deterministic=*/false, KernelInputs{});
  }

  /// Forward and backward of `c` on the GPU and the CPU, both compared with the fp64 reference.
  void check_case(const BlockCase& c, DType dtype, int64_t head_dim) {
    SCOPED_TRACE(c.name + ", " + dtype_name(dtype) + ", head_dim " + std::to_string(head_dim));
    const double tolerance = dtype == DType::bf16 ? 2e-2 : 5e-3;
    const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
    BlockProblem p = make_problem(c, dtype, head_dim, scale, generator_);
    const int64_t S = c.q_rows;

    // ---- forward: out, lse poisoned with NaN so that unwritten elements show
    HostTensor out(DType::f32, {kBatch, S, kHeads, head_dim}), lse(DType::f32, {kBatch, kHeads, S});
    out.poison();
    lse.poison();
    HostTensor cpu_out = out, cpu_lse = lse;
    DeviceTwin q_gpu(*gpu_, p.q), out_gpu(*gpu_, out), lse_gpu(*gpu_, lse), dout_gpu(*gpu_, p.dout);
    std::vector<std::unique_ptr<DeviceTwin>> k_gpu, v_gpu;
    ForwardBlock gpu_block, cpu_block;
    gpu_block.q = q_gpu.view();
    cpu_block.q = p.q.view();
    for (std::size_t s = 0; s < c.segments.size(); ++s) {
      k_gpu.push_back(std::make_unique<DeviceTwin>(*gpu_, p.k[s]));
      v_gpu.push_back(std::make_unique<DeviceTwin>(*gpu_, p.v[s]));
      gpu_block.segments.push_back({k_gpu.back()->view(), v_gpu.back()->view(), c.segments[s].position});
      cpu_block.segments.push_back({p.k[s].view(), p.v[s].view(), c.segments[s].position});
    }
    for (ForwardBlock* block : {&gpu_block, &cpu_block}) {
      block->q_position = c.q_position;
      block->mask = c.mask;
      block->scale = scale;
    }
    gpu_block.out = out_gpu.view();
    gpu_block.lse = lse_gpu.view();
    cpu_block.out = cpu_out.view();
    cpu_block.lse = cpu_lse.view();
    kernels_->forward(gpu_block);
    cpu_->forward(cpu_block);
    const HostTensor gpu_out = out_gpu.download(), gpu_lse = lse_gpu.download();
    expect_near_reference(p.out, gpu_out, tolerance, "cuDNN out vs fp64");
    expect_near_reference(p.lse, gpu_lse, 1e-3, "cuDNN lse vs fp64");
    expect_near_reference(values_of(cpu_out), gpu_out, tolerance, "cuDNN out vs the CPU kernels");
    expect_near_reference(values_of(cpu_lse), gpu_lse, 1e-3, "cuDNN lse vs the CPU kernels");

    // ---- the same forward one segment per call, each merged into the result so far
    // (ForwardBlock::accumulate), from an empty result: out 0, lse -inf
    HostTensor empty_out(DType::f32, {kBatch, S, kHeads, head_dim}), empty_lse(DType::f32, {kBatch, kHeads, S});
    empty_out.fill(0.0);
    empty_lse.fill(-std::numeric_limits<double>::infinity());
    DeviceTwin accumulated_out(*gpu_, empty_out), accumulated_lse(*gpu_, empty_lse);
    for (const KvSegment& segment : gpu_block.segments) {
      ForwardBlock one_segment = gpu_block;
      one_segment.segments = {segment};
      one_segment.out = accumulated_out.view();
      one_segment.lse = accumulated_lse.view();
      one_segment.accumulate = true;
      kernels_->forward(one_segment);
    }
    expect_near_reference(p.out, accumulated_out.download(), tolerance, "accumulated cuDNN out vs fp64");
    expect_near_reference(p.lse, accumulated_lse.download(), 1e-3, "accumulated cuDNN lse vs fp64");

    // ---- backward with the reference's final out and lse (fp32), gradients accumulated from 0
    HostTensor final_out = host_f32(p.out, {kBatch, S, kHeads, head_dim});
    HostTensor final_lse = host_f32(p.lse, {kBatch, kHeads, S});
    HostTensor delta(DType::f32, {kBatch, kHeads, S});
    cpu_->softmax_delta(final_out.view(), p.dout.view(), delta.view());
    HostTensor dq(DType::f32, {kBatch, S, kHeads, head_dim});
    dq.fill(0.0);
    HostTensor cpu_dq = dq;
    DeviceTwin final_out_gpu(*gpu_, final_out), final_lse_gpu(*gpu_, final_lse), delta_gpu(*gpu_, delta),
        dq_gpu(*gpu_, dq);
    std::vector<HostTensor> dk, dv, cpu_dk, cpu_dv;
    for (const SegmentSpec& s : c.segments) {
      dk.emplace_back(DType::f32, std::initializer_list<int64_t>{kBatch, s.keys, kKvHeads, head_dim});
      dk.back().fill(0.0);
      dv.push_back(dk.back());
    }
    cpu_dk = dk;
    cpu_dv = dv;
    std::vector<std::unique_ptr<DeviceTwin>> dk_gpu, dv_gpu;
    BackwardBlock gpu_backward, cpu_backward;
    for (std::size_t s = 0; s < c.segments.size(); ++s) {
      dk_gpu.push_back(std::make_unique<DeviceTwin>(*gpu_, dk[s]));
      dv_gpu.push_back(std::make_unique<DeviceTwin>(*gpu_, dv[s]));
      gpu_backward.segments.push_back({gpu_block.segments[s], dk_gpu.back()->view(), dv_gpu.back()->view()});
      cpu_backward.segments.push_back({cpu_block.segments[s], cpu_dk[s].view(), cpu_dv[s].view()});
    }
    gpu_backward.q = q_gpu.view();
    gpu_backward.dout = dout_gpu.view();
    gpu_backward.out = final_out_gpu.view();
    gpu_backward.lse = final_lse_gpu.view();
    gpu_backward.delta = delta_gpu.view();
    gpu_backward.dq = dq_gpu.view();
    cpu_backward.q = p.q.view();
    cpu_backward.dout = p.dout.view();
    cpu_backward.out = final_out.view();
    cpu_backward.lse = final_lse.view();
    cpu_backward.delta = delta.view();
    cpu_backward.dq = cpu_dq.view();
    for (BackwardBlock* block : {&gpu_backward, &cpu_backward}) {
      block->q_position = c.q_position;
      block->mask = c.mask;
      block->scale = scale;
    }
    kernels_->backward(gpu_backward);
    cpu_->backward(cpu_backward);
    const HostTensor gpu_dq = dq_gpu.download();
    expect_near_reference(p.dq, gpu_dq, tolerance, "cuDNN dq vs fp64");
    expect_near_reference(values_of(cpu_dq), gpu_dq, tolerance, "cuDNN dq vs the CPU kernels");
    for (std::size_t s = 0; s < c.segments.size(); ++s) {
      const std::string segment = " of segment " + std::to_string(s);
      const HostTensor gpu_dk = dk_gpu[s]->download(), gpu_dv = dv_gpu[s]->download();
      expect_near_reference(p.dk[s], gpu_dk, tolerance, "cuDNN dk" + segment + " vs fp64");
      expect_near_reference(p.dv[s], gpu_dv, tolerance, "cuDNN dv" + segment + " vs fp64");
      expect_near_reference(values_of(cpu_dk[s]), gpu_dk, tolerance, "cuDNN dk" + segment + " vs the CPU kernels");
      expect_near_reference(values_of(cpu_dv[s]), gpu_dv, tolerance, "cuDNN dv" + segment + " vs the CPU kernels");
    }
  }

  std::unique_ptr<cuda::CudaBlockKernels> kernels_;
};

const AttentionMask kCausal{-1, 0};

TEST_F(CudnnBlockKernels, WholeSequenceMatchesReferenceAttention) {
  // The block that is the whole attention (queries at 0, keys split in two segments) against
  // spattn::reference_attention of the full sequence, causal and windowed.
  for (const bool causal : {true, false}) {
    SCOPED_TRACE(causal ? "causal" : "window (40, 16)");
    AttentionOptions options;
    options.causal = causal;
    if (!causal) {
      options.window_left = 40;
      options.window_right = 16;
    }
    const int64_t S = 160, D = 64;
    options.softmax_scale = 1.0f / std::sqrt(static_cast<float>(D));
    HostTensor q(DType::bf16, {kBatch, S, kHeads, D}), k(DType::bf16, {kBatch, S, kKvHeads, D}),
        v(DType::bf16, {kBatch, S, kKvHeads, D});
    q.randomize(generator_);
    k.randomize(generator_);
    v.randomize(generator_);
    const ReferenceResult reference = reference_attention(q.view(), k.view(), v.view(), TensorView{}, options);
    HostTensor out(DType::f32, {kBatch, S, kHeads, D}), lse(DType::f32, {kBatch, kHeads, S});
    out.poison();
    lse.poison();
    DeviceTwin q_gpu(*gpu_, q), k_gpu(*gpu_, k), v_gpu(*gpu_, v), out_gpu(*gpu_, out), lse_gpu(*gpu_, lse);
    ForwardBlock block;
    block.q = q_gpu.view();
    block.q_position = 0;
    block.segments.push_back({k_gpu.twin(k.view().slice(1, 0, 70)), v_gpu.twin(v.view().slice(1, 0, 70)), 0});
    block.segments.push_back({k_gpu.twin(k.view().slice(1, 70, S - 70)), v_gpu.twin(v.view().slice(1, 70, S - 70)), 70});
    block.mask = AttentionMask::from_options(options);
    block.scale = *options.softmax_scale;
    block.out = out_gpu.view();
    block.lse = lse_gpu.view();
    kernels_->forward(block);
    expect_near_reference(reference.out, out_gpu.download(), 2e-2, "cuDNN out vs reference_attention");
    expect_near_reference(reference.lse, lse_gpu.download(), 1e-3, "cuDNN lse vs reference_attention");
  }
}

TEST_F(CudnnBlockKernels, GraphsAreBuiltOncePerShape) {
  const BlockCase c{"causal offset 40", 80, 100, {{100, 60}}, kCausal};
  check_case(c, DType::bf16, 64);
  const std::size_t graphs = kernels_->cached_graphs();
  EXPECT_GT(graphs, 0u);
  check_case(c, DType::bf16, 64);
  EXPECT_EQ(kernels_->cached_graphs(), graphs) << "the same shapes built new cuDNN graphs";
}

TEST_F(CudnnBlockKernels, Fp32InputsAreRefusedClearly) {
  HostTensor q(DType::f32, {1, 16, 2, 64}), k(DType::f32, {1, 16, 2, 64}), out(DType::f32, {1, 16, 2, 64}),
      lse(DType::f32, {1, 2, 16});
  DeviceTwin q_gpu(*gpu_, q), k_gpu(*gpu_, k), out_gpu(*gpu_, out), lse_gpu(*gpu_, lse);
  ForwardBlock block;
  block.q = q_gpu.view();
  block.segments.push_back({k_gpu.view(), k_gpu.view(), 0});
  block.out = out_gpu.view();
  block.lse = lse_gpu.view();
  try {
    kernels_->forward(block);
    FAIL() << "fp32 inputs were accepted";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("take bf16 or fp16 inputs, not fp32"), std::string::npos) << error.what();
  }
}

TEST_F(CudnnBlockKernels, MakeBlockKernelsGivesTheCudaKernels) {
  for (KernelChoice kernel : {KernelChoice::automatic, KernelChoice::own, KernelChoice::cudnn}) {
    SCOPED_TRACE("kernel " + kernel_choice_name(kernel));
    const auto kernels = make_block_kernels(Device{DeviceKind::cuda, 0}, {DType::bf16, 128}, kernel);
    EXPECT_NE(dynamic_cast<cuda::CudaBlockKernels*>(kernels.get()), nullptr);
    EXPECT_EQ(kernels->device(), (Device{DeviceKind::cuda, 0}));
  }
}

}  // namespace
}  // namespace spattn::test
