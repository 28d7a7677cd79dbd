// The own Hopper forward (src/kernels/hopper/) against the fp64 reference of the same block and
// against cuDNN's error on the same inputs: masks none / causal / windows on one or both sides in
// global positions, query and key counts that are not multiples of a tile, segments with gaps
// and out of order, more segments than one launch takes, accumulation onto a running result,
// rows that see no key, long key tiles under masks, GQA 1:1 to 8:1, batch 1 and 3, head dims 64
// and 128, bf16 and fp16, final_out, bad blocks, a larger block run four times for identical
// bits (twice on one stream, once on another, once from a CUDA graph), and a block without a mask
// of more query tiles than the GPU runs at once, accumulated. Outputs are NaN-poisoned
// before every run so that unwritten elements show. Each test runs the head dims the build
// has (SPATTN_HOPPER_HEAD_DIMS); where the GPU or the build has no own forward for its cases, it
// says why and skips.
//
// Tolerance: as the cuDNN tests' (2e-2 of the largest reference magnitude for bf16, 5e-3 for
// fp16; the probabilities are rounded to the input dtype before P V), and the own kernel's error
// must be at most 1.25x cuDNN's on the same inputs (plus 1e-6 of the magnitude, fp32 round-off).

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "block_reference.hpp"
#include "cuda_test_support.hpp"
#include "kernels/cuda/cuda_block_kernels.hpp"
#include "kernels/hopper/hopper_forward.hpp"
#include "spattn/error.hpp"

namespace spattn::test {
namespace {

const Device kGpu{DeviceKind::cuda, 0};
const AttentionMask kNoMask{-1, -1};
const AttentionMask kCausal{-1, 0};

/// A block's inputs on the GPU and its outputs there, NaN-poisoned (or holding a given running
/// result for accumulate).
struct DeviceBlock {
  std::unique_ptr<DeviceTwin> q;
  std::vector<std::unique_ptr<DeviceTwin>> k, v;
  std::unique_ptr<DeviceTwin> out, lse, final_out;
  ForwardBlock block;

  DeviceBlock(cuda::CudaElementwiseKernels& gpu, const BlockProblem& p, const BlockCase& c, int64_t head_dim,
              float scale, const HostTensor* running_out = nullptr, const HostTensor* running_lse = nullptr) {
    const int64_t B = c.batch, S = c.q_rows, H = c.heads;
    q = std::make_unique<DeviceTwin>(gpu, p.q);
    block.q = q->view();
    block.q_position = c.q_position;
    block.mask = c.mask;
    block.scale = scale;
    for (std::size_t s = 0; s < c.segments.size(); ++s) {
      k.push_back(std::make_unique<DeviceTwin>(gpu, p.k[s]));
      v.push_back(std::make_unique<DeviceTwin>(gpu, p.v[s]));
      block.segments.push_back({k.back()->view(), v.back()->view(), c.segments[s].position});
    }
    HostTensor poisoned_out(DType::f32, {B, S, H, head_dim}), poisoned_lse(DType::f32, {B, H, S});
    poisoned_out.poison();
    poisoned_lse.poison();
    out = std::make_unique<DeviceTwin>(gpu, running_out ? *running_out : poisoned_out);
    lse = std::make_unique<DeviceTwin>(gpu, running_lse ? *running_lse : poisoned_lse);
    block.out = out->view();
    block.lse = lse->view();
    block.accumulate = running_out != nullptr;
  }

  /// Asks for the result rounded into a NaN-poisoned `dtype` tensor (ForwardBlock::final_out).
  void with_final_out(cuda::CudaElementwiseKernels& gpu, DType dtype) {
    HostTensor poisoned(dtype, {block.q.size(0), block.q.size(1), block.q.size(2), block.q.size(3)});
    poisoned.poison();
    final_out = std::make_unique<DeviceTwin>(gpu, poisoned);
    block.final_out = final_out->view();
  }
};

class HopperForward : public CudaKernelTest {
 protected:
  void SetUp() override {
    CudaKernelTest::SetUp();
    if (IsSkipped()) return;
    cudnn_ = std::make_unique<cuda::CudaBlockKernels>(kGpu, gpu_->stream(), KernelChoice::cudnn,
                                                      /*deterministic=*/false, KernelInputs{});
    tile_counter_ = std::make_unique<cuda::hopper::QueryTileCounter>(kGpu);
  }

  /// "" when the own forward runs (dtype, head_dim) here; else the reason, which must say
  /// something (the caller skips with it).
  static std::string unsupported(DType dtype, int64_t head_dim) {
    const std::string reason = cuda::hopper_forward_unsupported(kGpu, dtype, head_dim);
    EXPECT_TRUE(reason.empty() || reason.size() > 20) << "an unclear reason: '" << reason << "'";
    return reason;
  }

  /// The head dims, 64 and 128, that the own forward runs in `dtype` here (runnable_head_dims).
  static std::vector<int64_t> head_dims(DType dtype) {
    return runnable_head_dims({64, 128}, [dtype](int64_t head_dim) { return unsupported(dtype, head_dim); });
  }

  void run_own(DeviceBlock& device_block) {
    ASSERT_EQ(cuda::hopper_forward_unsupported(device_block.block), "");
    cuda::hopper_forward(device_block.block, gpu_->stream(), tile_counter_.get());
  }

  /// The own forward of `c` against fp64 and against cuDNN's error on the same inputs.
  void check_case(const BlockCase& c, DType dtype, int64_t head_dim, float scale) {
    SCOPED_TRACE(c.name + ", " + dtype_name(dtype) + ", head_dim " + std::to_string(head_dim) + ", scale " +
                 std::to_string(scale));
    const double tolerance = dtype == DType::bf16 ? 2e-2 : 5e-3;
    const BlockProblem p = make_problem(c, dtype, head_dim, scale, generator_, /*with_backward=*/false);
    DeviceBlock own(*gpu_, p, c, head_dim, scale), cudnn(*gpu_, p, c, head_dim, scale);
    run_own(own);
    cudnn_->forward(cudnn.block);
    const double own_out = expect_near_reference(p.out, own.out->download(), tolerance, "own out vs fp64");
    const double own_lse = expect_near_reference(p.lse, own.lse->download(), 1e-3, "own lse vs fp64");
    const double cudnn_out = expect_near_reference(p.out, cudnn.out->download(), tolerance, "cuDNN out vs fp64");
    const double cudnn_lse = expect_near_reference(p.lse, cudnn.lse->download(), 1e-3, "cuDNN lse vs fp64");
    EXPECT_LE(own_out, 1.25 * cudnn_out + 1e-6) << "own out error " << own_out << ", cuDNN's " << cudnn_out;
    EXPECT_LE(own_lse, 1.25 * cudnn_lse + 1e-6) << "own lse error " << own_lse << ", cuDNN's " << cudnn_lse;
  }

  /// check_case for both dtypes and the head dims that the own forward runs here (head_dims).
  void check_all(const BlockCase& c, float scale = 0.0f) {
    for (DType dtype : {DType::bf16, DType::f16})
      for (const int64_t head_dim : head_dims(dtype)) {
        check_case(c, dtype, head_dim, scale > 0 ? scale : 1.0f / std::sqrt(static_cast<float>(head_dim)));
      }
  }

  /// The bf16 inputs and fp64 results of `c` at `head_dim`, softmax scale 1 / sqrt(head_dim).
  struct Bf16Case {
    float scale;
    BlockProblem problem;
  };
  Bf16Case bf16_case(const BlockCase& c, int64_t head_dim) {
    const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
    return {scale, make_problem(c, DType::bf16, head_dim, scale, generator_, /*with_backward=*/false)};
  }

  std::unique_ptr<cuda::CudaBlockKernels> cudnn_;
  std::unique_ptr<cuda::hopper::QueryTileCounter> tile_counter_;  // the own launches on gpu_'s stream
};

TEST_F(HopperForward, NoMaskSegmentsWithAGap) {
  check_all({"no mask: q 200 at 1000 vs 130 at 0 and 257 at 1500", 200, 1000, {{130, 0}, {257, 1500}}, kNoMask});
}

TEST_F(HopperForward, CausalAgainstSegmentsOutOfOrder) {
  // keys [500, 577) partly visible, [0, 128) all visible, [250, 300) all visible; rows 0..199 see
  // none of the first segment.
  check_all({"causal: q 333 at 300 vs 77 at 500, 128 at 0, 50 at 250", 333, 300, {{77, 500}, {128, 0}, {50, 250}},
             kCausal},
            0.3f);
}

TEST_F(HopperForward, CausalDiagonalOfOneRowAndOneKey) {
  check_all({"causal: q 1 at 5 vs 1 at 5", 1, 5, {{1, 5}}, kCausal});
}

TEST_F(HopperForward, WindowToTheLeft) {
  check_all({"window (100, 0): q 200 at 150 vs 300 at 0", 200, 150, {{300, 0}}, AttentionMask{100, 0}});
}

TEST_F(HopperForward, TwoSidedWindow) {
  check_all({"window (70, 30): q 77 at 64 vs 257 at 0", 77, 64, {{257, 0}}, AttentionMask{70, 30}});
}

TEST_F(HopperForward, WindowToTheRightOnly) {
  check_all({"window (-1, 20): q 130 at 100 vs 200 at 0 and 100 at 300", 130, 100, {{200, 0}, {100, 300}},
             AttentionMask{-1, 20}});
}

TEST_F(HopperForward, LongKeyTilesUnderMasks) {
  // Query tiles that see 2k keys or more on average take the long key tiles (176 or 192 keys,
  // long_key_tiles in forward_kernel.cuh) under a mask too: diagonals and window edges that cut
  // them, and segment ends that are not multiples of them.
  check_all({"causal: q 300 at 2600 vs 1400 at 0 and 1300 at 1400", 300, 2600, {{1400, 0}, {1300, 1400}}, kCausal, 1, 4,
             2});
  check_all({"window (2500, 40): q 260 at 3000 vs 1700 at 300 and 1100 at 2100", 260, 3000, {{1700, 300}, {1100, 2100}},
             AttentionMask{2500, 40}, 1, 4, 2});
}

TEST_F(HopperForward, GroupedQueryAttentionAndBatches) {
  for (const int64_t kv_heads : {8, 2, 1})
    for (const int64_t batch : {1, 3}) {
      BlockCase c{"GQA 8:" + std::to_string(kv_heads) + ", batch " + std::to_string(batch) + ", causal q 150 at 100 vs 250 at 0",
                  150, 100, {{250, 0}}, kCausal, batch, 8, kv_heads};
      check_all(c);
    }
}

TEST_F(HopperForward, MoreSegmentsThanOneLaunchTakes) {
  BlockCase c{"12 segments of 1 to 89 keys, causal", 180, 700, {}, kCausal};
  for (int s = 0; s < 12; ++s) c.segments.push_back({1 + (s * 37) % 89, int64_t{60} * s + (s % 3) * 7});
  check_all(c);
  c.name = "12 segments of 1 to 89 keys, no mask";
  c.mask = kNoMask;
  check_all(c, 0.3f);
}

TEST_F(HopperForward, AccumulatesOntoARunningResult) {
  // The queries against segments A first (written), then against B (accumulated): the result is
  // the reference over A and B. And B alone accumulated onto an empty running result.
  for (DType dtype : {DType::bf16, DType::f16})
    for (const int64_t head_dim : head_dims(dtype)) {
      SCOPED_TRACE(dtype_name(dtype) + ", head_dim " + std::to_string(head_dim));
      const BlockCase both{"window (150, 10): q 160 at 400 vs 200 at 100 and 190 at 330", 160, 400,
                           {{200, 100}, {190, 330}}, AttentionMask{150, 10}};
      const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
      const double tolerance = dtype == DType::bf16 ? 2e-2 : 5e-3;
      const BlockProblem p = make_problem(both, dtype, head_dim, scale, generator_, false);
      DeviceBlock first(*gpu_, p, both, head_dim, scale);
      first.block.segments.resize(1);
      run_own(first);
      const HostTensor running_out = first.out->download(), running_lse = first.lse->download();
      DeviceBlock second(*gpu_, p, both, head_dim, scale, &running_out, &running_lse);
      second.block.segments.erase(second.block.segments.begin());
      run_own(second);
      expect_near_reference(p.out, second.out->download(), tolerance, "accumulated out vs fp64");
      expect_near_reference(p.lse, second.lse->download(), 1e-3, "accumulated lse vs fp64");

      HostTensor empty_out(DType::f32, {both.batch, both.q_rows, both.heads, head_dim}),
          empty_lse(DType::f32, {both.batch, both.heads, both.q_rows});
      empty_out.fill(0.0);
      empty_lse.fill(-std::numeric_limits<double>::infinity());
      DeviceBlock onto_empty(*gpu_, p, both, head_dim, scale, &empty_out, &empty_lse);
      run_own(onto_empty);
      expect_near_reference(p.out, onto_empty.out->download(), tolerance, "out accumulated onto empty vs fp64");
      expect_near_reference(p.lse, onto_empty.lse->download(), 1e-3, "lse accumulated onto empty vs fp64");
    }
}

TEST_F(HopperForward, RowsThatSeeNoKey) {
  // Causal q [0, 64) vs keys [32, 96): rows 0..31 see nothing. Written: out 0, lse -inf (the
  // reference's -inf rows must match exactly, never NaN). Accumulated onto a random running
  // result: those rows keep it bit for bit.
  const BlockCase c{"causal, rows without keys: q 64 at 0 vs 64 at 32", 64, 0, {{64, 32}}, kCausal};
  for (const int64_t head_dim : head_dims(DType::bf16)) {
    const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
    const BlockProblem p = make_problem(c, DType::bf16, head_dim, scale, generator_, false);
    DeviceBlock written(*gpu_, p, c, head_dim, scale);
    run_own(written);
    const HostTensor out = written.out->download(), lse = written.lse->download();
    expect_near_reference(p.out, out, 2e-2, "out vs fp64");
    expect_near_reference(p.lse, lse, 1e-3, "lse vs fp64");
    const int64_t D = head_dim;
    for (int64_t b = 0; b < c.batch; ++b)
      for (int64_t h = 0; h < c.heads; ++h)
        for (int64_t i = 0; i < 32; ++i) {
          ASSERT_EQ(lse.at((b * c.heads + h) * c.q_rows + i), -std::numeric_limits<double>::infinity());
          for (int64_t d = 0; d < D; ++d) ASSERT_EQ(out.at(((b * c.q_rows + i) * c.heads + h) * D + d), 0.0);
        }

    HostTensor running_out(DType::f32, {c.batch, c.q_rows, c.heads, D}), running_lse(DType::f32, {c.batch, c.heads, c.q_rows});
    running_out.randomize(generator_);
    running_lse.randomize(generator_);
    DeviceBlock accumulated(*gpu_, p, c, head_dim, scale, &running_out, &running_lse);
    run_own(accumulated);
    const HostTensor merged_out = accumulated.out->download(), merged_lse = accumulated.lse->download();
    for (int64_t b = 0; b < c.batch; ++b)
      for (int64_t h = 0; h < c.heads; ++h)
        for (int64_t i = 0; i < 32; ++i) {
          const int64_t row = (b * c.heads + h) * c.q_rows + i;
          ASSERT_EQ(merged_lse.at(row), running_lse.at(row)) << "lse of a row without keys changed";
          for (int64_t d = 0; d < D; ++d) {
            const int64_t element = ((b * c.q_rows + i) * c.heads + h) * D + d;
            ASSERT_EQ(merged_out.at(element), running_out.at(element)) << "out of a row without keys changed";
          }
        }
  }
}

TEST_F(HopperForward, FinalOutIsTheResultRoundedOnce) {
  // final_out holds exactly what rounding the fp32 out of the same block gives, with and
  // without accumulate, also for a block that needs two launches.
  for (DType dtype : {DType::bf16, DType::f16}) {
    const std::string reason = unsupported(dtype, 128);
    if (!reason.empty()) GTEST_SKIP() << reason;
    BlockCase c{"causal, 10 segments: q 100 at 500", 100, 500, {}, kCausal};
    for (int s = 0; s < 10; ++s) c.segments.push_back({40 + 7 * s, int64_t{50} * s});
    const float scale = 0.1f;
    const BlockProblem p = make_problem(c, dtype, 128, scale, generator_, false);
    for (const bool accumulate : {false, true}) {
      SCOPED_TRACE(dtype_name(dtype) + (accumulate ? ", accumulated" : ", written"));
      HostTensor running_out(DType::f32, {c.batch, c.q_rows, c.heads, 128}), running_lse(DType::f32, {c.batch, c.heads, c.q_rows});
      running_out.randomize(generator_);
      running_lse.randomize(generator_);
      DeviceBlock plain(*gpu_, p, c, 128, scale, accumulate ? &running_out : nullptr, accumulate ? &running_lse : nullptr);
      DeviceBlock rounded(*gpu_, p, c, 128, scale, accumulate ? &running_out : nullptr, accumulate ? &running_lse : nullptr);
      rounded.with_final_out(*gpu_, dtype);
      run_own(plain);
      run_own(rounded);
      HostTensor expected(dtype, {c.batch, c.q_rows, c.heads, 128});
      cpu_->copy(plain.out->download().view(), expected.view());
      expect_identical(expected, rounded.final_out->download(), "final_out against the rounded out");
      expect_identical(plain.lse->download(), rounded.lse->download(), "lse with final_out");
    }
  }
}

TEST_F(HopperForward, LargerBlockIsAccurateAndDeterministic) {
  const BlockCase c{"causal: q 900 at 700 vs 500 at 0, 500 at 500, 500 at 1000 (16 heads, 4 kv heads)", 900, 700,
                    {{500, 0}, {500, 500}, {500, 1000}}, kCausal, 2, 16, 4};
  for (const int64_t head_dim : head_dims(DType::bf16)) {
    SCOPED_TRACE("head_dim " + std::to_string(head_dim));
    const auto [scale, p] = bf16_case(c, head_dim);
    // 256 query tiles at head dim 128, 160 at 64 (192-row tiles), more than an H100's 132
    // multiprocessors: the causal mask's tile counter hands them out, and each launch must find it
    // reset by the one before on its stream. The same bits again, on a second stream (its own
    // counter), and from a CUDA graph (captured launches take the static schedule: a graph may be
    // replayed on any stream).
    DeviceBlock first(*gpu_, p, c, head_dim, scale), second(*gpu_, p, c, head_dim, scale),
        third(*gpu_, p, c, head_dim, scale), fourth(*gpu_, p, c, head_dim, scale);
    run_own(first);
    run_own(second);
    cudaStream_t other = nullptr;
    ASSERT_EQ(cudaStreamCreateWithFlags(&other, cudaStreamNonBlocking), cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(gpu_->stream()), cudaSuccess);  // the inputs are uploaded
    cuda::hopper::QueryTileCounter other_counter(kGpu);
    cuda::hopper_forward(third.block, other, &other_counter);
    cudaGraph_t graph = nullptr;
    cudaGraphExec_t replay = nullptr;
    ASSERT_EQ(cudaStreamBeginCapture(other, cudaStreamCaptureModeThreadLocal), cudaSuccess);
    cuda::hopper_forward(fourth.block, other, &other_counter);
    ASSERT_EQ(cudaStreamEndCapture(other, &graph), cudaSuccess);
    ASSERT_EQ(cudaGraphInstantiate(&replay, graph, 0), cudaSuccess);
    ASSERT_EQ(cudaGraphLaunch(replay, other), cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(other), cudaSuccess);
    ASSERT_EQ(cudaGraphExecDestroy(replay), cudaSuccess);
    ASSERT_EQ(cudaGraphDestroy(graph), cudaSuccess);
    ASSERT_EQ(cudaStreamDestroy(other), cudaSuccess);
    const HostTensor out = first.out->download(), lse = first.lse->download();
    expect_near_reference(p.out, out, 2e-2, "out vs fp64");
    expect_near_reference(p.lse, lse, 1e-3, "lse vs fp64");
    expect_identical(out, second.out->download(), "out of a second run");
    expect_identical(lse, second.lse->download(), "lse of a second run");
    expect_identical(out, third.out->download(), "out of a run on another stream");
    expect_identical(lse, third.lse->download(), "lse of a run on another stream");
    expect_identical(out, fourth.out->download(), "out of a run from a CUDA graph");
    expect_identical(lse, fourth.lse->download(), "lse of a run from a CUDA graph");
  }
}

TEST_F(HopperForward, TileCounterLivesOnItsNamedGpuAndRefusesAnother) {
  int gpus = 0;
  ASSERT_EQ(cudaGetDeviceCount(&gpus), cudaSuccess);
  if (gpus < 2) GTEST_SKIP() << "needs two GPUs, has " << gpus;
  const std::string reason = unsupported(DType::bf16, 128);
  if (!reason.empty()) GTEST_SKIP() << reason;
  // cuda:0 current, as in a process that never chose one: the counter still goes to cuda:1.
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  const Device second_gpu{DeviceKind::cuda, 1};
  const cuda::hopper::QueryTileCounter elsewhere(second_gpu);
  cudaPointerAttributes attributes{};
  ASSERT_EQ(cudaPointerGetAttributes(&attributes, elsewhere.data()), cudaSuccess);
  EXPECT_EQ(attributes.device, 1);
  // A launch on cuda:0 with it would read it across the bus (or fault without peer access).
  const BlockCase c{"causal: q 300 at 200 vs 500 at 0", 300, 200, {{500, 0}}, kCausal, 1, 4, 2};
  const auto [scale, p] = bf16_case(c, 128);
  DeviceBlock block(*gpu_, p, c, 128, scale);
  try {
    cuda::hopper_forward(block.block, gpu_->stream(), &elsewhere);
    FAIL() << "a tile counter on cuda:1 for a block on cuda:0 was taken";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("tile counter is on cuda:1 but the block's tensors are on cuda:0"),
              std::string::npos)
        << error.what();
  }
}

TEST_F(HopperForward, NoMaskShortKeyTilesAndRepeatedVisits) {
  // Without a mask: segments whose last key tile holds 50 keys or a part of a tile, GQA and
  // batches; then more query tiles than the GPU runs at once (every CTA visits several), accumulated
  // onto a first launch's result, and the same bits on a second run.
  check_all({"no mask: q 500 at 1000 vs 50 at 0, 333 at 200 and 700 at 1500", 500, 1000,
             {{50, 0}, {333, 200}, {700, 1500}}, kNoMask, 3, 8, 2});
  const BlockCase c{"no mask: q 1000 at 0 vs 700 at 0 and 640 at 700 (batch 2, 16 heads, 4 kv heads)", 1000, 0,
                    {{700, 0}, {640, 700}}, kNoMask, 2, 16, 4};
  for (const int64_t head_dim : head_dims(DType::bf16)) {
    SCOPED_TRACE("head_dim " + std::to_string(head_dim));
    const auto [scale, p] = bf16_case(c, head_dim);
    DeviceBlock first(*gpu_, p, c, head_dim, scale);
    first.block.segments.resize(1);
    run_own(first);
    const HostTensor running_out = first.out->download(), running_lse = first.lse->download();
    DeviceBlock accumulated(*gpu_, p, c, head_dim, scale, &running_out, &running_lse),
        again(*gpu_, p, c, head_dim, scale, &running_out, &running_lse);
    accumulated.block.segments.erase(accumulated.block.segments.begin());
    again.block.segments.erase(again.block.segments.begin());
    run_own(accumulated);
    run_own(again);
    const HostTensor out = accumulated.out->download(), lse = accumulated.lse->download();
    expect_near_reference(p.out, out, 2e-2, "accumulated out vs fp64");
    expect_near_reference(p.lse, lse, 1e-3, "accumulated lse vs fp64");
    expect_identical(out, again.out->download(), "out of a second run");
    expect_identical(lse, again.lse->download(), "lse of a second run");
  }
}

TEST_F(HopperForward, BadBlocksAreRefusedWithTheReason) {
  const std::string reason = unsupported(DType::bf16, 64);
  if (!reason.empty()) GTEST_SKIP() << reason;
  const BlockCase c{"q 32 at 0 vs 32 at 0", 32, 0, {{32, 0}}, kNoMask};
  const BlockProblem p = make_problem(c, DType::bf16, 64, 0.125f, generator_, false);
  DeviceBlock good(*gpu_, p, c, 64, 0.125f);
  ASSERT_EQ(cuda::hopper_forward_unsupported(good.block), "");
  const auto expect_refused = [&](ForwardBlock block, const std::string& words) {
    const std::string why = cuda::hopper_forward_unsupported(block);
    EXPECT_NE(why.find(words), std::string::npos) << "expected '" << words << "' in: '" << why << "'";
    // Refused with the same reason when asked to launch.
    EXPECT_EQ(cuda::try_hopper_forward(block, gpu_->stream(), tile_counter_.get()), why);
  };
  ForwardBlock block = good.block;
  block.q.strides = {block.q.stride(0), block.q.stride(1), 1, block.q.stride(2)};  // head_dim not contiguous
  expect_refused(block, "head_dim stride");
  block = good.block;
  block.q.data = static_cast<char*>(block.q.data) + 2;  // one element past an aligned start
  expect_refused(block, "16-byte aligned");
  block = good.block;
  block.q.dtype = DType::f32;
  expect_refused(block, "bf16 or fp16");
  block = good.block;
  block.out.dtype = DType::bf16;
  expect_refused(block, "out");
  for (const float scale : {-1.0f, std::numeric_limits<float>::quiet_NaN()}) {
    block = good.block;
    block.scale = scale;
    expect_refused(block, "scale");
  }
  EXPECT_NE(cuda::hopper_forward_unsupported(kGpu, DType::bf16, 96).find("head dim 96"), std::string::npos);
  EXPECT_NE(cuda::hopper_forward_unsupported(Device::cpu(), DType::bf16, 64).find("CUDA"), std::string::npos);
}

}  // namespace
}  // namespace spattn::test
