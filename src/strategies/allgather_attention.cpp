// All-gather attention (Llama 3 style): every rank gathers the keys and values of the whole
// sequence and attends its own zigzag queries to them once; backward reduce-scatters dK and dV
// (fp32) back to their owners. Work goes one kv head at a time, so the gathered keys and values
// of only two heads are in memory, and the gather of head h+1 (the reduce-scatter of head h-1 in
// backward) overlaps the compute of head h.

#include <limits>
#include <utility>

#include "kernels/block_kernels.hpp"
#include "spattn/error.hpp"
#include "strategies/call_validation.hpp"
#include "strategies/device_buffer.hpp"
#include "strategies/profile_recorder.hpp"
#include "strategies/strategy.hpp"

namespace spattn {

namespace {

constexpr int64_t kAllGatherStrategyId = 6;

// One rank's keys and values of one kv head side by side, the unit every collective moves.
struct KvHead {
  TensorView k;  // (B, S_local, 1, D)
  TensorView v;  // (B, S_local, 1, D)
};

// A chunk of another rank's shard that one of this rank's query chunks sees.
struct VisibleChunk {
  int rank = 0;
  SequenceChunk chunk;
};

}  // namespace

class AllGatherStrategy final : public Strategy {
 public:
  AllGatherStrategy(Communicator& communicator, const AttentionShape& call_shape, const AttentionOptions& call_options,
                    const std::string& caller_error)
      : comm(communicator),
        shape(call_shape),
        options(call_options),
        sequence_layout(agreed_layout(caller_error)),
        kernels(make_block_kernels(communicator.device())),
        mask(AttentionMask::from_options(call_options)),
        scale(resolved_scale(call_shape, call_options)),
        rank(communicator.rank()),
        ranks(communicator.size()),
        local_seq(sequence_layout.local_length()),
        heads_per_kv_head(call_shape.heads / call_shape.kv_heads) {
    for (const SequenceChunk& queries : sequence_layout.chunks(rank)) {
      std::vector<VisibleChunk> visible;
      for (int source = 0; source < ranks; ++source)
        for (const SequenceChunk& keys : sequence_layout.chunks(source))
          if (mask.any_visible(queries.position, queries.position + queries.length, keys.position,
                               keys.position + keys.length))
            visible.push_back({source, keys});
      visible_chunks.push_back(std::move(visible));
    }
  }

  const SequenceLayout& layout() const override { return sequence_layout; }
  void set_stream(void* stream) override { device_stream = stream; }

  void forward(const TensorView& q, const TensorView& k, const TensorView& v, TensorView out, TensorView lse,
               Profile* profile) override {
    bind_to_stream(device_stream, *kernels, comm);
    agree_on_call(comm, forward_arguments_error(shape, local_seq, kernels->device(), q, k, v, out, lse),
                  call_signature(kAllGatherStrategyId, shape, options));
    ensure_workspace(/*backward=*/false);
    const int heads = static_cast<int>(shape.kv_heads);
    ProfileRecorder recorder(profile, heads, *kernels);
    std::unique_ptr<PendingTransfer> gather;
    recorder.compute(0, [&] { gather = start_gather(k, v, 0, recorder, 0); });
    for (int kv_head = 0; kv_head < heads; ++kv_head) {
      std::unique_ptr<PendingTransfer> next_gather;
      if (kv_head + 1 < heads) recorder.compute(kv_head, [&] { next_gather = start_gather(k, v, kv_head + 1, recorder, kv_head); });
      recorder.communication(kv_head, [&] { comm.wait(*gather); });
      recorder.compute(kv_head, [&] { forward_head(q, lse, kv_head); });
      gather = std::move(next_gather);
    }
    recorder.compute(heads - 1, [&] { kernels->copy(out_accumulator, out); });
    recorder.finish();
  }

  void backward(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& out,
                const TensorView& lse, const TensorView& dout, TensorView dq, TensorView dk, TensorView dv,
                Profile* profile) override {
    bind_to_stream(device_stream, *kernels, comm);
    agree_on_call(comm,
                  backward_arguments_error(shape, local_seq, kernels->device(), q, k, v, out, lse, dout, dq, dk, dv),
                  call_signature(kAllGatherStrategyId, shape, options));
    ensure_workspace(/*backward=*/true);
    const int heads = static_cast<int>(shape.kv_heads);
    ProfileRecorder recorder(profile, heads, *kernels);
    std::unique_ptr<PendingTransfer> gather, reduction;
    recorder.compute(0, [&] {
      // Kernels that recompute delta from out (cuDNN's) would never read it.
      if (!kernels->backward_reads_output()) kernels->softmax_delta(out, dout, delta);
      kernels->fill(dq_accumulator, 0.0f);
      gather = start_gather(k, v, 0, recorder, 0);
    });
    for (int kv_head = 0; kv_head < heads; ++kv_head) {
      std::unique_ptr<PendingTransfer> next_gather;
      if (kv_head + 1 < heads) recorder.compute(kv_head, [&] { next_gather = start_gather(k, v, kv_head + 1, recorder, kv_head); });
      recorder.communication(kv_head, [&] { comm.wait(*gather); });
      recorder.compute(kv_head, [&] { backward_head(q, out, dout, lse, kv_head); });
      // The previous head's sums must land before its buffers are reused by this head's.
      if (reduction) finish_reduction(recorder, *reduction, kv_head - 1, dk, dv, kv_head);
      recorder.sent(kv_head, static_cast<double>(2 * head_elements() * sizeof(float)) * (ranks - 1), ranks - 1);
      reduction = comm.start_reduce_scatter_sum(static_cast<const float*>(gradient_gathered[kv_head % 2].data()),
                                                static_cast<float*>(gradient_reduced[kv_head % 2].data()),
                                                2 * head_elements());
      gather = std::move(next_gather);
    }
    finish_reduction(recorder, *reduction, heads - 1, dk, dv, heads - 1);
    recorder.compute(heads - 1, [&] { kernels->copy(dq_accumulator, dq); });
    recorder.finish();
  }

 private:
  SequenceLayout agreed_layout(const std::string& caller_error) {
    const std::string error =
        first_error({caller_error, shape_and_options_error(shape, options),
                     SequenceLayout::split_error(LayoutKind::zigzag, shape.seq, comm.size())});
    agree_on_call(comm, error, call_signature(kAllGatherStrategyId, shape, options));
    return SequenceLayout(LayoutKind::zigzag, shape.seq, comm.size());
  }

  // Elements of one rank's keys (or values) of one kv head: B * S_local * D.
  std::size_t head_elements() const { return static_cast<std::size_t>(shape.batch * local_seq * shape.head_dim); }

  // A (k, v) pair of one kv head at `data`, keys first.
  KvHead kv_head_at(void* data, DType dtype) const {
    const TensorView k = TensorView::contiguous(data, dtype, {shape.batch, local_seq, 1, shape.head_dim}, kernels->device());
    TensorView v = k;
    v.data = static_cast<char*>(data) + head_elements() * dtype_size(dtype);
    return {k, v};
  }

  // Rank `source`'s (k, v) of one kv head inside a gathered buffer (blocks in rank order).
  KvHead gathered_head(const DeviceBuffer& buffer, DType dtype, int source) const {
    return kv_head_at(static_cast<char*>(buffer.data()) + 2 * head_elements() * dtype_size(dtype) * source, dtype);
  }

  void ensure_workspace(bool backward) {
    const std::size_t kv_bytes = 2 * head_elements() * dtype_size(shape.dtype);
    const std::size_t gradient_bytes = 2 * head_elements() * sizeof(float);
    const std::size_t query_bytes = static_cast<std::size_t>(shape.batch * local_seq * shape.heads * shape.head_dim);
    if (buffers.empty()) {
      for (int i = 0; i < 2; ++i) {
        packed[i] = DeviceBuffer(*kernels, kv_bytes);
        gathered[i] = DeviceBuffer(*kernels, kv_bytes * static_cast<std::size_t>(ranks));
      }
      buffers.emplace_back(*kernels, query_bytes * sizeof(float));
      out_accumulator = TensorView::contiguous(buffers.back().data(), DType::f32,
                                               {shape.batch, local_seq, shape.heads, shape.head_dim}, kernels->device());
    }
    if (!backward || dq_accumulator.data) return;
    for (int i = 0; i < 2; ++i) {
      gradient_gathered[i] = DeviceBuffer(*kernels, gradient_bytes * static_cast<std::size_t>(ranks));
      gradient_reduced[i] = DeviceBuffer(*kernels, gradient_bytes);
    }
    buffers.emplace_back(*kernels, query_bytes * sizeof(float));
    dq_accumulator = TensorView::contiguous(buffers.back().data(), DType::f32,
                                            {shape.batch, local_seq, shape.heads, shape.head_dim}, kernels->device());
    buffers.emplace_back(*kernels, static_cast<std::size_t>(shape.batch * shape.heads * local_seq) * sizeof(float));
    delta = TensorView::contiguous(buffers.back().data(), DType::f32, {shape.batch, shape.heads, local_seq},
                                   kernels->device());
  }

  // Packs this rank's kv head `kv_head` and starts gathering every rank's into gathered[kv_head % 2].
  std::unique_ptr<PendingTransfer> start_gather(const TensorView& k, const TensorView& v, int kv_head,
                                                ProfileRecorder& recorder, int step) {
    const KvHead mine = kv_head_at(packed[kv_head % 2].data(), shape.dtype);
    kernels->copy(k.slice(2, kv_head, 1), mine.k);
    kernels->copy(v.slice(2, kv_head, 1), mine.v);
    const std::size_t bytes = 2 * head_elements() * dtype_size(shape.dtype);
    recorder.sent(step, static_cast<double>(bytes) * (ranks - 1), ranks - 1);
    return comm.start_all_gather(mine.k.data, gathered[kv_head % 2].data(), bytes);
  }

  // Query heads that read kv head `kv_head`.
  TensorView query_heads(const TensorView& tensor, int kv_head) const {
    return tensor.slice(2, kv_head * heads_per_kv_head, heads_per_kv_head);
  }
  TensorView lse_heads(const TensorView& lse, int kv_head) const {
    return lse.slice(1, kv_head * heads_per_kv_head, heads_per_kv_head);
  }

  void forward_head(const TensorView& q, TensorView lse, int kv_head) {
    const DeviceBuffer& keys = gathered[kv_head % 2];
    std::size_t chunk_index = 0;
    for (const SequenceChunk& queries : sequence_layout.chunks(rank)) {
      forward_block.segments.clear();
      for (const VisibleChunk& visible : visible_chunks[chunk_index++]) {
        const KvHead source = gathered_head(keys, shape.dtype, visible.rank);
        forward_block.segments.push_back({source.k.slice(1, visible.chunk.local_offset, visible.chunk.length),
                                          source.v.slice(1, visible.chunk.local_offset, visible.chunk.length),
                                          visible.chunk.position});
      }
      const TensorView out_rows = query_heads(out_accumulator.slice(1, queries.local_offset, queries.length), kv_head);
      const TensorView lse_rows = lse_heads(lse.slice(2, queries.local_offset, queries.length), kv_head);
      if (forward_block.segments.empty()) {
        // Queries that see no key at all: out = 0, lse = -inf.
        kernels->fill(out_rows, 0.0f);
        kernels->fill(lse_rows, -std::numeric_limits<float>::infinity());
        continue;
      }
      forward_block.q = query_heads(q.slice(1, queries.local_offset, queries.length), kv_head);
      forward_block.q_position = queries.position;
      forward_block.mask = mask;
      forward_block.scale = scale;
      forward_block.out = out_rows;
      forward_block.lse = lse_rows;
      kernels->forward(forward_block);
    }
  }

  void backward_head(const TensorView& q, const TensorView& out, const TensorView& dout, const TensorView& lse,
                     int kv_head) {
    const DeviceBuffer& keys = gathered[kv_head % 2];
    const DeviceBuffer& gradients = gradient_gathered[kv_head % 2];
    kernels->fill(TensorView::contiguous(gradients.data(), DType::f32,
                                         {static_cast<int64_t>(2 * head_elements()) * ranks}, kernels->device()),
                  0.0f);
    std::size_t chunk_index = 0;
    for (const SequenceChunk& queries : sequence_layout.chunks(rank)) {
      backward_block.segments.clear();
      for (const VisibleChunk& visible : visible_chunks[chunk_index++]) {
        const KvHead source = gathered_head(keys, shape.dtype, visible.rank);
        const KvHead gradient = gathered_head(gradients, DType::f32, visible.rank);
        const int64_t offset = visible.chunk.local_offset;
        const int64_t length = visible.chunk.length;
        backward_block.segments.push_back(
            {{source.k.slice(1, offset, length), source.v.slice(1, offset, length), visible.chunk.position},
             gradient.k.slice(1, offset, length),
             gradient.v.slice(1, offset, length)});
      }
      if (backward_block.segments.empty()) continue;
      const int64_t offset = queries.local_offset;
      backward_block.q = query_heads(q.slice(1, offset, queries.length), kv_head);
      backward_block.q_position = queries.position;
      backward_block.dout = query_heads(dout.slice(1, offset, queries.length), kv_head);
      backward_block.out = query_heads(out.slice(1, offset, queries.length), kv_head);
      backward_block.lse = lse_heads(lse.slice(2, offset, queries.length), kv_head);
      backward_block.delta = lse_heads(delta.slice(2, offset, queries.length), kv_head);
      backward_block.mask = mask;
      backward_block.scale = scale;
      backward_block.dq = query_heads(dq_accumulator.slice(1, offset, queries.length), kv_head);
      kernels->backward(backward_block);
    }
  }

  // Waits for the reduce-scatter of kv head `kv_head` and writes this rank's sums into dk, dv.
  void finish_reduction(ProfileRecorder& recorder, PendingTransfer& reduction, int kv_head, TensorView dk, TensorView dv,
                        int step) {
    recorder.communication(step, [&] { comm.wait(reduction); });
    recorder.compute(step, [&] {
      const KvHead sums = kv_head_at(gradient_reduced[kv_head % 2].data(), DType::f32);
      kernels->copy(sums.k, dk.slice(2, kv_head, 1));
      kernels->copy(sums.v, dv.slice(2, kv_head, 1));
    });
  }

  Communicator& comm;
  const AttentionShape shape;
  const AttentionOptions options;
  const SequenceLayout sequence_layout;
  std::unique_ptr<BlockKernels> kernels;
  void* device_stream = nullptr;  // see set_stream
  const AttentionMask mask;
  const float scale;
  const int rank;
  const int ranks;
  const int64_t local_seq;
  const int64_t heads_per_kv_head;
  std::vector<std::vector<VisibleChunk>> visible_chunks;  // per query chunk of this rank

  // Double buffers: index kv_head % 2.
  DeviceBuffer packed[2];             // this rank's (k, v) of one kv head, dtype
  DeviceBuffer gathered[2];           // every rank's (k, v) of one kv head, rank order
  DeviceBuffer gradient_gathered[2];  // fp32 (dk, dv) for every rank's keys of one kv head
  DeviceBuffer gradient_reduced[2];   // fp32 (dk, dv) of this rank's keys, summed over ranks
  std::vector<DeviceBuffer> buffers;
  TensorView out_accumulator;  // (B, S_local, H, D) fp32
  TensorView dq_accumulator;   // (B, S_local, H, D) fp32
  TensorView delta;            // (B, H, S_local) fp32
  ForwardBlock forward_block;
  BackwardBlock backward_block;
};

std::unique_ptr<Strategy> make_allgather_strategy(Communicator& communicator, const AttentionShape& shape,
                                                  const AttentionOptions& options, const std::string& caller_error) {
  return std::make_unique<AllGatherStrategy>(communicator, shape, options, caller_error);
}

}  // namespace spattn
