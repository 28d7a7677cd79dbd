// Ring and zigzag ring attention, written once over a SequenceLayout: at step s rank r holds the
// keys and values of rank (r - s) mod N, computes the blocks that its query chunks can see of
// them, and meanwhile passes them on to rank r + 1. In backward the gradients of those keys and
// values travel one hop behind them and reach their owner after the last step.

#include "spattn/ring_attention.hpp"

#include <limits>
#include <utility>

#include "kernels/block_kernels.hpp"
#include "schedule/ring_schedule.hpp"
#include "spattn/error.hpp"
#include "strategies/strategy.hpp"
#include "strategies/call_validation.hpp"
#include "strategies/device_buffer.hpp"
#include "strategies/profile_recorder.hpp"

namespace spattn {

namespace {

// Identifies the strategy in the call signature that ranks agree on.
int64_t strategy_id(LayoutKind layout) { return layout == LayoutKind::contiguous ? 1 : 2; }

// Keys and values of one rank's shard, or their fp32 gradients.
struct KvTensors {
  TensorView k;  // (B, S_local, HK, D)
  TensorView v;  // (B, S_local, HK, D)
};

}  // namespace

class RingStrategy final : public Strategy {
 public:
  RingStrategy(Communicator& communicator, LayoutKind layout_kind, const AttentionShape& call_shape,
               const AttentionOptions& call_options, const std::string& caller_error)
      : comm(communicator),
        shape(call_shape),
        options(call_options),
        strategy(strategy_id(layout_kind)),
        sequence_layout(agreed_layout(layout_kind, caller_error)),
        kernels(make_block_kernels(communicator.device())),
        mask(AttentionMask::from_options(call_options)),
        scale(resolved_scale(call_shape, call_options)),
        rank(communicator.rank()),
        ranks(communicator.size()),
        next((rank + 1) % ranks),
        previous((rank + ranks - 1) % ranks),
        local_seq(sequence_layout.local_length()) {
    for (int step = 0; step < ranks; ++step) blocks_of_step.push_back(ring_step_blocks(sequence_layout, mask, rank, step));
    for (const SequenceChunk& chunk : sequence_layout.chunks(rank)) longest_chunk = std::max(longest_chunk, chunk.length);
  }

  const SequenceLayout& layout() const override { return sequence_layout; }

  // Validates the plan's arguments and agrees on them with every rank before building the layout.
  SequenceLayout agreed_layout(LayoutKind layout_kind, const std::string& caller_error) {
    const std::string error = first_error({caller_error, shape_and_options_error(shape, options),
                                           SequenceLayout::split_error(layout_kind, shape.seq, comm.size())});
    agree_on_call(comm, error, call_signature(strategy, shape, options));
    return SequenceLayout(layout_kind, shape.seq, comm.size());
  }

  TensorView bshd(const DeviceBuffer& buffer, DType dtype, int64_t seq, int64_t heads) const {
    return TensorView::contiguous(buffer.data(), dtype, {shape.batch, seq, heads, shape.head_dim}, kernels->device());
  }
  TensorView bhs(const DeviceBuffer& buffer, int64_t seq) const {
    return TensorView::contiguous(buffer.data(), DType::f32, {shape.batch, shape.heads, seq}, kernels->device());
  }
  std::size_t bshd_bytes(DType dtype, int64_t seq, int64_t heads) const {
    return static_cast<std::size_t>(shape.batch * seq * heads * shape.head_dim) * dtype_size(dtype);
  }
  std::size_t bhs_bytes(int64_t seq) const {
    return static_cast<std::size_t>(shape.batch * shape.heads * seq) * sizeof(float);
  }

  // A pair of (B, S_local, HK, D) tensors of `dtype` in one new buffer.
  KvTensors allocate_kv(std::vector<DeviceBuffer>& owner, DType dtype) {
    owner.emplace_back(*kernels, 2 * bshd_bytes(dtype, local_seq, shape.kv_heads));
    const DeviceBuffer& buffer = owner.back();
    TensorView k = bshd(buffer, dtype, local_seq, shape.kv_heads);
    TensorView v = k;
    v.data = static_cast<char*>(buffer.data()) + bshd_bytes(dtype, local_seq, shape.kv_heads);
    return {k, v};
  }

  // Workspace, allocated at the first call that needs it and reused by every later call.
  void ensure_rotating_kv() {
    if (!kv_buffers.empty()) return;
    rotating_kv[0] = allocate_kv(kv_buffers, shape.dtype);
    rotating_kv[1] = allocate_kv(kv_buffers, shape.dtype);
  }
  void ensure_forward_workspace() {
    ensure_rotating_kv();
    if (!forward_buffers.empty()) return;
    for (std::size_t bytes : {bshd_bytes(DType::f32, local_seq, shape.heads), bhs_bytes(local_seq),
                              bshd_bytes(DType::f32, longest_chunk, shape.heads), bhs_bytes(longest_chunk)})
      forward_buffers.emplace_back(*kernels, bytes);
    running_out = bshd(forward_buffers[0], DType::f32, local_seq, shape.heads);
    running_lse = bhs(forward_buffers[1], local_seq);
  }
  void ensure_backward_workspace() {
    ensure_rotating_kv();
    if (!backward_buffers.empty()) return;
    backward_buffers.emplace_back(*kernels, bshd_bytes(DType::f32, local_seq, shape.heads));
    backward_buffers.emplace_back(*kernels, bhs_bytes(local_seq));
    dq_accumulator = bshd(backward_buffers[0], DType::f32, local_seq, shape.heads);
    delta = bhs(backward_buffers[1], local_seq);
    kv_gradient_contribution[0] = allocate_kv(backward_buffers, DType::f32);
    kv_gradient_contribution[1] = allocate_kv(backward_buffers, DType::f32);
    kv_gradient_received = allocate_kv(backward_buffers, DType::f32);
  }

  // Send `outgoing` to the next rank while receiving the previous rank's into `incoming`.
  std::unique_ptr<PendingTransfer> start_rotation(const KvTensors& outgoing, const KvTensors& incoming) {
    const std::size_t bytes = static_cast<std::size_t>(outgoing.k.numel()) * dtype_size(outgoing.k.dtype);
    TransferBatch batch;
    batch.sends = {{outgoing.k.data, bytes, next}, {outgoing.v.data, bytes, next}};
    batch.receives = {{incoming.k.data, bytes, previous}, {incoming.v.data, bytes, previous}};
    return comm.start(batch);
  }

  // The blocks of one forward step: each query chunk against the key chunks it sees.
  void forward_step(const TensorView& q, const KvTensors& kv, int step) {
    for (const RingStepBlock& step_block : blocks_of_step[static_cast<std::size_t>(step)]) {
      const SequenceChunk& queries = step_block.queries;
      forward_block.segments.clear();
      for (const SequenceChunk& keys : step_block.keys)
        forward_block.segments.push_back({kv.k.slice(1, keys.local_offset, keys.length),
                                          kv.v.slice(1, keys.local_offset, keys.length), keys.position});
      forward_block.q = q.slice(1, queries.local_offset, queries.length);
      forward_block.q_position = queries.position;
      forward_block.mask = mask;
      forward_block.scale = scale;
      forward_block.out = bshd(forward_buffers[2], DType::f32, queries.length, shape.heads);
      forward_block.lse = bhs(forward_buffers[3], queries.length);
      kernels->forward(forward_block);
      kernels->merge(forward_block.out, forward_block.lse, running_out.slice(1, queries.local_offset, queries.length),
                     running_lse.slice(2, queries.local_offset, queries.length));
    }
  }

  // The blocks of one backward step, accumulating into dq and into `kv_gradient` (the gradient
  // of the held keys and values from this rank's queries).
  void backward_step(const TensorView& q, const TensorView& dout, const TensorView& lse, const KvTensors& kv,
                     const KvTensors& kv_gradient, int step) {
    for (const RingStepBlock& step_block : blocks_of_step[static_cast<std::size_t>(step)]) {
      backward_block.segments.clear();
      for (const SequenceChunk& keys : step_block.keys) {
        const int64_t offset = keys.local_offset;
        const int64_t length = keys.length;
        backward_block.segments.push_back(
            {{kv.k.slice(1, offset, length), kv.v.slice(1, offset, length), keys.position},
             kv_gradient.k.slice(1, offset, length),
             kv_gradient.v.slice(1, offset, length)});
      }
      const int64_t offset = step_block.queries.local_offset;
      const int64_t length = step_block.queries.length;
      backward_block.q = q.slice(1, offset, length);
      backward_block.q_position = step_block.queries.position;
      backward_block.dout = dout.slice(1, offset, length);
      backward_block.lse = lse.slice(2, offset, length);
      backward_block.delta = delta.slice(2, offset, length);
      backward_block.mask = mask;
      backward_block.scale = scale;
      backward_block.dq = dq_accumulator.slice(1, offset, length);
      kernels->backward(backward_block);
    }
  }

  std::string tensors_error(std::initializer_list<std::pair<const char*, const TensorView*>> query_like,
                            std::initializer_list<std::pair<const char*, const TensorView*>> key_like,
                            const TensorView* lse) const {
    const Device device = kernels->device();
    for (const auto& [name, tensor] : query_like) {
      std::string error = tensor_error(name, *tensor, {shape.batch, local_seq, shape.heads, shape.head_dim},
                                       shape.dtype, device);
      if (!error.empty()) return error;
    }
    for (const auto& [name, tensor] : key_like) {
      std::string error = tensor_error(name, *tensor, {shape.batch, local_seq, shape.kv_heads, shape.head_dim},
                                       shape.dtype, device);
      if (!error.empty()) return error;
    }
    return tensor_error("lse", *lse, {shape.batch, shape.heads, local_seq}, DType::f32, device);
  }

  void forward(const TensorView& q, const TensorView& k, const TensorView& v, TensorView out, TensorView lse,
               Profile* profile) override {
    agree_on_call(comm, tensors_error({{"q", &q}, {"out", &out}}, {{"k", &k}, {"v", &v}}, &lse),
                  call_signature(strategy, shape, options));
    ensure_forward_workspace();
    ProfileRecorder recorder(profile, ranks);
    int current = 0;
    recorder.compute(0, [&] {
      kernels->copy(k, rotating_kv[current].k);
      kernels->copy(v, rotating_kv[current].v);
      kernels->fill(running_out, 0.0f);
      kernels->fill(running_lse, -std::numeric_limits<float>::infinity());
    });
    for (int step = 0; step < ranks; ++step) {
      std::unique_ptr<PendingTransfer> rotation;
      if (step + 1 < ranks) rotation = start_rotation(rotating_kv[current], rotating_kv[1 - current]);
      recorder.compute(step, [&] { forward_step(q, rotating_kv[current], step); });
      if (rotation) {
        recorder.communication(step, [&] { comm.wait(*rotation); });
        current = 1 - current;
      }
    }
    recorder.compute(ranks - 1, [&] {
      kernels->copy(running_out, out);
      kernels->copy(running_lse, lse);
    });
    recorder.finish();
  }

  void backward(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& out,
                const TensorView& lse, const TensorView& dout, TensorView dq, TensorView dk, TensorView dv,
                Profile* profile) override {
    agree_on_call(comm,
                  tensors_error({{"q", &q}, {"out", &out}, {"dout", &dout}, {"dq", &dq}},
                                {{"k", &k}, {"v", &v}, {"dk", &dk}, {"dv", &dv}}, &lse),
                  call_signature(strategy, shape, options));
    ensure_backward_workspace();
    ProfileRecorder recorder(profile, ranks);
    int current = 0;
    recorder.compute(0, [&] {
      kernels->copy(k, rotating_kv[current].k);
      kernels->copy(v, rotating_kv[current].v);
      kernels->softmax_delta(out, dout, delta);
      kernels->fill(dq_accumulator, 0.0f);
    });
    // The gradient of the keys and values computed at step s leaves for the next rank after
    // step s, overlapping step s + 1; at the last step that next rank is their owner.
    std::unique_ptr<PendingTransfer> gradient_hop;
    for (int step = 0; step < ranks; ++step) {
      std::unique_ptr<PendingTransfer> rotation;
      if (step + 1 < ranks) rotation = start_rotation(rotating_kv[current], rotating_kv[1 - current]);
      const KvTensors& contribution = kv_gradient_contribution[step % 2];
      recorder.compute(step, [&] {
        kernels->fill(contribution.k, 0.0f);
        kernels->fill(contribution.v, 0.0f);
        backward_step(q, dout, lse, rotating_kv[current], contribution, step);
      });
      if (gradient_hop) {
        recorder.communication(step, [&] { comm.wait(*gradient_hop); });
        recorder.compute(step, [&] {
          kernels->add(kv_gradient_received.k, contribution.k);
          kernels->add(kv_gradient_received.v, contribution.v);
        });
      }
      if (ranks > 1) gradient_hop = start_rotation(contribution, kv_gradient_received);
      if (rotation) {
        recorder.communication(step, [&] { comm.wait(*rotation); });
        current = 1 - current;
      }
    }
    if (gradient_hop) recorder.communication(ranks - 1, [&] { comm.wait(*gradient_hop); });
    const KvTensors& own_gradient = ranks > 1 ? kv_gradient_received : kv_gradient_contribution[0];
    recorder.compute(ranks - 1, [&] {
      kernels->copy(dq_accumulator, dq);
      kernels->copy(own_gradient.k, dk);
      kernels->copy(own_gradient.v, dv);
    });
    recorder.finish();
  }

 private:
  Communicator& comm;
  const AttentionShape shape;
  const AttentionOptions options;
  const int64_t strategy;
  const SequenceLayout sequence_layout;
  std::unique_ptr<BlockKernels> kernels;
  const AttentionMask mask;
  const float scale;
  const int rank;
  const int ranks;
  const int next;
  const int previous;
  const int64_t local_seq;
  std::vector<std::vector<RingStepBlock>> blocks_of_step;  // this rank's blocks, per step
  int64_t longest_chunk = 0;

  std::vector<DeviceBuffer> kv_buffers;
  KvTensors rotating_kv[2];
  std::vector<DeviceBuffer> forward_buffers;
  TensorView running_out;  // (B, S_local, H, D) fp32
  TensorView running_lse;  // (B, H, S_local) fp32
  std::vector<DeviceBuffer> backward_buffers;
  TensorView dq_accumulator;  // (B, S_local, H, D) fp32
  TensorView delta;           // (B, H, S_local) fp32
  KvTensors kv_gradient_contribution[2];
  KvTensors kv_gradient_received;
  // Reused across steps so that their segment lists keep their capacity.
  ForwardBlock forward_block;
  BackwardBlock backward_block;
};

std::unique_ptr<Strategy> make_ring_strategy(Communicator& communicator, LayoutKind layout, const AttentionShape& shape,
                                             const AttentionOptions& options, const std::string& caller_error) {
  return std::make_unique<RingStrategy>(communicator, layout, shape, options, caller_error);
}

namespace {

// A one-shot plan for the global shape implied by this rank's q and k, and why that shape cannot
// be read when they are not (B, S_local, H, D) tensors (agreed with the other ranks like any
// other invalid argument).
std::unique_ptr<Strategy> plan_from_tensors(Communicator& communicator, LayoutKind layout, const TensorView& q,
                                            const TensorView& k, const AttentionOptions& options) {
  std::string error;
  AttentionShape shape;
  if (q.ndim != 4) {
    error = "q has shape " + q.describe() + "; expected 4 dimensions (B, S, H, D)";
  } else if (k.ndim != 4) {
    error = "k has shape " + k.describe() + "; expected 4 dimensions (B, S, HK, D)";
  } else {
    shape = AttentionShape{q.size(0), q.size(1) * communicator.size(), q.size(2), k.size(2), q.size(3), q.dtype};
  }
  return make_ring_strategy(communicator, layout, shape, options, error);
}

}  // namespace

void ring_attention_forward(Communicator& communicator, const TensorView& q, const TensorView& k,
                            const TensorView& v, TensorView out, TensorView lse, const AttentionOptions& options,
                            Profile* profile) {
  plan_from_tensors(communicator, LayoutKind::contiguous, q, k, options)->forward(q, k, v, out, lse, profile);
}

void ring_attention_backward(Communicator& communicator, const TensorView& q, const TensorView& k,
                             const TensorView& v, const TensorView& out, const TensorView& lse,
                             const TensorView& dout, TensorView dq, TensorView dk, TensorView dv,
                             const AttentionOptions& options, Profile* profile) {
  plan_from_tensors(communicator, LayoutKind::contiguous, q, k, options)
      ->backward(q, k, v, out, lse, dout, dq, dk, dv, profile);
}

void zigzag_ring_attention_forward(Communicator& communicator, const TensorView& q, const TensorView& k,
                                   const TensorView& v, TensorView out, TensorView lse,
                                   const AttentionOptions& options, Profile* profile) {
  plan_from_tensors(communicator, LayoutKind::zigzag, q, k, options)->forward(q, k, v, out, lse, profile);
}

void zigzag_ring_attention_backward(Communicator& communicator, const TensorView& q, const TensorView& k,
                                    const TensorView& v, const TensorView& out, const TensorView& lse,
                                    const TensorView& dout, TensorView dq, TensorView dk, TensorView dv,
                                    const AttentionOptions& options, Profile* profile) {
  plan_from_tensors(communicator, LayoutKind::zigzag, q, k, options)
      ->backward(q, k, v, out, lse, dout, dq, dk, dv, profile);
}

}  // namespace spattn
