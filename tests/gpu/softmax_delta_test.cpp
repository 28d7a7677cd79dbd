// softmax_delta on the GPU against the CPU kernels, for every dtype of out and dout, head
// dimensions from one lane's pack to several passes of a warp, and strided views. The CPU adds in
// SIMD lanes, the GPU in a tree over a row's lanes: the sums differ by rounding that grows with
// head_dim.

#include <gtest/gtest.h>

#include <string>

#include "cuda_test_support.hpp"

namespace spattn::test {
namespace {

/// Allowed |GPU - CPU| of a sum of head_dim products of standard normals, rounded in two orders.
double delta_tolerance(int64_t head_dim) { return 2e-7 * static_cast<double>(head_dim); }
constexpr double kDeltaRelative = 1e-6;

using SoftmaxDelta = CudaKernelTest;

TEST_F(SoftmaxDelta, MatchesTheCpuForContiguousTensors) {
  for (DType dtype : {DType::f32, DType::f16, DType::bf16})
    // 1 to 32 lanes a row (row_kernels.cu): 8 and 16 take one and two packs of 8, 20 five packs of 4.
    for (int64_t head_dim : {8, 16, 20, 32, 64, 72, 128, 256}) {
      SCOPED_TRACE(dtype_name(dtype) + ", head_dim " + std::to_string(head_dim));
      HostTensor out(dtype, {2, 29, 3, head_dim});
      HostTensor dout(dtype, {2, 29, 3, head_dim});
      HostTensor delta(DType::f32, {2, 3, 29});
      out.randomize(generator_);
      dout.randomize(generator_);
      delta.poison();
      DeviceTwin out_gpu(*gpu_, out), dout_gpu(*gpu_, dout), delta_gpu(*gpu_, delta);
      gpu_->softmax_delta(out_gpu.view(), dout_gpu.view(), delta_gpu.view());
      cpu_->softmax_delta(out.view(), dout.view(), delta.view());
      expect_close(delta, delta_gpu.download(), delta_tolerance(head_dim), kDeltaRelative, "delta");
    }
}

TEST_F(SoftmaxDelta, MatchesTheCpuForStridedViewsOfMixedDtypes) {
  for (DType out_dtype : {DType::f32, DType::f16, DType::bf16}) {
    const DType dout_dtype = out_dtype == DType::f32 ? DType::bf16 : DType::f32;
    SCOPED_TRACE("out " + dtype_name(out_dtype) + ", dout " + dtype_name(dout_dtype));
    constexpr int64_t kHeadDim = 96;
    HostTensor out(out_dtype, {2, 31, 7, kHeadDim});   // sliced along heads
    HostTensor dout(dout_dtype, {2, 4, 40, kHeadDim});  // (B, H, S, D) seen as (B, S, H, D), sliced along seq
    HostTensor delta(DType::f32, {2, 4, 36});           // sliced along seq
    out.randomize(generator_);
    dout.randomize(generator_);
    delta.poison();
    const TensorView out_view = out.view().slice(2, 3, 4);                             // (2, 31, 4, 96)
    const TensorView dout_view = seq_heads_transposed(dout.view()).slice(1, 9, 31);   // (2, 31, 4, 96)
    const TensorView delta_view = delta.view().slice(2, 2, 31);                       // (2, 4, 31)
    DeviceTwin out_gpu(*gpu_, out), dout_gpu(*gpu_, dout), delta_gpu(*gpu_, delta);
    gpu_->softmax_delta(out_gpu.twin(out_view), dout_gpu.twin(dout_view), delta_gpu.twin(delta_view));
    cpu_->softmax_delta(out_view, dout_view, delta_view);
    // Outside the slice delta stays NaN on both sides; inside, a NaN is a row never written.
    expect_close(delta, delta_gpu.download(), delta_tolerance(kHeadDim), kDeltaRelative, "delta (strided)");
  }
}

}  // namespace
}  // namespace spattn::test
