// Rotation attention, written once for every set of cycles: ring and zigzag ring attention (one
// cycle), Hamiltonian-cycle attention (n-1 cycles, TASP) and its two-level form (m cycles).
// Every rank cuts its keys and values into one slot per cycle; at each step every slot moves one
// hop along its cycle while the rank computes the blocks its queries can see of the slots it
// holds. In backward the keys and values rotate again and the gradient of each slot travels one
// hop behind it, reaching the slot's owner after the last step; a rank of several query chunks
// runs its own blocks in two parts, at step 0 and after the last step, and keeps their gradient,
// so that the last hop travels while it still computes.

#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <utility>

#include "kernels/block_kernels.hpp"
#include "schedule/rotation_schedule.hpp"
#include "schedule/strategy_rules.hpp"
#include "spattn/error.hpp"
#include "strategies/call_validation.hpp"
#include "strategies/device_buffer.hpp"
#include "strategies/profile_recorder.hpp"
#include "strategies/strategy_base.hpp"

namespace spattn {

namespace {

// Keys and values of one slot, or their fp32 gradients.
struct KvTensors {
  TensorView k;  // (B, slot tokens, HK, D)
  TensorView v;  // (B, slot tokens, HK, D)
};

// One KvTensors per slot.
using SlotSet = std::vector<KvTensors>;

// What distinguishes the rotation strategies: the algorithm and node count whose form and cycles
// schedule/strategy_rules.hpp gives (the cycles built only once the ranks agree that they exist).
struct RotationKind {
  Algorithm algorithm = Algorithm::ring;
  int nodes = 1;
};

// What every rank of a rotation's call agrees on; hamilton2's node count too.
std::vector<CallField> rotation_signature(const RotationKind& kind, const AttentionShape& shape,
                                          const AttentionOptions& options) {
  std::vector<CallField> signature = call_signature(kind.algorithm, shape, options);
  if (kind.algorithm == Algorithm::hamilton2) signature.push_back({"nodes", kind.nodes});
  return signature;
}

}  // namespace

class RotationStrategy final : public StrategyBase {
 public:
  // The ranks of `communicator` agreed on the call (make_rotation_strategy).
  // `documents`: the packed documents when the call has them (the layout is theirs).
  RotationStrategy(Communicator& communicator, const RotationKind& kind, std::vector<CallField> signature,
                   SequenceLayout layout, const std::optional<DocumentLayout>& documents,
                   const AttentionShape& call_shape, const AttentionOptions& call_options)
      : StrategyBase(communicator, std::move(signature), std::move(layout), call_shape, call_options),
        schedule(rotation_cycles(kind.algorithm, communicator.size(), kind.nodes), communicator.size()),
        rank(communicator.rank()),
        ranks(communicator.size()),
        slots(schedule.slots()),
        slot_cut(sequence_layout, slots),
        own_gradient_stays(keeps_own_gradient(sequence_layout)),
        own_slot_runs(slot_runs_in_shard()) {
    const DocumentLayout* packed = documents ? &*documents : nullptr;
    for (int step = 0; step < ranks; ++step)
      blocks_of_step.push_back(rotation_step_blocks(sequence_layout, slot_cut, schedule, mask, packed, rank, step));
    own_blocks = split_own_blocks(blocks_of_step[0], mask, ranks);
    find_first_and_last_blocks();
  }

  void forward(const TensorView& q, const TensorView& k, const TensorView& v, TensorView out, TensorView lse,
               Profile* profile) override {
    begin_forward(world, q, k, v, out, lse);
    ensure_forward_workspace();
    ProfileRecorder recorder(profile, ranks, *kernels, "forward");
    int current = 0;
    SlotSet held;
    recorder.compute(0, [&] {
      held = own_slots(k, v, rotating_kv[current]);
      // The first block of a chunk writes its rows, the last converts them into out, and lse
      // accumulates in place: only rows that no block sees (padding among them) are written here.
      for (const SequenceChunk& rows : rows_without_blocks) {
        kernels->fill(out.slice(1, rows.local_offset, rows.length), 0.0f);
        kernels->fill(lse.slice(2, rows.local_offset, rows.length), -std::numeric_limits<float>::infinity());
      }
    });
    for (int step = 0; step < ranks; ++step) {
      std::unique_ptr<PendingTransfer> rotation;
      if (step + 1 < ranks) rotation = start_rotation(held, rotating_kv[1 - current], recorder, step);
      recorder.compute(step, [&] { forward_step(q, held, step, out, lse); });
      if (rotation) {
        recorder.wait(step, world, *rotation);
        current = 1 - current;
        held = rotating_kv[current];
      }
    }
    recorder.finish();
  }

  void backward(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& out,
                const TensorView& lse, const TensorView& dout, TensorView dq, TensorView dk, TensorView dv,
                Profile* profile) override {
    begin_backward(world, q, k, v, out, lse, dout, dq, dk, dv);
    ensure_backward_workspace();
    ProfileRecorder recorder(profile, ranks, *kernels, "backward");
    int current = 0;
    SlotSet own, held;
    recorder.compute(0, [&] {
      own = own_slots(k, v, rotating_kv[current]);
      held = own;
      kernels->prepare_backward_delta(out, dout, delta);
      kernels->fill(dq_accumulator, 0.0f);
    });
    // The gradient of the slots computed at step s leaves along their cycles after step s,
    // overlapping step s + 1; after the last step the next rank of each cycle is the owner. Where
    // the own slots' gradient stays here from step 0 (in fp32), the last hop (fp32) brings the rest
    // while the late own blocks run; else it travels with the others, the last hop exposed.
    std::unique_ptr<PendingTransfer> gradient_hop;
    for (int step = 0; step < ranks; ++step) {
      std::unique_ptr<PendingTransfer> rotation;
      if (step + 1 < ranks) rotation = start_rotation(held, rotating_kv[1 - current], recorder, step);
      const bool stays = step == 0 && own_gradient_stays;
      const SlotSet& contribution = stays ? own_kv_gradient : kv_gradient_contribution[step % 2];
      recorder.compute(step, [&] {
        fill_slots(contribution, 0.0f);
        backward_blocks(q, out, dout, lse,
                        step == 0 ? own_blocks.early : blocks_of_step[static_cast<std::size_t>(step)], held,
                        contribution);
      });
      if (gradient_hop) {
        recorder.wait(step, world, *gradient_hop);
        gradient_hop.reset();
        recorder.compute(step, [&] { add_slots(kv_gradient_received, contribution); });
      }
      if (!stays && (step + 1 < ranks || own_gradient_stays))
        gradient_hop = start_rotation(contribution, kv_gradient_received, recorder, step);
      if (rotation) {
        recorder.wait(step, world, *rotation);
        current = 1 - current;
        held = rotating_kv[current];
      }
    }
    const SlotSet* own_gradient = &own_kv_gradient;
    if (own_gradient_stays) {
      // A rank whose own blocks all ran at step 0 leaves the last hop nothing to hide behind.
      if (!own_blocks.late.empty()) {
        recorder.compute(ranks - 1, [&] {
          // The held keys and values are the last step's, still read by its blocks; the other
          // buffer is free (no rotation follows the last step) and takes the copied own slots
          // again (at 2 ranks it never received, and still holds them).
          if (ranks > 2) own = own_slots(k, v, rotating_kv[1 - current]);
          backward_blocks(q, out, dout, lse, own_blocks.late, own, own_kv_gradient);
        });
      }
    } else if (ranks > 1) {
      // The owner would round the last hop's gradient to the caller's dtype anyway, so the sender
      // does and the hop carries half the bytes of fp32 (for bf16 and fp16); both key/value
      // buffers are free now.
      const SlotSet& final_gradient = rotating_kv[current];
      recorder.compute(ranks - 1, [&] { copy_slots(kv_gradient_contribution[(ranks - 1) % 2], final_gradient); });
      gradient_hop = start_rotation(final_gradient, rotating_kv[1 - current], recorder, ranks - 1);
      own_gradient = &rotating_kv[1 - current];
    } else {
      own_gradient = &kv_gradient_contribution[0];
    }
    recorder.compute(ranks - 1, [&] { kernels->copy(dq_accumulator, dq); });  // while the last hop travels
    if (gradient_hop) {
      recorder.wait(ranks - 1, world, *gradient_hop);
      if (own_gradient_stays) recorder.compute(ranks - 1, [&] { add_slots(kv_gradient_received, own_kv_gradient); });
    }
    recorder.compute(ranks - 1, [&] { return_own_slots(*own_gradient, dk, dv); });
    recorder.finish();
  }

 private:
  TensorView bshd(void* data, DType dtype, int64_t seq, int64_t heads) const {
    return TensorView::contiguous(data, dtype, {shape.batch, seq, heads, shape.head_dim}, kernels->device());
  }
  TensorView bhs(void* data, int64_t seq) const {
    return TensorView::contiguous(data, DType::f32, {shape.batch, shape.heads, seq}, kernels->device());
  }
  std::size_t bshd_bytes(DType dtype, int64_t seq, int64_t heads) const {
    return static_cast<std::size_t>(shape.batch * seq * heads * shape.head_dim) * dtype_size(dtype);
  }
  std::size_t bhs_bytes(int64_t seq) const {
    return static_cast<std::size_t>(shape.batch * shape.heads * seq) * sizeof(float);
  }

  // Every slot's keys and values of `dtype` in one new buffer: the keys of all slots, then the
  // values, each slot a contiguous (B, slot tokens, HK, D) tensor that travels as one message.
  SlotSet allocate_slots(std::vector<DeviceBuffer>& owner, DType dtype) {
    const std::size_t all_keys_bytes = bshd_bytes(dtype, local_seq(), shape.kv_heads);
    owner.emplace_back(*kernels, 2 * all_keys_bytes);
    char* keys = static_cast<char*>(owner.back().data());
    char* values = keys + all_keys_bytes;
    SlotSet set;
    for (int slot = 0; slot < slots; ++slot) {
      const int64_t length = slot_cut.slot_length(slot);
      set.push_back({bshd(keys, dtype, length, shape.kv_heads), bshd(values, dtype, length, shape.kv_heads)});
      keys += bshd_bytes(dtype, length, shape.kv_heads);
      values += bshd_bytes(dtype, length, shape.kv_heads);
    }
    return set;
  }

  // Workspace, allocated at the first call that needs it and reused by every later call.
  void ensure_rotating_kv() {
    if (!kv_buffers.empty()) return;
    rotating_kv[0] = allocate_slots(kv_buffers, shape.dtype);
    rotating_kv[1] = allocate_slots(kv_buffers, shape.dtype);
  }
  void ensure_forward_workspace() {
    ensure_rotating_kv();
    if (!forward_buffers.empty()) return;
    forward_buffers.emplace_back(*kernels, bshd_bytes(DType::f32, local_seq(), shape.heads));
    running_out = bshd(forward_buffers[0].data(), DType::f32, local_seq(), shape.heads);
  }
  void ensure_backward_workspace() {
    ensure_rotating_kv();
    if (!backward_buffers.empty()) return;
    backward_buffers.emplace_back(*kernels, bshd_bytes(DType::f32, local_seq(), shape.heads));
    backward_buffers.emplace_back(*kernels, bhs_bytes(local_seq()));
    dq_accumulator = bshd(backward_buffers[0].data(), DType::f32, local_seq(), shape.heads);
    delta = bhs(backward_buffers[1].data(), local_seq());
    kv_gradient_contribution[0] = allocate_slots(backward_buffers, DType::f32);
    kv_gradient_contribution[1] = allocate_slots(backward_buffers, DType::f32);
    kv_gradient_received = allocate_slots(backward_buffers, DType::f32);
    if (own_gradient_stays) own_kv_gradient = allocate_slots(backward_buffers, DType::f32);
  }

  int64_t local_seq() const { return sequence_layout.local_length(); }

  // Calls `visit(shard_offset, slot, slot_offset, length)` for every piece of this rank's slots.
  template <typename Visit>
  void for_each_own_piece(Visit&& visit) const {
    for (int slot = 0; slot < slots; ++slot)
      for (const SlotPiece& piece : slot_cut.slot_pieces(sequence_layout, rank, slot))
        if (piece.length > 0) visit(piece.shard_offset, slot, piece.slot_offset, piece.length);
  }

  // Where each own slot lies in the shard as one run of tokens in slot order (its first token's
  // shard offset), or nothing: its pieces apart (zigzag's two chunks cut into several slots) or
  // not filling it.
  std::vector<std::optional<int64_t>> slot_runs_in_shard() const {
    std::vector<int64_t> first(static_cast<std::size_t>(slots), -1), covered(static_cast<std::size_t>(slots), 0);
    std::vector<bool> in_order(static_cast<std::size_t>(slots), true);
    for_each_own_piece([&](int64_t shard_offset, int slot, int64_t slot_offset, int64_t length) {
      const auto index = static_cast<std::size_t>(slot);
      if (first[index] < 0) first[index] = shard_offset - slot_offset;
      in_order[index] = in_order[index] && shard_offset - slot_offset == first[index];
      covered[index] += length;
    });
    std::vector<std::optional<int64_t>> runs(static_cast<std::size_t>(slots));
    for (int slot = 0; slot < slots; ++slot) {
      const auto index = static_cast<std::size_t>(slot);
      if (first[index] >= 0 && in_order[index] && covered[index] == slot_cut.slot_length(slot))
        runs[index] = first[index];
    }
    return runs;
  }

  // This rank's keys and values as its slots: a slot that is one run of the shard is a view of k
  // and v where that view is laid out as a slot buffer (batch 1: contiguous) and 16-byte aligned,
  // so that nothing is copied; the others are copied into `buffer`'s slots.
  SlotSet own_slots(const TensorView& k, const TensorView& v, const SlotSet& buffer) {
    // What the GPU kernels ask of a tensor's start: the own Hopper kernels' tensor memory
    // accelerator and cuDNN take 16-byte aligned ones.
    constexpr uintptr_t kKernelAlignment = 16;
    const auto like_a_buffer = [](const TensorView& view) {
      return view.is_contiguous() && reinterpret_cast<uintptr_t>(view.data) % kKernelAlignment == 0;
    };
    SlotSet own = buffer;
    for (int slot = 0; slot < slots; ++slot) {
      const std::optional<int64_t>& run = own_slot_runs[static_cast<std::size_t>(slot)];
      if (!run) continue;
      const KvTensors view{k.slice(1, *run, slot_cut.slot_length(slot)), v.slice(1, *run, slot_cut.slot_length(slot))};
      if (like_a_buffer(view.k) && like_a_buffer(view.v)) own[static_cast<std::size_t>(slot)] = view;
    }
    for_each_own_piece([&](int64_t shard_offset, int slot, int64_t slot_offset, int64_t length) {
      if (own[slot].k.data != buffer[slot].k.data) return;  // a view of k and v: nothing to copy
      kernels->copy(k.slice(1, shard_offset, length), own[slot].k.slice(1, slot_offset, length));
      kernels->copy(v.slice(1, shard_offset, length), own[slot].v.slice(1, slot_offset, length));
    });
    return own;
  }

  // Puts the slots' gradients back in shard order, converting to the caller's dtype.
  void return_own_slots(const SlotSet& gradient, TensorView dk, TensorView dv) {
    for_each_own_piece([&](int64_t shard_offset, int slot, int64_t slot_offset, int64_t length) {
      kernels->copy(gradient[slot].k.slice(1, slot_offset, length), dk.slice(1, shard_offset, length));
      kernels->copy(gradient[slot].v.slice(1, slot_offset, length), dv.slice(1, shard_offset, length));
    });
  }

  void copy_slots(const SlotSet& source, const SlotSet& destination) {
    for (std::size_t slot = 0; slot < source.size(); ++slot) {
      kernels->copy(source[slot].k, destination[slot].k);
      kernels->copy(source[slot].v, destination[slot].v);
    }
  }

  // destination += source, slot by slot.
  void add_slots(const SlotSet& source, const SlotSet& destination) {
    for (std::size_t slot = 0; slot < source.size(); ++slot) {
      kernels->add(source[slot].k, destination[slot].k);
      kernels->add(source[slot].v, destination[slot].v);
    }
  }

  void fill_slots(const SlotSet& set, float value) {
    for (const KvTensors& slot : set) {
      kernels->fill(slot.k, value);
      kernels->fill(slot.v, value);
    }
  }

  // Sends every slot of `outgoing` one hop along its cycle while receiving each slot from its
  // predecessor into `incoming`: one batch, deadlock-free at any rank count.
  std::unique_ptr<PendingTransfer> start_rotation(const SlotSet& outgoing, const SlotSet& incoming,
                                                  ProfileRecorder& recorder, int step) {
    rotation_batch.sends.clear();
    rotation_batch.receives.clear();
    for (int slot = 0; slot < slots; ++slot) {
      const std::size_t bytes = static_cast<std::size_t>(outgoing[slot].k.numel()) * dtype_size(outgoing[slot].k.dtype);
      const int successor = schedule.successor(slot, rank);
      const int predecessor = schedule.predecessor(slot, rank);
      rotation_batch.sends.push_back({outgoing[slot].k.data, bytes, successor});
      rotation_batch.sends.push_back({outgoing[slot].v.data, bytes, successor});
      rotation_batch.receives.push_back({incoming[slot].k.data, bytes, predecessor});
      rotation_batch.receives.push_back({incoming[slot].v.data, bytes, predecessor});
      recorder.sent(step, 2.0 * static_cast<double>(bytes), 2);
    }
    return world.start(rotation_batch);
  }

  // Where each query chunk's blocks start and end in the order of the steps (see forward()), and
  // the rows that no block sees: whole chunks, and the padding that ends a document's chunk.
  void find_first_and_last_blocks() {
    for (int step = 0; step < ranks; ++step)
      for (const RotationStepBlock& block : blocks_of_step[static_cast<std::size_t>(step)]) {
        const BlockPosition position{step, &block};
        auto [found, inserted] = chunk_blocks.try_emplace(block.queries.local_offset, ChunkBlocks{position, position});
        if (!inserted) found->second.last = position;
      }
    for (const SequenceChunk& chunk : sequence_layout.chunks(rank)) {
      const auto found = chunk_blocks.find(chunk.local_offset);
      const int64_t seen = found == chunk_blocks.end() ? 0 : found->second.first.block->queries.length;
      if (seen < chunk.length) {
        const int64_t position = sequence_layout.mask_position(chunk.position, rank) + seen;
        rows_without_blocks.push_back({position, chunk.length - seen, chunk.local_offset + seen});
      }
    }
  }

  // Calls `launch(first, end)` for each run [first, end) of `blocks` that one kernel call takes:
  // consecutive blocks that fuse (fuses_with) and for which `same_call(a, b)` holds.
  template <typename SameCall, typename Launch>
  void for_each_fused_run(const std::vector<RotationStepBlock>& blocks, SameCall same_call, Launch launch) const {
    for (std::size_t first = 0, end = 0; first < blocks.size(); first = end) {
      end = first + 1;
      while (end < blocks.size() && fuses_with(blocks[end - 1], blocks[end], mask) &&
             same_call(blocks[first], blocks[end]))
        ++end;
      launch(first, end);
    }
  }

  // The query rows of `blocks` [first, end) in the shard (one run: they follow each other), and the
  // mask their call takes: a fused run is wholly visible and needs none (see fuses_with).
  struct RunRows {
    int64_t offset;
    int64_t length;
    int64_t position;
    AttentionMask mask;
  };
  RunRows run_rows(const std::vector<RotationStepBlock>& blocks, std::size_t first, std::size_t end) const {
    const SequenceChunk& head = blocks[first].queries;
    const SequenceChunk& tail = blocks[end - 1].queries;
    return {head.local_offset, tail.local_offset + tail.length - head.local_offset, head.position,
            end - first > 1 ? AttentionMask{} : mask};
  }

  // What a forward block does with its rows' running result: add to it (not the chunk's first
  // block) and round it into out (the chunk's last).
  struct ForwardRole {
    bool accumulate;
    bool final;
    bool operator==(const ForwardRole& other) const { return accumulate == other.accumulate && final == other.final; }
  };
  ForwardRole forward_role(int step, const RotationStepBlock& block) const {
    const ChunkBlocks& chunk = chunk_blocks.at(block.queries.local_offset);
    return {!(chunk.first == BlockPosition{step, &block}), chunk.last == BlockPosition{step, &block}};
  }

  // The blocks of one forward step: each query chunk against every held piece it sees, merged
  // into the running result of its rows (the first block of a chunk writes it, the last rounds
  // it into out); chunks whose blocks fuse go in one call.
  void forward_step(const TensorView& q, const SlotSet& held, int step, const TensorView& out, const TensorView& lse) {
    const std::vector<RotationStepBlock>& blocks = blocks_of_step[static_cast<std::size_t>(step)];
    const auto same_role = [&](const RotationStepBlock& a, const RotationStepBlock& b) {
      return forward_role(step, a) == forward_role(step, b);
    };
    for_each_fused_run(blocks, same_role, [&](std::size_t first, std::size_t end) {
      const RunRows rows = run_rows(blocks, first, end);
      const ForwardRole role = forward_role(step, blocks[first]);
      forward_block.segments.clear();
      for (const SlotPiece& piece : blocks[first].keys) {
        const KvTensors& slot = held[static_cast<std::size_t>(piece.slot)];
        forward_block.segments.push_back({slot.k.slice(1, piece.slot_offset, piece.length),
                                          slot.v.slice(1, piece.slot_offset, piece.length), piece.position});
      }
      forward_block.q = q.slice(1, rows.offset, rows.length);
      forward_block.q_position = rows.position;
      forward_block.mask = rows.mask;
      forward_block.scale = scale;
      forward_block.out = running_out.slice(1, rows.offset, rows.length);
      forward_block.lse = lse.slice(2, rows.offset, rows.length);
      forward_block.accumulate = role.accumulate;
      forward_block.final_out = role.final ? out.slice(1, rows.offset, rows.length) : TensorView{};
      kernels->forward(forward_block);
    });
  }

  // Backward `blocks` (of one step, or a part of step 0's), accumulating into dq and into
  // `gradient` (the gradient of the held slots from this rank's queries); chunks whose blocks
  // fuse go in one call.
  void backward_blocks(const TensorView& q, const TensorView& out, const TensorView& dout, const TensorView& lse,
                       const std::vector<RotationStepBlock>& blocks, const SlotSet& held, const SlotSet& gradient) {
    const auto any = [](const RotationStepBlock&, const RotationStepBlock&) { return true; };
    for_each_fused_run(blocks, any, [&](std::size_t first, std::size_t end) {
      const RunRows rows = run_rows(blocks, first, end);
      backward_block.segments.clear();
      for (const SlotPiece& piece : blocks[first].keys) {
        const KvTensors& slot = held[static_cast<std::size_t>(piece.slot)];
        const KvTensors& slot_gradient = gradient[static_cast<std::size_t>(piece.slot)];
        backward_block.segments.push_back({{slot.k.slice(1, piece.slot_offset, piece.length),
                                            slot.v.slice(1, piece.slot_offset, piece.length), piece.position},
                                           slot_gradient.k.slice(1, piece.slot_offset, piece.length),
                                           slot_gradient.v.slice(1, piece.slot_offset, piece.length)});
      }
      backward_block.q = q.slice(1, rows.offset, rows.length);
      backward_block.q_position = rows.position;
      backward_block.dout = dout.slice(1, rows.offset, rows.length);
      backward_block.out = out.slice(1, rows.offset, rows.length);
      backward_block.lse = lse.slice(2, rows.offset, rows.length);
      backward_block.delta = delta.slice(2, rows.offset, rows.length);
      backward_block.mask = rows.mask;
      backward_block.scale = scale;
      backward_block.dq = dq_accumulator.slice(1, rows.offset, rows.length);
      kernels->backward(backward_block);
    });
  }

  const CycleSchedule schedule;
  const int rank;
  const int ranks;
  const int slots;
  const SlotCut slot_cut;
  std::vector<std::vector<RotationStepBlock>> blocks_of_step;  // this rank's blocks, per step
  OwnBlockSplit own_blocks;                                    // step 0's blocks as the backward runs them
  const bool own_gradient_stays;                               // keeps_own_gradient
  const std::vector<std::optional<int64_t>> own_slot_runs;     // slot_runs_in_shard
  struct BlockPosition {
    int step;
    const RotationStepBlock* block;
    bool operator==(const BlockPosition& other) const { return step == other.step && block == other.block; }
  };
  struct ChunkBlocks {
    BlockPosition first;
    BlockPosition last;
  };
  std::map<int64_t, ChunkBlocks> chunk_blocks;  // by the query chunk's local offset
  std::vector<SequenceChunk> rows_without_blocks;

  std::vector<DeviceBuffer> kv_buffers;
  SlotSet rotating_kv[2];
  std::vector<DeviceBuffer> forward_buffers;
  TensorView running_out;  // (B, S_local, H, D) fp32; the running lse is the caller's lse
  std::vector<DeviceBuffer> backward_buffers;
  TensorView dq_accumulator;  // (B, S_local, H, D) fp32
  TensorView delta;           // (B, H, S_local) fp32
  SlotSet kv_gradient_contribution[2];
  SlotSet kv_gradient_received;
  SlotSet own_kv_gradient;  // where it stays: the gradient of this rank's slots, complete after the last hop
  // Reused across steps so that their lists keep their capacity.
  TransferBatch rotation_batch;
  ForwardBlock forward_block;
  BackwardBlock backward_block;
};

namespace {

// Validates the plan's arguments and agrees on them with every rank before building anything.
// `given_documents`: how the ranks hold the call's packed documents when the caller laid them
// out (USP's groups); otherwise the rotation's own per-document layout.
std::unique_ptr<Strategy> agree_and_make_rotation_strategy(Communicator& communicator, const RotationKind& kind,
                                                        const AttentionShape& shape, const AttentionOptions& options,
                                                        const std::string& caller_error,
                                                        const std::optional<DocumentLayout>& given_documents) {
  const int ranks = communicator.size();
  std::vector<CallField> signature = rotation_signature(kind, shape, options);
  const bool packed = !options.document_lengths.empty();
  StrategyOptions strategy;
  strategy.nodes = kind.nodes;
  const std::string layout_error =
      !packed          ? rotation_error(kind.algorithm, shape.seq, ranks, options.causal, kind.nodes)
      : given_documents ? padded_length_error(shape.seq, *given_documents)
                        : documents_error(kind.algorithm, shape.seq, ranks, strategy, options);
  agree_on_call(communicator,
                first_error({caller_error, shape_and_options_error(shape, options, communicator.device()),
                             mask_unsupported(kind.algorithm, options), layout_error}),
                signature);
  if (!packed) {
    SequenceLayout layout(rotation_form(kind.algorithm, ranks, options.causal, kind.nodes).layout, shape.seq, ranks);
    return std::make_unique<RotationStrategy>(communicator, kind, std::move(signature), std::move(layout),
                                              std::nullopt, shape, options);
  }
  const DocumentLayout documents =
      given_documents ? *given_documents : strategy_document_layout(kind.algorithm, ranks, strategy, options);
  SequenceLayout layout = documents.sequence_layout();
  return std::make_unique<RotationStrategy>(communicator, kind, std::move(signature), std::move(layout),
                                            documents, shape, options);
}

}  // namespace

std::unique_ptr<Strategy> make_rotation_strategy(Algorithm algorithm, Communicator& communicator,
                                                 const AttentionShape& shape, const AttentionOptions& options,
                                                 const std::string& caller_error) {
  SPATTN_CHECK(is_single_level_rotation(algorithm) || algorithm == Algorithm::stripe,
               "'" << algorithm_name(algorithm)
                   << "' is not a single-level rotation; allowed: ring, zigzag, stripe, hamilton");
  return agree_and_make_rotation_strategy(communicator, RotationKind{algorithm, 1}, shape, options, caller_error,
                                          std::nullopt);
}

std::unique_ptr<Strategy> make_rotation_strategy_over(Algorithm algorithm, Communicator& communicator,
                                                      const AttentionShape& shape, const AttentionOptions& options,
                                                      const DocumentLayout& documents) {
  SPATTN_CHECK(is_single_level_rotation(algorithm),
               "'" << algorithm_name(algorithm) << "' is not a single-level rotation; allowed: ring, zigzag, hamilton");
  SPATTN_CHECK(documents.ranks() == communicator.size(),
               "documents laid out over " << documents.ranks() << " ranks for a rotation over " << communicator.size());
  return agree_and_make_rotation_strategy(communicator, RotationKind{algorithm, 1}, shape, options, "", documents);
}

std::unique_ptr<Strategy> make_two_level_hamilton_strategy(Communicator& communicator, int nodes,
                                                           const AttentionShape& shape, const AttentionOptions& options,
                                                           const std::string& caller_error) {
  return agree_and_make_rotation_strategy(communicator, RotationKind{Algorithm::hamilton2, nodes}, shape, options,
                                          caller_error, std::nullopt);
}

}  // namespace spattn
