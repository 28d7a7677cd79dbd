#include "kernels/cuda/cuda_block_kernels.hpp"

#include <algorithm>
#include <limits>
#include <tuple>
#include <utility>
#include <vector>

#include "core/cuda/cuda_check.hpp"
#include "core/cuda/current_device_guard.hpp"
#include "core/memory_ledger.hpp"
#include "kernels/cuda/cuda_stream_mark.hpp"
#include "kernels/hopper/hopper_backward.hpp"
#include "kernels/hopper/hopper_forward.hpp"
#include "spattn/error.hpp"

namespace spattn::cuda {
namespace {

std::size_t bytes_of(DType dtype, int64_t numel) { return static_cast<std::size_t>(numel) * dtype_size(dtype); }

/// A contiguous (B, S, H, D) view of `shape_of`'s shape with `rows` rows, in `dtype`, on `data`.
TensorView contiguous_rows(void* data, DType dtype, const TensorView& shape_of, int64_t rows, const Device& device) {
  return TensorView::contiguous(data, dtype, {shape_of.size(0), rows, shape_of.size(2), shape_of.size(3)}, device);
}

void check_block_tensor(const TensorView& tensor, const char* name, int ndim, const Device& device) {
  SPATTN_CHECK(tensor.ndim == ndim, name << " is " << tensor.describe() << ", expected " << ndim << " dimensions");
  SPATTN_CHECK(tensor.device == device,
               name << " " << tensor.describe() << " must be on " << device_name(device) << " for these kernels");
}

/// The checks the cuDNN calls cannot make: devices, ranks, fp32 accumulators, shapes of q-rows.
void check_query_side(const TensorView& q, const TensorView& rows, const char* rows_name, const TensorView& lse,
                      const Device& device) {
  check_block_tensor(q, "q", 4, device);
  check_block_tensor(rows, rows_name, 4, device);
  check_block_tensor(lse, "lse", 3, device);
  const std::string dtype_reason = input_dtype_unsupported(DeviceKind::cuda, q.dtype);
  SPATTN_CHECK(dtype_reason.empty(), "q " << q.describe() << ": " << dtype_reason);
  for (int d = 0; d < 4; ++d)
    SPATTN_CHECK(rows.size(d) == q.size(d), rows_name << " " << rows.describe() << " must have q's shape " << q.describe());
  SPATTN_CHECK(lse.size(0) == q.size(0) && lse.size(1) == q.size(2) && lse.size(2) == q.size(1),
               "lse " << lse.describe() << " must be (B, H, Sq) for q " << q.describe());
  SPATTN_CHECK(lse.dtype == DType::f32, "lse " << lse.describe() << " must be fp32");
}

void check_segment(const KvSegment& segment, const TensorView& q, const Device& device) {
  check_block_tensor(segment.k, "k", 4, device);
  check_block_tensor(segment.v, "v", 4, device);
  SPATTN_CHECK(segment.k.size(0) == q.size(0) && segment.k.size(3) == q.size(3),
               "k " << segment.k.describe() << " does not match q " << q.describe());
}

}  // namespace

bool own_backward_runs(const Device& device, KernelChoice kernel, const KernelInputs& inputs) {
  switch (kernel) {
    case KernelChoice::own:
      return true;
    case KernelChoice::cudnn:
      return false;
    case KernelChoice::automatic:
      return hopper_backward_unsupported(device, inputs.dtype, inputs.head_dim).empty();
  }
  return false;
}

CudaBlockKernels::CudaBlockKernels(const Device& device, KernelChoice kernel, bool deterministic,
                                   const KernelInputs& inputs)
    : kernel_(kernel),
      own_backward_(own_backward_runs(device, kernel, inputs)),
      elementwise_(device),
      attention_(device, elementwise_.stream()) {
  set_up(deterministic);
}

CudaBlockKernels::CudaBlockKernels(const Device& device, cudaStream_t stream, KernelChoice kernel, bool deterministic,
                                   const KernelInputs& inputs)
    : kernel_(kernel),
      own_backward_(own_backward_runs(device, kernel, inputs)),
      elementwise_(device, stream),
      attention_(device, stream) {
  set_up(deterministic);
}

void CudaBlockKernels::set_up(bool deterministic) {
  const Device device = elementwise_.device();
  CurrentDeviceGuard guard(device.index);
  SPATTN_CUDA_CHECK(cudaEventCreateWithFlags(&stream_switch_, cudaEventDisableTiming));
  if (kernel_ != KernelChoice::cudnn) tile_counter_ = std::make_unique<hopper::QueryTileCounter>(device);
  if (deterministic && own_backward_) query_grad_turns_ = std::make_unique<hopper::QueryGradTurns>(device);
  attention_.set_deterministic_backward(deterministic);
}

CudaBlockKernels::~CudaBlockKernels() {
  // Queued work may still use the scratch buffers; a destructor must not throw.
  try {
    CurrentDeviceGuard guard(elementwise_.device().index);
    cudaStreamSynchronize(elementwise_.stream());
    for (Scratch* buffer : {&out_, &stats_, &dk_, &dv_, &final_out_, &final_dout_, &key_twice_}) {
      if (buffer->data == nullptr) continue;
      record_release(elementwise_.device(), buffer->data);
      cudaFree(buffer->data);
    }
    cudaEventDestroy(stream_switch_);
  } catch (...) {  // no device to switch to: nothing left to release on it
  }
}

void CudaBlockKernels::set_stream(void* stream) {
  const auto next = static_cast<cudaStream_t>(stream);
  if (next == elementwise_.stream()) return;
  // Work still queued on the old stream uses the same scratch and workspace as the new stream's
  // work will: the new stream waits for it (no host synchronization).
  CurrentDeviceGuard guard(elementwise_.device().index);
  SPATTN_CUDA_CHECK(cudaEventRecord(stream_switch_, elementwise_.stream()));
  SPATTN_CUDA_CHECK(cudaStreamWaitEvent(next, stream_switch_, 0));
  elementwise_.set_stream(next);
  attention_.set_stream(next);
}

std::unique_ptr<StreamMark> CudaBlockKernels::mark() {
  return std::make_unique<CudaStreamMark>(elementwise_.device().index, elementwise_.stream());
}

void* CudaBlockKernels::scratch(Scratch& buffer, std::size_t bytes) {
  if (bytes <= buffer.bytes) return buffer.data;
  if (buffer.data != nullptr) {
    elementwise_.synchronize();  // queued work may still read the old buffer
    elementwise_.deallocate(buffer.data);
    buffer = Scratch{};
  }
  buffer.data = elementwise_.allocate(bytes);
  buffer.bytes = bytes;
  return buffer.data;
}

void CudaBlockKernels::forward(const ForwardBlock& block) {
  const Device device = elementwise_.device();
  check_query_side(block.q, block.out, "out", block.lse, device);
  SPATTN_CHECK(block.out.dtype == DType::f32, "out " << block.out.describe() << " must be fp32");
  for (const KvSegment& segment : block.segments) check_segment(segment, block.q, device);
  if (kernel_ != KernelChoice::cudnn) {
    // On the block's device, which it makes current.
    const std::string own_unsupported = try_hopper_forward(block, stream(), tile_counter_.get());
    if (own_unsupported.empty()) return;
    SPATTN_CHECK(kernel_ == KernelChoice::automatic, "kernel own cannot run this block: " << own_unsupported);
  }
  cudnn_forward(block);
}

void CudaBlockKernels::cudnn_forward(const ForwardBlock& block) {
  const Device device = elementwise_.device();
  const TensorView& q = block.q;
  std::vector<SegmentPiece>& pieces = forward_pieces_;
  pieces.clear();
  for (const KvSegment& segment : block.segments)
    for (const CudnnPiece& piece :
         plan_cudnn_pieces(q.size(1), block.q_position, segment.k.size(1), segment.position, block.mask))
      pieces.push_back({&segment, piece});

  // Without accumulate the result starts empty. When the first piece covers every query row it
  // writes the result outright; otherwise out = 0, lse = -inf first (rows that see no key stay
  // so) and every piece merges in.
  bool result_is_empty = !block.accumulate;
  if (result_is_empty && (pieces.empty() || pieces.front().piece.q_count != q.size(1))) {
    elementwise_.fill(block.out, 0.0f);
    elementwise_.fill(block.lse, -std::numeric_limits<float>::infinity());
    result_is_empty = false;
  }
  for (const SegmentPiece& segment_piece : pieces) {
    const KvSegment& segment = *segment_piece.segment;
    const CudnnPiece& piece = segment_piece.piece;
    void* out_data = scratch(out_, bytes_of(q.dtype, q.size(0) * piece.q_count * q.size(2) * q.size(3)));
    void* stats_data = scratch(stats_, bytes_of(DType::f32, q.size(0) * q.size(2) * piece.q_count));
    TensorView piece_out = contiguous_rows(out_data, q.dtype, q, piece.q_count, device);
    TensorView piece_lse =
        TensorView::contiguous(stats_data, DType::f32, {q.size(0), q.size(2), piece.q_count}, device);
    attention_.forward(q.slice(1, piece.q_begin, piece.q_count), segment.k.slice(1, piece.k_begin, piece.k_count),
                       segment.v.slice(1, piece.k_begin, piece.k_count), piece, block.scale, piece_out, piece_lse);
    // out' = out * exp(lse - lse') + piece_out * exp(piece_lse - lse')
    const TensorView out_rows = block.out.slice(1, piece.q_begin, piece.q_count);
    const TensorView lse_rows = block.lse.slice(2, piece.q_begin, piece.q_count);
    if (result_is_empty) {
      elementwise_.merge_into_empty(piece_out, piece_lse, out_rows, lse_rows);
      result_is_empty = false;
    } else {
      elementwise_.merge(piece_out, piece_lse, out_rows, lse_rows);
    }
  }
  write_final_out(block);
}

void CudaBlockKernels::backward(const BackwardBlock& block) {
  const Device device = elementwise_.device();
  const TensorView& q = block.q;
  check_query_side(q, block.dout, "dout", block.lse, device);
  check_query_side(q, block.dq, "dq", block.lse, device);
  SPATTN_CHECK(block.dq.dtype == DType::f32, "dq " << block.dq.describe() << " must be fp32");
  for (const KvGradSegment& segment : block.segments) {
    check_segment(segment.kv, q, device);
    check_block_tensor(segment.dk, "dk", 4, device);
    check_block_tensor(segment.dv, "dv", 4, device);
    SPATTN_CHECK(segment.dk.dtype == DType::f32 && segment.dv.dtype == DType::f32,
                 "dk " << segment.dk.describe() << " and dv " << segment.dv.describe() << " must be fp32");
  }
  if (own_backward_) {
    // On the block's device, which it makes current.
    const std::string own_unsupported = try_hopper_backward(block, stream(), query_grad_turns_.get());
    if (own_unsupported.empty()) return;
    SPATTN_CHECK(kernel_ == KernelChoice::automatic, "kernel own cannot run this block: " << own_unsupported);
  }
  SPATTN_CHECK(block.out.data != nullptr,
               "the cuDNN backward needs BackwardBlock::out, the final output of the attention: cuDNN recomputes "
               "delta = rowsum(dout * out) itself and takes no delta");
  check_query_side(q, block.out, "out", block.lse, device);

  // cuDNN takes out and dout in q's dtype with head_dim contiguous: convert once per block.
  const auto in_q_dtype = [&](const TensorView& view, Scratch& buffer) {
    if (view.dtype == q.dtype && view.stride(3) == 1) return view;
    TensorView converted = contiguous_rows(scratch(buffer, bytes_of(q.dtype, view.numel())), q.dtype, view,
                                           view.size(1), device);
    elementwise_.copy(view, converted);
    return converted;
  };
  const TensorView out = in_q_dtype(block.out, final_out_);
  const TensorView dout = in_q_dtype(block.dout, final_dout_);

  for (const KvGradSegment& segment : block.segments) {
    const TensorView& k = segment.kv.k;
    const auto pieces = plan_cudnn_pieces(q.size(1), block.q_position, k.size(1), segment.kv.position, block.mask);
    for (const CudnnPiece& piece : pieces) {
      TensorView piece_k = k.slice(1, piece.k_begin, piece.k_count);
      TensorView piece_v = segment.kv.v.slice(1, piece.k_begin, piece.k_count);
      CudnnPiece call_mask = piece;
      // cuDNN's backward refuses one query against one key (s_q = s_kv = 1), which one-token
      // documents and cuts inside a chunk make: the call gets the key twice, row 0 seeing only
      // the first copy (a right bound of 0), and the first copy's gradients are kept.
      if (piece.q_count == 1 && piece.k_count == 1) {
        std::tie(piece_k, piece_v) = key_twice(piece_k, piece_v);
        call_mask.right_bound = 0;
        call_mask.left_bound = -1;
      }
      const int64_t kv_elements = piece_k.numel();
      TensorView piece_dq = contiguous_rows(
          scratch(out_, bytes_of(q.dtype, q.size(0) * piece.q_count * q.size(2) * q.size(3))), q.dtype, q,
          piece.q_count, device);
      TensorView piece_dk = contiguous_rows(scratch(dk_, bytes_of(q.dtype, kv_elements)), q.dtype, k,
                                            piece_k.size(1), device);
      TensorView piece_dv = contiguous_rows(scratch(dv_, bytes_of(q.dtype, kv_elements)), q.dtype, k,
                                            piece_k.size(1), device);
      // cuDNN's stats must be (B, H, n) contiguous: the piece's rows of the final lse, copied.
      TensorView piece_lse = TensorView::contiguous(
          scratch(stats_, bytes_of(DType::f32, q.size(0) * q.size(2) * piece.q_count)), DType::f32,
          {q.size(0), q.size(2), piece.q_count}, device);
      elementwise_.copy(block.lse.slice(2, piece.q_begin, piece.q_count), piece_lse);

      attention_.backward(q.slice(1, piece.q_begin, piece.q_count), piece_k, piece_v,
                          out.slice(1, piece.q_begin, piece.q_count), dout.slice(1, piece.q_begin, piece.q_count),
                          piece_lse, call_mask, block.scale, piece_dq, piece_dk, piece_dv);
      elementwise_.add(piece_dq, block.dq.slice(1, piece.q_begin, piece.q_count));
      elementwise_.add(piece_dk.slice(1, 0, piece.k_count), segment.dk.slice(1, piece.k_begin, piece.k_count));
      elementwise_.add(piece_dv.slice(1, 0, piece.k_count), segment.dv.slice(1, piece.k_begin, piece.k_count));
    }
  }
}

std::pair<TensorView, TensorView> CudaBlockKernels::key_twice(const TensorView& k, const TensorView& v) {
  const Device device = elementwise_.device();
  const std::size_t bytes = bytes_of(k.dtype, 2 * k.numel());
  auto* data = static_cast<char*>(scratch(key_twice_, 2 * bytes));
  const TensorView k_twice = contiguous_rows(data, k.dtype, k, 2, device);
  const TensorView v_twice = contiguous_rows(data + bytes, v.dtype, v, 2, device);
  for (const int64_t copy : {0, 1}) {
    elementwise_.copy(k, k_twice.slice(1, copy, 1));
    elementwise_.copy(v, v_twice.slice(1, copy, 1));
  }
  return {k_twice, v_twice};
}

void CudaBlockKernels::merge(const TensorView& partial_out, const TensorView& partial_lse, TensorView running_out,
                             TensorView running_lse) {
  elementwise_.merge(partial_out, partial_lse, running_out, running_lse);
}

void CudaBlockKernels::softmax_delta(const TensorView& out, const TensorView& dout, TensorView delta) {
  elementwise_.softmax_delta(out, dout, delta);
}

void CudaBlockKernels::copy(const TensorView& src, TensorView dst) { elementwise_.copy(src, dst); }

void CudaBlockKernels::fill(TensorView dst, float value) { elementwise_.fill(dst, value); }

void CudaBlockKernels::add(const TensorView& source, TensorView destination) { elementwise_.add(source, destination); }

void* CudaBlockKernels::allocate(std::size_t bytes) { return elementwise_.allocate(bytes); }

void CudaBlockKernels::deallocate(void* pointer) { elementwise_.deallocate(pointer); }

std::unique_ptr<BlockKernels> make_cuda_block_kernels(const Device& device, KernelChoice kernel, bool deterministic,
                                                      const KernelInputs& inputs) {
  return std::make_unique<CudaBlockKernels>(device, kernel, deterministic, inputs);
}

}  // namespace spattn::cuda
