#include "kernels/cuda/cudnn_attention.hpp"

#include <cudnn.h>
#include <cudnn_frontend.h>

#include <algorithm>
#include <cstring>
#include <mutex>
#include <sstream>
#include <string>
#include <unordered_map>

#include "core/cuda/cuda_check.hpp"
#include "core/cuda/current_device_guard.hpp"
#include "core/memory_ledger.hpp"
#include "spattn/error.hpp"

namespace spattn::cuda {
namespace fe = cudnn_frontend;

namespace {

/// Throws Error when a cuDNN call fails, naming the call and cuDNN's description.
#define SPATTN_CUDNN_CHECK(call)                                                                  \
  do {                                                                                            \
    const cudnnStatus_t spattn_cudnn_status_ = (call);                                            \
    SPATTN_CHECK(spattn_cudnn_status_ == CUDNN_STATUS_SUCCESS,                                    \
                 #call << " failed: " << cudnnGetErrorString(spattn_cudnn_status_));              \
  } while (false)

/// Throws Error when a cudnn-frontend step fails, with what it was doing and the frontend's text.
void check_frontend(fe::error_t status, const char* step, const std::string& what) {
  SPATTN_CHECK(status.is_good(), "cuDNN attention " << what << ": " << step << " failed: " << status.get_message());
}

// The uids of the variant pack, fixed for every graph.
enum Uid : int64_t { kQ = 1, kK, kV, kO, kStats, kDO, kDQ, kDK, kDV };

/// The cuDNN dims and strides of a BSHD view: cuDNN's order is (B, H, S, D).
std::vector<int64_t> bhsd_dims(const TensorView& t) { return {t.size(0), t.size(2), t.size(1), t.size(3)}; }
std::vector<int64_t> bhsd_strides(const TensorView& t) {
  return {t.stride(0), t.stride(2), t.stride(1), t.stride(3)};
}

std::shared_ptr<fe::graph::Tensor_attributes> bhsd_tensor(fe::graph::Graph& graph, const char* name, Uid uid,
                                                          const TensorView& view) {
  return graph.tensor(fe::graph::Tensor_attributes().set_name(name).set_uid(uid).set_dim(bhsd_dims(view)).set_stride(
      bhsd_strides(view)));
}

void set_bhsd_output(fe::graph::Tensor_attributes& tensor, Uid uid, const TensorView& view) {
  tensor.set_output(true).set_uid(uid).set_dim(bhsd_dims(view)).set_stride(bhsd_strides(view));
}

/// (B, H, n, 1) fp32, contiguous: cuDNN's stats (log-sum-exp, natural log).
std::vector<int64_t> stats_dims(const TensorView& q) { return {q.size(0), q.size(2), q.size(1), 1}; }
std::vector<int64_t> stats_strides(const TensorView& q) {
  return {q.size(2) * q.size(1), q.size(1), 1, 1};
}

fe::DataType_t cudnn_dtype(DType dtype) {
  const std::string reason = input_dtype_unsupported(DeviceKind::cuda, dtype);
  SPATTN_CHECK(reason.empty(), reason);
  return dtype == DType::bf16 ? fe::DataType_t::BFLOAT16 : fe::DataType_t::HALF;
}

/// "q (2, 128, 8, 64) bf16 cuda:0, k ..., mask R=.. L=..", for error messages.
std::string describe_call(const char* direction, const TensorView& q, const TensorView& k, const CudnnPiece& mask) {
  std::ostringstream text;
  text << direction << " of q " << q.describe() << " strides (" << q.stride(0) << ", " << q.stride(1) << ", "
       << q.stride(2) << ", " << q.stride(3) << ") against k " << k.describe() << ", mask right_bound "
       << mask.right_bound << " left_bound " << mask.left_bound << " (top-left aligned)";
  return text.str();
}

void check_operands(const char* direction, const TensorView& q, const TensorView& k, const TensorView& v,
                    const CudnnPiece& mask) {
  const std::string what = describe_call(direction, q, k, mask);
  cudnn_dtype(q.dtype);
  SPATTN_CHECK(q.ndim == 4 && k.ndim == 4 && v.ndim == 4, what << ": q, k, v must be 4-d (B, S, H, D)");
  SPATTN_CHECK(k.dtype == q.dtype && v.dtype == q.dtype,
               what << ": k and v must have q's dtype " << dtype_name(q.dtype) << ", got " << k.describe() << " and "
                    << v.describe());
  SPATTN_CHECK(k.size(0) == q.size(0) && k.size(3) == q.size(3) && v.size(0) == k.size(0) && v.size(1) == k.size(1) &&
                   v.size(2) == k.size(2) && v.size(3) == k.size(3),
               what << ": q (B, n, H, D), k and v (B, m, HK, D) must agree; v is " << v.describe());
  SPATTN_CHECK(k.size(2) > 0 && q.size(2) % k.size(2) == 0,
               what << ": the query heads " << q.size(2) << " must be a multiple of the kv heads " << k.size(2));
  SPATTN_CHECK(q.stride(3) == 1 && k.stride(3) == 1 && v.stride(3) == 1,
               what << ": cuDNN needs head_dim contiguous (stride 1 along D)");
  SPATTN_CHECK(mask.right_bound >= -1 && (mask.left_bound == -1 || mask.left_bound >= 1),
               what << ": invalid cuDNN bounds");
}

void append_view(std::vector<int64_t>& key, const TensorView& view) {
  for (int d = 0; d < 4; ++d) key.push_back(view.size(d));
  for (int d = 0; d < 4; ++d) key.push_back(view.stride(d));
}

}  // namespace

std::vector<CudnnPiece> plan_cudnn_pieces(int64_t q_count, int64_t q_position, int64_t k_count, int64_t k_position,
                                          const AttentionMask& mask) {
  std::vector<CudnnPiece> pieces;
  if (q_count <= 0 || k_count <= 0) return pieces;
  const int64_t offset = q_position - k_position;  // d: row i sees segment keys [i + d - left, i + d + right]
  const bool left_bounded = mask.left >= 0, right_bounded = mask.right >= 0;
  const auto last_key = [&](int64_t row) { return row + offset + mask.right; };  // only when right_bounded
  const auto first_key = [&](int64_t row) { return row + offset - mask.left; };  // only when left_bounded

  // Rows whose window starts at or before key 0: from the first that reaches key 0 on the right,
  // up to the last whose left edge is still <= 0.
  const int64_t a_begin = right_bounded ? std::max<int64_t>(0, -(offset + mask.right)) : 0;
  const int64_t a_end = left_bounded ? std::min(q_count, mask.left - offset + 1) : q_count;
  if (a_begin < a_end) {
    CudnnPiece piece;
    piece.q_begin = a_begin;
    piece.q_count = a_end - a_begin;
    piece.k_begin = 0;
    piece.k_count = right_bounded ? std::min(k_count, last_key(a_end - 1) + 1) : k_count;
    // Local row r = i - a_begin sees c <= r + (a_begin + d + right): a right bound, unless even
    // the first row sees every key of the piece.
    if (right_bounded && last_key(a_begin) < piece.k_count - 1) piece.right_bound = last_key(a_begin);
    pieces.push_back(piece);
  }

  // Rows whose window starts inside the segment (left edge in [1, k_count - 1]).
  if (left_bounded) {
    const int64_t b_begin = std::max<int64_t>(0, mask.left - offset + 1);
    const int64_t b_end = std::min(q_count, k_count - offset + mask.left);
    if (b_begin < b_end) {
      CudnnPiece piece;
      piece.q_begin = b_begin;
      piece.q_count = b_end - b_begin;
      piece.k_begin = first_key(b_begin);
      const int64_t k_end = right_bounded ? std::min(k_count, last_key(b_end - 1) + 1) : k_count;
      piece.k_count = k_end - piece.k_begin;
      // Local offset is now `left`: row r sees c in [r, r + left + right]. The left bound is 1
      // (c > r - 1); the right bound is always set, to the last key where it binds nowhere, so
      // that cuDNN gets its usual sliding window (a left bound with a causal-like right bound).
      piece.left_bound = 1;
      piece.right_bound = right_bounded ? std::min(mask.left + mask.right, piece.k_count - 1) : piece.k_count - 1;
      pieces.push_back(piece);
    }
  }
  return pieces;
}

struct CudnnAttention::Graph {
  std::shared_ptr<fe::graph::Graph> graph;
  int64_t workspace_bytes = 0;
};

// Built graphs are bound to the handle they were built with, so the handle is shared with them.
// Calls take the mutex, set the handle's stream to their own and build or execute under it.
struct CudnnAttention::SharedGraphs {
  std::mutex mutex;
  cudnnHandle_t handle = nullptr;
  std::map<std::vector<int64_t>, std::unique_ptr<Graph>> graphs;

  ~SharedGraphs() {
    graphs.clear();  // before the handle they were built with
    if (handle != nullptr) cudnnDestroy(handle);
  }
};

namespace {

// The shared graphs of cuda:`device_index`: those of the live CudnnAttention objects of that
// device, or new ones when none is alive. They go with the last object, so that nothing of cuDNN
// outlives the plans (a process-long cache would be torn down after the CUDA runtime at exit).
std::shared_ptr<CudnnAttention::SharedGraphs> shared_graphs_of(int device_index) {
  static std::mutex registry_mutex;
  static std::map<int, std::weak_ptr<CudnnAttention::SharedGraphs>> registry;
  const std::lock_guard<std::mutex> lock(registry_mutex);
  std::shared_ptr<CudnnAttention::SharedGraphs> shared = registry[device_index].lock();
  if (shared == nullptr) {
    shared = std::make_shared<CudnnAttention::SharedGraphs>();
    CurrentDeviceGuard guard(device_index);
    SPATTN_CUDNN_CHECK(cudnnCreate(&shared->handle));
    registry[device_index] = shared;
  }
  return shared;
}

}  // namespace

CudnnAttention::CudnnAttention(const Device& device, cudaStream_t stream)
    : device_(device), stream_(stream), shared_(shared_graphs_of(device.index)) {}

CudnnAttention::~CudnnAttention() {
  // A destructor must not throw: release what can be released. Pending work on the stream may
  // still use the workspace, so wait for it first.
  try {
    CurrentDeviceGuard guard(device_.index);
    cudaStreamSynchronize(stream_);
    if (workspace_ != nullptr) {
      record_release(device_, workspace_);
      cudaFree(workspace_);
    }
  } catch (...) {  // no device to switch to: nothing left to release on it
  }
}

void CudnnAttention::set_stream(cudaStream_t stream) { stream_ = stream; }

std::size_t CudnnAttention::cached_graphs() const {
  const std::lock_guard<std::mutex> lock(shared_->mutex);
  return shared_->graphs.size();
}

void* CudnnAttention::workspace(std::size_t bytes) {
  if (bytes <= workspace_bytes_) return workspace_;
  // Grow (by at least half again, so a slowly growing shape does not reallocate every call).
  // cudaFree of memory that queued work may still read: wait for the stream first.
  const std::size_t grown = std::max(bytes, workspace_bytes_ + workspace_bytes_ / 2);
  if (workspace_ != nullptr) {
    SPATTN_CUDA_CHECK(cudaStreamSynchronize(stream_));
    record_release(device_, workspace_);
    SPATTN_CUDA_CHECK(cudaFree(workspace_));
    workspace_ = nullptr;
    workspace_bytes_ = 0;
  }
  SPATTN_CUDA_CHECK(cudaMalloc(&workspace_, grown));
  record_allocation(device_, workspace_, grown);
  workspace_bytes_ = grown;
  return workspace_;
}

const CudnnAttention::Graph& CudnnAttention::graph_for(const std::vector<int64_t>& key, bool backward,
                                                       const TensorView* operands, const CudnnPiece& mask,
                                                       float scale) {
  const auto found = shared_->graphs.find(key);
  if (found != shared_->graphs.end()) return *found->second;

  // operands: q, k, v, out, then (backward) dout, dq, dk, dv.
  const TensorView& q = operands[0];
  const std::string what = describe_call(backward ? "backward" : "forward", q, operands[1], mask);
  auto graph = std::make_shared<fe::graph::Graph>();
  graph->set_io_data_type(cudnn_dtype(q.dtype))
      .set_intermediate_data_type(fe::DataType_t::FLOAT)
      .set_compute_data_type(fe::DataType_t::FLOAT);
  auto q_tensor = bhsd_tensor(*graph, "Q", kQ, q);
  auto k_tensor = bhsd_tensor(*graph, "K", kK, operands[1]);
  auto v_tensor = bhsd_tensor(*graph, "V", kV, operands[2]);
  if (!backward) {
    auto options = fe::graph::SDPA_attributes().set_name("spattn_forward").set_generate_stats(true).set_attn_scale(
        scale);
    if (mask.right_bound >= 0 || mask.left_bound >= 0) options.set_diagonal_alignment(fe::DiagonalAlignment_t::TOP_LEFT);
    if (mask.right_bound >= 0) options.set_diagonal_band_right_bound(static_cast<int>(mask.right_bound));
    if (mask.left_bound >= 0) options.set_diagonal_band_left_bound(static_cast<int>(mask.left_bound));
    auto [o_tensor, stats_tensor] = graph->sdpa(q_tensor, k_tensor, v_tensor, options);
    set_bhsd_output(*o_tensor, kO, operands[3]);
    stats_tensor->set_output(true).set_uid(kStats).set_data_type(fe::DataType_t::FLOAT).set_dim(stats_dims(q)).set_stride(
        stats_strides(q));
  } else {
    auto o_tensor = bhsd_tensor(*graph, "O", kO, operands[3]);
    auto do_tensor = bhsd_tensor(*graph, "dO", kDO, operands[4]);
    auto stats_tensor = graph->tensor(fe::graph::Tensor_attributes()
                                          .set_name("Stats")
                                          .set_uid(kStats)
                                          .set_dim(stats_dims(q))
                                          .set_stride(stats_strides(q))
                                          .set_data_type(fe::DataType_t::FLOAT));
    auto options = fe::graph::SDPA_backward_attributes().set_name("spattn_backward").set_attn_scale(scale);
    if (deterministic_backward_) options.set_deterministic_algorithm(true);
    if (mask.right_bound >= 0 || mask.left_bound >= 0) options.set_diagonal_alignment(fe::DiagonalAlignment_t::TOP_LEFT);
    if (mask.right_bound >= 0) options.set_diagonal_band_right_bound(static_cast<int>(mask.right_bound));
    if (mask.left_bound >= 0) options.set_diagonal_band_left_bound(static_cast<int>(mask.left_bound));
    auto [dq_tensor, dk_tensor, dv_tensor] =
        graph->sdpa_backward(q_tensor, k_tensor, v_tensor, o_tensor, do_tensor, stats_tensor, options);
    set_bhsd_output(*dq_tensor, kDQ, operands[5]);
    set_bhsd_output(*dk_tensor, kDK, operands[6]);
    set_bhsd_output(*dv_tensor, kDV, operands[7]);
  }

  const cudnnHandle_t handle = shared_->handle;
  check_frontend(graph->validate(), "validate", what);
  check_frontend(graph->build_operation_graph(handle), "build_operation_graph", what);
  check_frontend(graph->create_execution_plans({fe::HeurMode_t::A}), "create_execution_plans", what);
  check_frontend(graph->check_support(handle), "check_support", what);
  check_frontend(graph->build_plans(handle, fe::BuildPlanPolicy_t::HEURISTICS_CHOICE), "build_plans", what);

  auto built = std::make_unique<Graph>();
  built->graph = std::move(graph);
  check_frontend(built->graph->get_workspace_size(built->workspace_bytes), "get_workspace_size", what);
  return *shared_->graphs.emplace(key, std::move(built)).first->second;
}

void CudnnAttention::forward(const TensorView& q, const TensorView& k, const TensorView& v, const CudnnPiece& mask,
                             float scale, TensorView out, TensorView stats) {
  check_operands("forward", q, k, v, mask);
  SPATTN_CHECK(out.dtype == q.dtype && out.ndim == 4 && out.size(0) == q.size(0) && out.size(1) == q.size(1) &&
                   out.size(2) == q.size(2) && out.size(3) == q.size(3) && out.stride(3) == 1,
               "cuDNN attention forward: out " << out.describe() << " must be like q " << q.describe());
  SPATTN_CHECK(stats.dtype == DType::f32 && stats.ndim == 3 && stats.is_contiguous() && stats.size(0) == q.size(0) &&
                   stats.size(1) == q.size(2) && stats.size(2) == q.size(1),
               "cuDNN attention forward: stats " << stats.describe() << " must be (B, H, n) fp32 contiguous");
  if (q.size(1) == 0 || k.size(1) == 0) return;
  CurrentDeviceGuard guard(device_.index);

  std::vector<int64_t> key{0, static_cast<int64_t>(q.dtype), mask.right_bound, mask.left_bound};
  uint32_t scale_bits = 0;
  std::memcpy(&scale_bits, &scale, sizeof(scale_bits));
  key.push_back(scale_bits);
  const TensorView operands[] = {q, k, v, out};
  for (const TensorView& operand : operands) append_view(key, operand);
  const std::lock_guard<std::mutex> lock(shared_->mutex);
  SPATTN_CUDNN_CHECK(cudnnSetStream(shared_->handle, stream_));
  const Graph& graph = graph_for(key, false, operands, mask, scale);

  std::unordered_map<int64_t, void*> pack{{kQ, q.data}, {kK, k.data}, {kV, v.data}, {kO, out.data},
                                          {kStats, stats.data}};
  void* work = workspace(static_cast<std::size_t>(graph.workspace_bytes));
  check_frontend(graph.graph->execute(shared_->handle, pack, work), "execute",
                 describe_call("forward", q, k, mask));
}

void CudnnAttention::backward(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& out,
                              const TensorView& dout, const TensorView& stats, const CudnnPiece& mask, float scale,
                              TensorView dq, TensorView dk, TensorView dv) {
  check_operands("backward", q, k, v, mask);
  const auto like = [](const TensorView& a, const TensorView& b) {
    return a.dtype == b.dtype && a.ndim == 4 && a.size(0) == b.size(0) && a.size(1) == b.size(1) &&
           a.size(2) == b.size(2) && a.size(3) == b.size(3) && a.stride(3) == 1;
  };
  SPATTN_CHECK(like(out, q) && like(dout, q) && like(dq, q),
               "cuDNN attention backward: out " << out.describe() << ", dout " << dout.describe() << " and dq "
                                                << dq.describe() << " must be like q " << q.describe()
                                                << " (same dtype, head_dim contiguous)");
  SPATTN_CHECK(like(dk, k) && like(dv, v), "cuDNN attention backward: dk " << dk.describe() << " and dv "
                                                                           << dv.describe() << " must be like k "
                                                                           << k.describe());
  SPATTN_CHECK(stats.dtype == DType::f32 && stats.ndim == 3 && stats.is_contiguous() && stats.size(0) == q.size(0) &&
                   stats.size(1) == q.size(2) && stats.size(2) == q.size(1),
               "cuDNN attention backward: stats " << stats.describe() << " must be (B, H, n) fp32 contiguous");
  if (q.size(1) == 0 || k.size(1) == 0) return;
  CurrentDeviceGuard guard(device_.index);

  std::vector<int64_t> key{1, static_cast<int64_t>(q.dtype), mask.right_bound, mask.left_bound,
                           deterministic_backward_ ? 1 : 0};
  uint32_t scale_bits = 0;
  std::memcpy(&scale_bits, &scale, sizeof(scale_bits));
  key.push_back(scale_bits);
  const TensorView operands[] = {q, k, v, out, dout, dq, dk, dv};
  for (const TensorView& operand : operands) append_view(key, operand);
  const std::lock_guard<std::mutex> lock(shared_->mutex);
  SPATTN_CUDNN_CHECK(cudnnSetStream(shared_->handle, stream_));
  const Graph& graph = graph_for(key, true, operands, mask, scale);

  std::unordered_map<int64_t, void*> pack{{kQ, q.data},     {kK, k.data},   {kV, v.data},   {kO, out.data},
                                          {kDO, dout.data}, {kStats, stats.data}, {kDQ, dq.data}, {kDK, dk.data},
                                          {kDV, dv.data}};
  void* work = workspace(static_cast<std::size_t>(graph.workspace_bytes));
  check_frontend(graph.graph->execute(shared_->handle, pack, work), "execute",
                 describe_call("backward", q, k, mask));
}

}  // namespace spattn::cuda
