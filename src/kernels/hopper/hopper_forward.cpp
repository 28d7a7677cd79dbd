#include "kernels/hopper/hopper_forward.hpp"

#include <cstdint>
#include <sstream>

#include "core/cuda/cuda_check.hpp"
#include "core/cuda/current_device_guard.hpp"
#include "kernels/hopper/forward_problem.hpp"
#include "kernels/hopper/hopper_support.hpp"
#include "spattn/error.hpp"

namespace spattn::cuda {
namespace {

using hopper::ForwardProblem;
using hopper::ForwardSegment;
using hopper::kMaxSegmentsPerLaunch;
using hopper::copy_strides;
using hopper::tma_addressable;

constexpr const char* kOwnForward = "the own forward";

using Launcher = void (*)(const ForwardProblem&, int, cudaStream_t);

/// The instantiation of (head_dim, dtype) in this build, or nullptr (CMake's SPATTN_HOPPER_HEAD_DIMS).
Launcher launcher_for(int64_t head_dim, DType dtype) {
  const bool bf16 = dtype == DType::bf16;
#ifdef SPATTN_HOPPER_HEAD_DIM_64
  if (head_dim == 64) return bf16 ? &hopper::launch_forward<64, DType::bf16> : &hopper::launch_forward<64, DType::f16>;
#endif
#ifdef SPATTN_HOPPER_HEAD_DIM_128
  if (head_dim == 128) return bf16 ? &hopper::launch_forward<128, DType::bf16> : &hopper::launch_forward<128, DType::f16>;
#endif
  (void)bf16;
  (void)head_dim;
  return nullptr;
}

bool built(int64_t head_dim) { return launcher_for(head_dim, DType::bf16) != nullptr; }

std::string block_unsupported(const ForwardBlock& block) {
  const TensorView& q = block.q;
  std::string reason = hopper_forward_unsupported(q.device, q.dtype, q.ndim == 4 ? q.size(3) : 0);
  if (!reason.empty()) return reason;
  if (!(reason = tma_addressable(kOwnForward, q, "q")).empty()) return reason;
  std::ostringstream why;
  for (const KvSegment& segment : block.segments)
    if (!(reason = hopper::key_values_unsupported(kOwnForward, segment, q)).empty()) return reason;
  const auto address = [](const TensorView& tensor) { return reinterpret_cast<std::uintptr_t>(tensor.data); };
  const TensorView& out = block.out;
  if (out.dtype != DType::f32 || out.ndim != 4 || out.stride(3) != 1 || address(out) % 8 != 0 || out.stride(0) % 2 != 0 ||
      out.stride(1) % 2 != 0 || out.stride(2) % 2 != 0) {
    why << "out " << out.describe() << " must be fp32 with head_dim contiguous and even strides from an 8-byte aligned "
        << "address (the own forward writes pairs of floats)";
    return why.str();
  }
  for (int dim = 0; dim < 4; ++dim)
    if (out.size(dim) != q.size(dim)) {
      why << "out " << out.describe() << " must have q's shape " << q.describe();
      return why.str();
    }
  const TensorView& lse = block.lse;
  if (lse.dtype != DType::f32 || lse.ndim != 3 || lse.size(0) != q.size(0) || lse.size(1) != q.size(2) ||
      lse.size(2) != q.size(1)) {
    why << "lse " << lse.describe() << " must be fp32 (B, H, Sq) for q " << q.describe();
    return why.str();
  }
  const TensorView& final_out = block.final_out;
  if (final_out.data != nullptr) {
    bool same_shape = final_out.ndim == 4;
    for (int dim = 0; same_shape && dim < 4; ++dim) same_shape = final_out.size(dim) == q.size(dim);
    if (!same_shape || final_out.dtype != q.dtype || final_out.device != q.device || final_out.stride(3) != 1 ||
        address(final_out) % 4 != 0 || final_out.stride(0) % 2 != 0 || final_out.stride(1) % 2 != 0 ||
        final_out.stride(2) % 2 != 0) {
      why << "final_out " << final_out.describe() << " must have q's shape, dtype and device with head_dim contiguous "
          << "and even strides from a 4-byte aligned address (the own forward writes pairs)";
      return why.str();
    }
  }
  // The schedule numbers query tiles in int, with room to step past the last.
  const int64_t query_tiles = (q.size(1) + hopper::kQueryTileRows - 1) / hopper::kQueryTileRows * q.size(2) * q.size(0);
  if (query_tiles > (int64_t{1} << 30)) {
    why << "q " << q.describe() << " makes " << query_tiles << " query tiles; the own forward takes at most 2^30";
    return why.str();
  }
  return hopper::scale_unsupported(block.scale);
}

}  // namespace

std::string hopper_forward_unsupported(const Device& device, DType dtype, int64_t head_dim) {
  return hopper::device_unsupported(kOwnForward, device, dtype, head_dim, launcher_for(head_dim, dtype) != nullptr,
                                    hopper::built_head_dims(built));
}

std::string hopper_forward_unsupported(const ForwardBlock& block) { return block_unsupported(block); }

namespace {

/// Whether launches on `stream` go into a CUDA graph now: a graph may be replayed on any stream,
/// beside other launches that use the same tile counter, so captured launches take the static
/// schedule.
bool capturing(cudaStream_t stream) {
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(stream, &capture) != cudaSuccess) {
    // The legacy default stream while another stream captures: a launch there is refused anyway.
    cudaGetLastError();
    return true;
  }
  return capture != cudaStreamCaptureStatusNone;
}

}  // namespace

std::string try_hopper_forward(const ForwardBlock& block, cudaStream_t stream,
                               const hopper::QueryTileCounter* tile_counter) {
  const std::string reason = block_unsupported(block);
  if (!reason.empty()) return reason;
  const TensorView& q = block.q;
  SPATTN_CHECK(tile_counter == nullptr || tile_counter->device() == q.device,
               "the own Hopper forward's tile counter is on " << device_name(tile_counter->device())
                                                               << " but the block's tensors are on "
                                                               << device_name(q.device));
  if (q.numel() == 0) return "";
  const Launcher launch = launcher_for(q.size(3), q.dtype);
  CurrentDeviceGuard guard(q.device.index);
  const int multiprocessors = hopper::gpu_facts(q.device.index).multiprocessors;

  ForwardProblem problem;
  problem.q = q.data;
  copy_strides(q, problem.q_strides);
  problem.batch = static_cast<int32_t>(q.size(0));
  problem.rows = static_cast<int32_t>(q.size(1));
  problem.heads = static_cast<int32_t>(q.size(2));
  problem.q_position = block.q_position;
  problem.mask_left = block.mask.left;
  problem.mask_right = block.mask.right;
  problem.scale = block.scale;
  problem.out = static_cast<float*>(block.out.data);
  copy_strides(block.out, problem.out_strides);
  problem.lse = static_cast<float*>(block.lse.data);
  for (int dim = 0; dim < 3; ++dim) problem.lse_strides[dim] = block.lse.stride(dim);
  problem.kv_heads = problem.heads;  // until a segment says; only read where there are segments
  problem.accumulate = block.accumulate;
  problem.tile_counter = tile_counter == nullptr || capturing(stream) ? nullptr : tile_counter->data();

  // Segments in launches of up to kMaxSegmentsPerLaunch; each launch after the first merges
  // into what the earlier ones wrote, and only the last writes final_out. Segments without keys
  // take no place.
  int segments_left = 0;
  for (const KvSegment& segment : block.segments) segments_left += segment.k.size(1) > 0;
  bool launched = false;
  for (const KvSegment& segment : block.segments) {
    if (segment.k.size(1) == 0) continue;
    --segments_left;
    ForwardSegment& keys = problem.segments[problem.num_segments++];
    keys.k = segment.k.data;
    keys.v = segment.v.data;
    copy_strides(segment.k, keys.k_strides);
    copy_strides(segment.v, keys.v_strides);
    keys.keys = static_cast<int32_t>(segment.k.size(1));
    keys.position = segment.position;
    problem.kv_heads = static_cast<int32_t>(segment.k.size(2));
    if (problem.num_segments == kMaxSegmentsPerLaunch && segments_left > 0) {
      launch(problem, multiprocessors, stream);
      launched = true;
      problem.num_segments = 0;
      problem.accumulate = true;
    }
  }
  problem.final_out = block.final_out.data;
  copy_strides(block.final_out, problem.final_out_strides);
  // The last launch: also without segments, where out 0, lse -inf must be written (no earlier
  // launch, no accumulate) or where final_out must be.
  if (problem.num_segments > 0 || !(launched || block.accumulate) || problem.final_out != nullptr)
    launch(problem, multiprocessors, stream);
  return "";  // launched
}

void hopper_forward(const ForwardBlock& block, cudaStream_t stream, const hopper::QueryTileCounter* tile_counter) {
  const std::string reason = try_hopper_forward(block, stream, tile_counter);
  SPATTN_CHECK(reason.empty(), "the own Hopper forward cannot run this block: " << reason);
}

std::string hopper_forward_description() {
  const std::string head_dims = hopper::built_head_dims(built);
  if (head_dims.empty()) return "not built (CMake SPATTN_HOPPER_HEAD_DIMS empty or no CUTLASS headers)";
  return "sm_90 (H100, H200); bf16, fp16; head dims " + head_dims +
         "; masks none, causal, sliding window; GQA; any number of key segments per block; fp32 out and lse, "
         "merged into the running result in the kernel";
}

}  // namespace spattn::cuda
