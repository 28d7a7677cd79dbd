#include "kernels/hopper/hopper_backward.hpp"

#include <cstdint>
#include <limits>
#include <sstream>

#include "core/cuda/current_device_guard.hpp"
#include "kernels/hopper/backward_head_parts.hpp"
#include "kernels/hopper/backward_problem.hpp"
#include "kernels/hopper/backward_tile_order.hpp"
#include "kernels/hopper/hopper_support.hpp"
#include "spattn/error.hpp"

namespace spattn::cuda {
namespace {

using hopper::BackwardProblem;
using hopper::BackwardSegment;
using hopper::copy_strides;
using hopper::kMaxSegmentsPerLaunch;
using hopper::tma_addressable;

constexpr const char* kOwnBackward = "the own backward";

using Launcher = void (*)(const BackwardProblem&, cudaStream_t);

/// The instantiation of (head_dim, dtype) in this build, or nullptr (CMake's SPATTN_HOPPER_HEAD_DIMS).
Launcher launcher_for(int64_t head_dim, DType dtype) {
  const bool bf16 = dtype == DType::bf16;
#ifdef SPATTN_HOPPER_HEAD_DIM_64
  if (head_dim == 64)
    return bf16 ? &hopper::launch_backward<64, DType::bf16> : &hopper::launch_backward<64, DType::f16>;
#endif
#ifdef SPATTN_HOPPER_HEAD_DIM_128
  if (head_dim == 128)
    return bf16 ? &hopper::launch_backward<128, DType::bf16> : &hopper::launch_backward<128, DType::f16>;
#endif
  (void)bf16;
  (void)head_dim;
  return nullptr;
}

bool built(int64_t head_dim) { return launcher_for(head_dim, DType::bf16) != nullptr; }

/// The key tiles of `kv`, one CTA per kv head and batch each.
int64_t key_tiles_of(const KvSegment& kv) {
  return (kv.k.size(1) + hopper::kBackwardKeyTile - 1) / hopper::kBackwardKeyTile;
}

/// "" when `tensor` has `like`'s shape (with `heads` heads), is fp32 with head_dim contiguous and
/// non-negative strides (the kernel adds single floats into it); otherwise why not.
std::string fp32_accumulator(const TensorView& tensor, const char* name, const TensorView& like) {
  std::ostringstream why;
  bool same_shape = tensor.ndim == 4;
  for (int dim = 0; same_shape && dim < 4; ++dim) same_shape = tensor.size(dim) == like.size(dim);
  bool strides_fit = same_shape && tensor.stride(3) == 1;
  for (int dim = 0; strides_fit && dim < 3; ++dim) strides_fit = tensor.stride(dim) >= 0;
  if (tensor.dtype != DType::f32 || !same_shape || !strides_fit || tensor.device != like.device)
    why << name << " " << tensor.describe() << " must be fp32 of shape " << like.describe()
        << " on its device, head_dim contiguous, non-negative strides (" << kOwnBackward << " adds into it)";
  return why.str();
}

/// "" when `terms` (lse or delta) is fp32 (B, H, Sq) for `q`; otherwise why not.
std::string row_terms(const TensorView& terms, const char* name, const TensorView& q) {
  std::ostringstream why;
  if (terms.dtype != DType::f32 || terms.ndim != 3 || terms.size(0) != q.size(0) || terms.size(1) != q.size(2) ||
      terms.size(2) != q.size(1) || terms.device != q.device)
    why << name << " " << terms.describe() << " must be fp32 (B, H, Sq) on q's device for q " << q.describe();
  return why.str();
}

std::string block_unsupported(const BackwardBlock& block) {
  const TensorView& q = block.q;
  std::string reason = hopper_backward_unsupported(q.device, q.dtype, q.ndim == 4 ? q.size(3) : 0);
  if (!reason.empty()) return reason;
  if (!(reason = tma_addressable(kOwnBackward, q, "q")).empty()) return reason;
  if (!(reason = tma_addressable(kOwnBackward, block.dout, "dout")).empty()) return reason;
  std::ostringstream why;
  if (block.dout.dtype != q.dtype || block.dout.device != q.device || block.dout.size(0) != q.size(0) ||
      block.dout.size(1) != q.size(1) || block.dout.size(2) != q.size(2) || block.dout.size(3) != q.size(3)) {
    why << "dout " << block.dout.describe() << " must have q's shape, dtype and device (" << q.describe() << ")";
    return why.str();
  }
  if (!(reason = row_terms(block.lse, "lse", q)).empty()) return reason;
  if (!(reason = row_terms(block.delta, "delta", q)).empty()) return reason;
  if (!(reason = fp32_accumulator(block.dq, "dq", q)).empty()) return reason;
  if (!(reason = tma_addressable(kOwnBackward, block.dq, "dq")).empty()) return reason;  // the TMA unit adds dQ
  int64_t key_tiles = 0;
  for (const KvGradSegment& segment : block.segments) {
    const KvSegment& kv = segment.kv;
    if (!(reason = hopper::key_values_unsupported(kOwnBackward, kv, q)).empty()) return reason;
    if (!(reason = fp32_accumulator(segment.dk, "dk", kv.k)).empty()) return reason;
    if (!(reason = fp32_accumulator(segment.dv, "dv", kv.k)).empty()) return reason;
    // The kernel adds dk's and dv's rows by aligned pairs, laid out as dq's (the TMA unit's rule).
    if (!(reason = tma_addressable(kOwnBackward, segment.dk, "dk")).empty()) return reason;
    if (!(reason = tma_addressable(kOwnBackward, segment.dv, "dv")).empty()) return reason;
    key_tiles += key_tiles_of(kv);
  }
  // One CTA per (key tile, kv head, batch) in a one-dimensional grid.
  const int64_t kv_heads = block.segments.empty() ? 0 : block.segments.front().kv.k.size(2);
  if (key_tiles * kv_heads * q.size(0) > std::numeric_limits<int32_t>::max()) {
    why << key_tiles << " key tiles of " << hopper::kBackwardKeyTile << " keys x " << kv_heads << " kv heads x batch "
        << q.size(0) << " exceed the 2^31 - 1 CTAs of " << kOwnBackward;
    return why.str();
  }
  return hopper::scale_unsupported(block.scale);
}

}  // namespace

std::string hopper_backward_unsupported(const Device& device, DType dtype, int64_t head_dim) {
  return hopper::device_unsupported(kOwnBackward, device, dtype, head_dim, launcher_for(head_dim, dtype) != nullptr,
                                    hopper::built_head_dims(built));
}

std::string hopper_backward_unsupported(const BackwardBlock& block) { return block_unsupported(block); }

std::string try_hopper_backward(const BackwardBlock& block, cudaStream_t stream, hopper::QueryGradTurns* turns) {
  const std::string reason = block_unsupported(block);
  if (!reason.empty()) return reason;
  const TensorView& q = block.q;
  SPATTN_CHECK(turns == nullptr || turns->device() == q.device, "the own Hopper backward: its turn counters are on "
                                                                    << device_name(turns->device()) << ", the block on "
                                                                    << device_name(q.device));
  if (q.numel() == 0) return "";
  const Launcher launch = launcher_for(q.size(3), q.dtype);
  CurrentDeviceGuard guard(q.device.index);
  const int multiprocessors = hopper::gpu_facts(q.device.index).multiprocessors;

  BackwardProblem problem;
  problem.q = q.data;
  problem.dout = block.dout.data;
  copy_strides(q, problem.q_strides);
  copy_strides(block.dout, problem.dout_strides);
  problem.lse = static_cast<const float*>(block.lse.data);
  problem.delta = static_cast<const float*>(block.delta.data);
  copy_strides(block.lse, problem.lse_strides);
  copy_strides(block.delta, problem.delta_strides);
  problem.dq = static_cast<float*>(block.dq.data);
  copy_strides(block.dq, problem.dq_strides);
  problem.batch = static_cast<int32_t>(q.size(0));
  problem.rows = static_cast<int32_t>(q.size(1));
  problem.heads = static_cast<int32_t>(q.size(2));
  problem.q_position = block.q_position;
  problem.mask_left = block.mask.left;
  problem.mask_right = block.mask.right;
  problem.scale = block.scale;

  // Segments in launches of up to kMaxSegmentsPerLaunch, each adding into the gradients; segments
  // without keys take no place.
  const int query_tile = hopper::backward_query_tile(static_cast<int>(q.size(3)));
  const int64_t query_tiles = (q.size(1) + query_tile - 1) / query_tile;
  // The kernel numbers the turn counters in int32.
  SPATTN_CHECK(turns == nullptr || q.size(0) * q.size(2) * query_tiles <= std::numeric_limits<int32_t>::max(),
               "the own Hopper backward in deterministic mode: batch "
                   << q.size(0) << " x " << q.size(2) << " heads x " << query_tiles << " query tiles of " << query_tile
                   << " rows exceed its 2^31 - 1 turn counters");
  const auto launch_segments = [&] {
    if (problem.num_segments == 0) return;
    // Every launch counts its key tiles' turns from zero.
    if (turns != nullptr) problem.dq_turns = turns->zeroed(q.size(0) * q.size(2) * query_tiles, stream);
    problem.head_parts =
        hopper::backward_head_parts(int64_t{problem.key_tiles} * problem.kv_heads * problem.batch,
                                    problem.heads / problem.kv_heads, multiprocessors, turns != nullptr);
    hopper::KeyRange key_ranges[kMaxSegmentsPerLaunch];
    for (int index = 0; index < problem.num_segments; ++index)
      key_ranges[index] = hopper::KeyRange{problem.segments[index].position, problem.segments[index].keys};
    const bool equal_work =
        hopper::key_tiles_see_equal_work(problem.q_position, problem.rows, query_tile, key_ranges, problem.num_segments,
                                         problem.mask_left, problem.mask_right);
    problem.band_groups = static_cast<int32_t>(
        hopper::backward_band_groups(problem.key_tiles, int64_t{problem.head_parts} * problem.kv_heads * problem.batch,
                                     multiprocessors, equal_work));
    launch(problem, stream);
    problem.num_segments = 0;
    problem.key_tiles = 0;
  };
  for (const KvGradSegment& segment : block.segments) {
    const KvSegment& kv = segment.kv;
    if (kv.k.size(1) == 0) continue;
    BackwardSegment& keys = problem.segments[problem.num_segments++];
    keys.k = kv.k.data;
    keys.v = kv.v.data;
    keys.dk = static_cast<float*>(segment.dk.data);
    keys.dv = static_cast<float*>(segment.dv.data);
    copy_strides(kv.k, keys.k_strides);
    copy_strides(kv.v, keys.v_strides);
    copy_strides(segment.dk, keys.dk_strides);
    copy_strides(segment.dv, keys.dv_strides);
    keys.keys = static_cast<int32_t>(kv.k.size(1));
    keys.position = kv.position;
    keys.first_tile = problem.key_tiles;
    problem.key_tiles += static_cast<int32_t>(key_tiles_of(kv));
    problem.kv_heads = static_cast<int32_t>(kv.k.size(2));
    if (problem.num_segments == kMaxSegmentsPerLaunch) launch_segments();
  }
  launch_segments();
  return "";  // launched
}

void hopper_backward(const BackwardBlock& block, cudaStream_t stream, hopper::QueryGradTurns* turns) {
  const std::string reason = try_hopper_backward(block, stream, turns);
  SPATTN_CHECK(reason.empty(), "the own Hopper backward cannot run this block: " << reason);
}

std::string hopper_backward_description() {
  const std::string head_dims = hopper::built_head_dims(built);
  if (head_dims.empty()) return "not built (CMake SPATTN_HOPPER_HEAD_DIMS empty or no CUTLASS headers)";
  return "sm_90 (H100, H200); bf16, fp16; head dims " + head_dims +
         "; masks none, causal, sliding window; GQA; any number of key segments per block; reads delta, not out; "
         "dq, dk, dv added in fp32 in the kernel";
}

}  // namespace spattn::cuda
