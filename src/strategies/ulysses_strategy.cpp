// Ulysses attention: an all-to-all turns sequence shards into head shards (rank r gets the whole
// sequence of query heads [r H/N, (r+1) H/N) and of the kv heads they read), attention runs
// locally over the whole sequence, and an all-to-all turns the results back into sequence shards.
// Backward moves its inputs the same way and sends the gradients back, summing the gradients of
// kv heads that several ranks read. Plain Ulysses cuts the head shards into stages
// (schedule/ulysses_stages.hpp) whose all-to-alls run while the other stages attend. At batch 1
// the gathered head shards (q, k, v, dout; the final out, dq, dk, dv) are where the all-to-alls
// land or start (AllToAllExchange::place): only the sequence shards' heads are packed and unpacked.
//
// USP (usp_strategy.cpp) is the same code inside groups of N1 consecutive ranks, with a rotation
// across the groups attending the head shards instead of the local block kernels.

#include "strategies/ulysses_strategy.hpp"

#include <algorithm>
#include <initializer_list>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "kernels/block_kernels.hpp"
#include "schedule/document_cut.hpp"
#include "schedule/strategy_rules.hpp"
#include "schedule/ulysses_stages.hpp"
#include "spattn/distributed_attention.hpp"
#include "strategies/all_to_all_exchange.hpp"
#include "strategies/call_validation.hpp"
#include "strategies/device_buffer.hpp"
#include "strategies/profile_recorder.hpp"
#include "strategies/strategy_base.hpp"

namespace spattn {

namespace {

// Profile steps: 0 moves the inputs to head shards, 1 attends, 2 moves the results back.
constexpr int kToHeadsStep = 0;
constexpr int kAttentionStep = 1;
constexpr int kToSequenceStep = 2;
constexpr int kSteps = 3;

// Which dimension of a tensor is the sequence and which the heads.
struct Axes {
  int seq;
  int head;
};
constexpr Axes kBshd{1, 2};  // q, k, v, out, dout and their gradients: (B, S, H, D)
constexpr Axes kBhs{2, 1};   // lse and delta: (B, H, S)

// Heads [first, first + count).
struct HeadRange {
  int64_t first = 0;
  int64_t count = 0;
};

// The kv heads that query heads `query_heads` read when every `group_size` consecutive query
// heads share one kv head.
HeadRange kv_heads_read(const HeadRange& query_heads, int64_t group_size) {
  const int64_t first = query_heads.first / group_size;
  const int64_t last = (query_heads.first + query_heads.count - 1) / group_size;
  return {first, last - first + 1};
}

// Query heads that the block kernel can attend in one call over kv heads, in a rank's local
// head indices: the kernel lets query head i of a block read kv head i / (q_count / kv_count),
// which matches the global grouping only for whole groups or for part of one group.
struct HeadGroup {
  HeadRange query;
  HeadRange kv;
};

// The local query heads `query_heads` (global indices) cut into HeadGroups: the whole groups
// together, and a partial group at either end on its own (at most three).
std::vector<HeadGroup> head_groups(const HeadRange& query_heads, int64_t group_size) {
  const int64_t end = query_heads.first + query_heads.count;
  const int64_t first_kv = query_heads.first / group_size;
  std::vector<HeadGroup> groups;
  for (int64_t head = query_heads.first; head < end;) {
    const int64_t kv = head / group_size;
    const int64_t whole_groups = head % group_size == 0 ? (end - head) / group_size : 0;
    const int64_t query_count = whole_groups > 0 ? whole_groups * group_size : std::min(end, (kv + 1) * group_size) - head;
    const int64_t kv_count = std::max<int64_t>(whole_groups, 1);
    groups.push_back({{head - query_heads.first, query_count}, {kv - first_kv, kv_count}});
    head += query_count;
  }
  return groups;
}

// Whether data arriving for a place overwrites it or is added to it.
enum class Arrival { overwrite, sum };

// The pieces of an all-to-all that a pack or unpack handles: those that go to or come from the
// other ranks, or this rank's own, which never travels. The own piece is packed after the
// transfer has started and unpacked before it has ended, so that its copies run during the
// transfer rather than before or after it (at 2 ranks half of every pack and unpack).
enum class Pieces { travelling, own };

}  // namespace

class UlyssesStrategy final : public StrategyBase {
 public:
  // The arguments are validated and agreed on by every rank of `every_rank` (see the factories);
  // `signature` is what every later call agrees on.
  UlyssesStrategy(Communicator& every_rank, AcrossGroups wiring, SequenceLayout layout,
                  const std::optional<DocumentLayout>& documents, std::vector<CallField> signature,
                  const AttentionShape& call_shape, const AttentionOptions& call_options)
      : StrategyBase(every_rank, std::move(signature), std::move(layout), call_shape, call_options),
        across(std::move(wiring)),
        comm(across.group ? *across.group : every_rank),
        rank(comm.rank()),
        ranks(comm.size()),
        local_seq(sequence_layout.local_length()),
        group_seq(local_seq * ranks),
        heads_per_rank(call_shape.heads / ranks),
        group_size(call_shape.heads / call_shape.kv_heads),
        // An inner strategy reads and writes the call's dtype; the block kernels accumulate in
        // fp32, rounded once on the way back.
        result_dtype(across.inner ? call_shape.dtype : DType::f32) {
    // An inner strategy's plan is for the whole head shard, which it attends in one stage.
    const int stage_count = across.inner ? 1 : ulysses_stages(heads_per_rank, group_size, ranks);
    const int64_t stage_heads = heads_per_rank / stage_count;
    stages = std::vector<HeadStage>(static_cast<std::size_t>(stage_count));
    for (int index = 0; index < stage_count; ++index) {
      HeadStage& stage = stages[static_cast<std::size_t>(index)];
      for (int peer = 0; peer < ranks; ++peer) {
        stage.query_heads_of.push_back({peer * heads_per_rank + index * stage_heads, stage_heads});
        stage.kv_heads_of.push_back(kv_heads_read(stage.query_heads_of.back(), group_size));
        stage.kv_heads_per_block = std::max(stage.kv_heads_per_block, stage.kv_heads_of.back().count);
      }
      stage.own_kv_heads = stage.kv_heads_of[static_cast<std::size_t>(rank)].count;
      stage.groups = head_groups(stage.query_heads_of[static_cast<std::size_t>(rank)], group_size);
      describe_exchanges(stage);
    }
    // The local attention's blocks over the gathered sequence (rank p's tokens at p * S_local):
    // without documents one block of the whole sequence, which is in order; with them every part
    // of a document (one per rank) against every part of it.
    const std::vector<SequenceChunk> parts =
        documents ? gathered_parts() : std::vector<SequenceChunk>{{0, group_seq, 0}};
    pairing = pair_chunks(parts, parts, mask, documents ? &*documents : nullptr);
  }

  void set_stream(void* stream) override {
    StrategyBase::set_stream(stream);
    if (across.inner) across.inner->set_stream(stream);
  }

  void forward(const TensorView& q, const TensorView& k, const TensorView& v, TensorView out, TensorView lse,
               Profile* profile) override {
    // Agreement spans every rank of the call (world), not only the group: a group that refused
    // alone would leave the other groups waiting in the inner strategy.
    begin_forward(comm, q, k, v, out, lse);
    ensure_forward_workspace();
    ProfileRecorder recorder(profile, kSteps, *kernels, "forward");
    pass_over_stages(
        recorder, profile, &HeadStage::forward_inputs, &HeadStage::forward_results,
        [&](HeadStage& stage, Pieces pieces) { pack_inputs(stage, stage.forward_inputs, q, k, v, pieces); },
        [&](HeadStage& stage, Pieces pieces) { unpack_inputs(stage, stage.forward_inputs, pieces); },
        [&](HeadStage& stage, Profile* inner_profile) {
          if (across.inner)
            across.inner->forward(stage.full_q, stage.full_k, stage.full_v, stage.full_out, stage.full_lse,
                                  inner_profile);
          else
            attend_locally_forward(stage);
        },
        [&](HeadStage& stage, Pieces pieces) {
          pack_sequence_shards(out_to_send(stage), kBshd, stage.forward_results, kOutPart, pieces);
          pack_sequence_shards(stage.full_lse, kBhs, stage.forward_results, kLsePart, pieces);
        },
        [&](HeadStage& stage, Pieces pieces) {
          unpack_head_shards(stage.forward_results, kOutPart, kBshd, stage.query_heads_of, out, Arrival::overwrite,
                             pieces);
          unpack_head_shards(stage.forward_results, kLsePart, kBhs, stage.query_heads_of, lse, Arrival::overwrite,
                             pieces);
        });
    recorder.finish();
  }

  void backward(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& out,
                const TensorView& lse, const TensorView& dout, TensorView dq, TensorView dk, TensorView dv,
                Profile* profile) override {
    begin_backward(comm, q, k, v, out, lse, dout, dq, dk, dv);
    ensure_backward_workspace();
    ProfileRecorder recorder(profile, kSteps, *kernels, "backward");
    bool sums_zeroed = false;
    pass_over_stages(
        recorder, profile, &HeadStage::backward_inputs, &HeadStage::gradients,
        [&](HeadStage& stage, Pieces pieces) {
          AllToAllExchange& blocks = stage.backward_inputs;
          pack_inputs(stage, blocks, q, k, v, pieces);
          pack_head_shards(dout, kBshd, stage.query_heads_of, blocks, kDoutPart, pieces);
          pack_head_shards(lse, kBhs, stage.query_heads_of, blocks, kLseInPart, pieces);
          if (output_travels())
            pack_head_shards(out, kBshd, stage.query_heads_of, blocks, kOutputPart, pieces);
          else
            pack_delta(stage, out, dout, pieces);
        },
        [&](HeadStage& stage, Pieces pieces) {
          const AllToAllExchange& blocks = stage.backward_inputs;
          unpack_inputs(stage, blocks, pieces);
          unpack_sequence_shards(blocks, kDoutPart, kBshd, stage.full_dout, pieces);
          unpack_sequence_shards(blocks, kLseInPart, kBhs, stage.full_lse, pieces);
          if (output_travels())
            unpack_sequence_shards(blocks, kOutputPart, kBshd, stage.full_out, pieces);
          else
            unpack_sequence_shards(blocks, kOutputPart, kBhs, stage.full_delta, pieces);
        },
        [&](HeadStage& stage, Profile* inner_profile) {
          if (across.inner)
            across.inner->backward(stage.full_q, stage.full_k, stage.full_v, stage.full_out, stage.full_lse,
                                   stage.full_dout, stage.full_dq, stage.full_dk, stage.full_dv, inner_profile);
          else
            attend_locally_backward(stage);
        },
        [&](HeadStage& stage, Pieces pieces) {
          pack_sequence_shards(stage.full_dq, kBshd, stage.gradients, kDqPart, pieces);
          pack_sequence_shards(stage.full_dk, kBshd, stage.gradients, kDkPart, pieces);
          pack_sequence_shards(stage.full_dv, kBshd, stage.gradients, kDvPart, pieces);
        },
        [&](HeadStage& stage, Pieces pieces) {
          // Zeroed at the first unpack, once every stage's inputs have left, so that the first ones
          // leave sooner.
          if (!sums_zeroed) {
            kernels->fill(dk_sum, 0.0f);
            kernels->fill(dv_sum, 0.0f);
            sums_zeroed = true;
          }
          unpack_head_shards(stage.gradients, kDqPart, kBshd, stage.query_heads_of, dq, Arrival::overwrite, pieces);
          unpack_head_shards(stage.gradients, kDkPart, kBshd, stage.kv_heads_of, dk_sum, Arrival::sum, pieces);
          unpack_head_shards(stage.gradients, kDvPart, kBshd, stage.kv_heads_of, dv_sum, Arrival::sum, pieces);
        });
    recorder.compute(kToSequenceStep, [&] {
      kernels->copy(dk_sum, dk);
      kernels->copy(dv_sum, dv);
    });
    recorder.finish();
  }

 private:
  // Parts of the all-to-all blocks, in the order describe_exchanges adds them. Inputs to head
  // shards: the block for peer p holds this rank's tokens of p's query heads of the stage and of
  // the kv heads they read (forward: q, k, v; backward also dout, lse and the forward output).
  // Results back to sequence shards: the block for peer p holds p's tokens of this rank's heads of
  // the stage (forward: out, lse; backward: dq, dk, dv).
  //
  // The forward output that backward moves is delta = rowsum(dout * out) for block kernels that
  // read only delta, computed where out is so that out itself never travels, and out for an inner
  // strategy or kernels that read out (see output_travels).
  enum InputPart { kQPart, kKPart, kVPart, kDoutPart, kLseInPart, kOutputPart };
  enum ForwardResultPart { kOutPart, kLsePart };
  enum GradientPart { kDqPart, kDkPart, kDvPart };

  // A slice of every rank's query heads and the kv heads they read (schedule/ulysses_stages.hpp):
  // all-to-alls, and this rank's head shard of it over the gathered sequence. The tensors are the
  // stage's own so that, at batch 1, each peer's sequence chunk of them is contiguous and the
  // all-to-alls can land in or start from them.
  struct HeadStage {
    std::vector<HeadRange> query_heads_of;  // per rank, global query heads of this stage
    std::vector<HeadRange> kv_heads_of;     // per rank, global kv heads they read
    int64_t kv_heads_per_block = 0;         // the most kv heads any rank reads in this stage
    int64_t own_kv_heads = 0;               // kv heads this rank reads in this stage
    std::vector<HeadGroup> groups;          // this rank's query heads of the stage as kernel calls

    AllToAllExchange forward_inputs;   // q, k, v
    AllToAllExchange forward_results;  // out, lse
    AllToAllExchange backward_inputs;  // q, k, v, dout, lse, and delta or out (see output_travels)
    AllToAllExchange gradients;        // dq, dk, dv in result_dtype

    // Hs: the stage's query heads per rank, HKs: own_kv_heads.
    TensorView full_q;          // (B, group_seq, Hs, D)
    TensorView full_k;          // (B, group_seq, HKs, D)
    TensorView full_v;          // (B, group_seq, HKs, D)
    TensorView full_lse;        // (B, Hs, group_seq) fp32: written by forward, received by backward
    TensorView full_final_out;  // (B, group_seq, Hs, D) the call's dtype, block kernels: their final out
    TensorView full_out;        // (B, group_seq, Hs, D) result_dtype: written by forward, received by backward when
                                // output_travels()
    TensorView full_dout;       // (B, group_seq, Hs, D)
    TensorView full_delta;      // (B, Hs, group_seq) fp32, block kernels that read only delta
    TensorView full_dq;         // (B, group_seq, Hs, D) result_dtype
    TensorView full_dk;         // (B, group_seq, HKs, D) result_dtype
    TensorView full_dv;         // (B, group_seq, HKs, D) result_dtype

    int64_t heads() const { return query_heads_of.front().count; }
  };

  // Every block carries room for the stage's kv_heads_per_block kv heads, the most any rank reads,
  // because an all-to-all needs blocks of one size; a rank that reads fewer leaves the rest
  // unused. A kv head read by query heads of several ranks goes into the block of each of them.
  void describe_exchanges(HeadStage& stage) {
    const int64_t B = shape.batch, D = shape.head_dim, heads = stage.heads(), kv_heads = stage.kv_heads_per_block;
    for (AllToAllExchange* inputs : {&stage.forward_inputs, &stage.backward_inputs}) {
      inputs->add_part(shape.dtype, {B, local_seq, heads, D});     // q
      inputs->add_part(shape.dtype, {B, local_seq, kv_heads, D});  // k
      inputs->add_part(shape.dtype, {B, local_seq, kv_heads, D});  // v
    }
    stage.backward_inputs.add_part(shape.dtype, {B, local_seq, heads, D});  // dout
    stage.backward_inputs.add_part(DType::f32, {B, heads, local_seq});      // lse
    if (output_travels())
      stage.backward_inputs.add_part(shape.dtype, {B, local_seq, heads, D});  // out
    else
      stage.backward_inputs.add_part(DType::f32, {B, heads, local_seq});    // delta
    stage.forward_results.add_part(shape.dtype, {B, local_seq, heads, D});  // out
    stage.forward_results.add_part(DType::f32, {B, heads, local_seq});      // lse
    // The block kernels' gradients travel in fp32 so that a kv head's contributions from several
    // ranks are summed before the one rounding to the input dtype.
    stage.gradients.add_part(result_dtype, {B, local_seq, heads, D});     // dq
    stage.gradients.add_part(result_dtype, {B, local_seq, kv_heads, D});  // dk
    stage.gradients.add_part(result_dtype, {B, local_seq, kv_heads, D});  // dv
  }

  // Whether backward moves the forward output itself: an inner strategy's backward takes out, and
  // so do kernels whose backward recomputes delta from it (cuDNN).
  bool output_travels() const { return across.inner || kernels->backward_reads_output(); }

  // A new workspace tensor owned by `owner`.
  TensorView allocate(std::vector<DeviceBuffer>& owner, DType dtype, std::initializer_list<int64_t> dims) {
    TensorView tensor = TensorView::contiguous(nullptr, dtype, dims, kernels->device());
    owner.emplace_back(*kernels, static_cast<std::size_t>(tensor.numel()) * dtype_size(dtype));
    tensor.data = owner.back().data();
    return tensor;
  }

  // Workspace, allocated at the first call that needs it and reused by every later call.
  void ensure_head_shards() {
    if (!head_shard_buffers.empty()) return;
    const int64_t B = shape.batch, D = shape.head_dim;
    for (HeadStage& stage : stages) {
      stage.full_q = allocate(head_shard_buffers, shape.dtype, {B, group_seq, stage.heads(), D});
      stage.full_k = allocate(head_shard_buffers, shape.dtype, {B, group_seq, stage.own_kv_heads, D});
      stage.full_v = allocate(head_shard_buffers, shape.dtype, {B, group_seq, stage.own_kv_heads, D});
      stage.full_lse = allocate(head_shard_buffers, DType::f32, {B, stage.heads(), group_seq});
    }
  }
  void ensure_full_out() {
    if (!out_buffers.empty()) return;
    for (HeadStage& stage : stages)
      stage.full_out = allocate(out_buffers, result_dtype, {shape.batch, group_seq, stage.heads(), shape.head_dim});
  }
  void ensure_forward_workspace() {
    ensure_head_shards();
    ensure_full_out();
    if (forward_exchanges_ready) return;
    forward_exchanges_ready = true;
    for (HeadStage& stage : stages) {
      // The block kernels write the final out in the call's dtype, the part that travels.
      if (!across.inner)
        stage.full_final_out =
            allocate(forward_buffers, shape.dtype, {shape.batch, group_seq, stage.heads(), shape.head_dim});
      stage.forward_inputs.allocate(*kernels, comm);
      stage.forward_results.allocate(*kernels, comm);
      place_inputs(stage, stage.forward_inputs);
      stage.forward_results.place(kOutPart, out_to_send(stage), Side::send);
    }
  }
  void ensure_backward_workspace() {
    ensure_head_shards();
    if (!backward_buffers.empty()) return;
    const int64_t B = shape.batch, D = shape.head_dim;
    if (output_travels()) ensure_full_out();
    dk_sum = allocate(backward_buffers, DType::f32, {B, local_seq, shape.kv_heads, D});
    dv_sum = allocate(backward_buffers, DType::f32, {B, local_seq, shape.kv_heads, D});
    for (HeadStage& stage : stages) {
      const int64_t heads = stage.heads(), kv_heads = stage.own_kv_heads;
      if (!output_travels()) stage.full_delta = allocate(backward_buffers, DType::f32, {B, heads, group_seq});
      stage.full_dout = allocate(backward_buffers, shape.dtype, {B, group_seq, heads, D});
      stage.full_dq = allocate(backward_buffers, result_dtype, {B, group_seq, heads, D});
      stage.full_dk = allocate(backward_buffers, result_dtype, {B, group_seq, kv_heads, D});
      stage.full_dv = allocate(backward_buffers, result_dtype, {B, group_seq, kv_heads, D});
      stage.backward_inputs.allocate(*kernels, comm);
      stage.gradients.allocate(*kernels, comm);
      place_inputs(stage, stage.backward_inputs);
      stage.backward_inputs.place(kDoutPart, stage.full_dout, Side::receive);
      if (output_travels()) stage.backward_inputs.place(kOutputPart, stage.full_out, Side::receive);
      stage.gradients.place(kDqPart, stage.full_dq, Side::send);
      stage.gradients.place(kDkPart, stage.full_dk, Side::send);
      stage.gradients.place(kDvPart, stage.full_dv, Side::send);
    }
  }

  // The parts that can be the sequence chunks of a gathered head shard (batch 1, and the part's
  // dtype and heads: out and dk, dv of the block kernels are fp32 here, and a rank that reads fewer
  // kv heads than the block holds keeps them apart) travel from or land in it, and nothing packs or
  // unpacks them.
  using Side = AllToAllExchange::Side;
  static void place_inputs(const HeadStage& stage, AllToAllExchange& inputs) {
    inputs.place(kQPart, stage.full_q, Side::receive);
    inputs.place(kKPart, stage.full_k, Side::receive);
    inputs.place(kVPart, stage.full_v, Side::receive);
  }

  // The forward's out over the gathered sequence in the call's dtype: what goes back to the ranks.
  const TensorView& out_to_send(const HeadStage& stage) const {
    return across.inner ? stage.full_out : stage.full_final_out;
  }

  // Every rank's chunks with their offsets in the gathered sequence.
  std::vector<SequenceChunk> gathered_parts() const {
    std::vector<SequenceChunk> parts;
    for (int peer = 0; peer < ranks; ++peer)
      for (SequenceChunk chunk : sequence_layout.chunks(peer)) {
        chunk.local_offset += peer * local_seq;
        parts.push_back(chunk);
      }
    return parts;
  }

  // Attention of this rank's query heads of `stage` over the whole sequence with the block kernels.
  void attend_locally_forward(const HeadStage& stage) {
    for (const SequenceChunk& rows : pairing.rows_without_keys) {
      kernels->fill(stage.full_final_out.slice(kBshd.seq, rows.local_offset, rows.length), 0.0f);
      kernels->fill(stage.full_lse.slice(kBhs.seq, rows.local_offset, rows.length),
                    -std::numeric_limits<float>::infinity());
    }
    for (const HeadGroup& group : stage.groups)
      for (const ChunkBlock& block : pairing.blocks) {
        const auto queries = [&](const TensorView& tensor, Axes axes) {
          return query_rows(tensor, axes, group, block);
        };
        forward_block.q = queries(stage.full_q, kBshd);
        forward_block.q_position = block.queries.position;
        forward_block.segments.clear();
        for (const VisibleKey& key : block.keys)
          forward_block.segments.push_back(
              {kv_rows(stage.full_k, group, key.chunk), kv_rows(stage.full_v, group, key.chunk), key.chunk.position});
        forward_block.mask = mask;
        forward_block.scale = scale;
        forward_block.out = queries(stage.full_out, kBshd);
        forward_block.lse = queries(stage.full_lse, kBhs);
        forward_block.final_out = queries(stage.full_final_out, kBshd);
        kernels->forward(forward_block);
      }
  }

  // The query heads of `group` and the queries of `block` in a gathered tensor with `axes`.
  static TensorView query_rows(const TensorView& tensor, Axes axes, const HeadGroup& group,
                               const ChunkBlock& block) {
    return tensor.slice(axes.head, group.query.first, group.query.count)
        .slice(axes.seq, block.queries.local_offset, block.queries.length);
  }

  // The kv heads of `group` and the tokens of `keys` in a gathered (B, group_seq, heads, D) tensor.
  static TensorView kv_rows(const TensorView& tensor, const HeadGroup& group, const SequenceChunk& keys) {
    return tensor.slice(kBshd.head, group.kv.first, group.kv.count).slice(kBshd.seq, keys.local_offset, keys.length);
  }

  void attend_locally_backward(const HeadStage& stage) {
    kernels->fill(stage.full_dq, 0.0f);
    kernels->fill(stage.full_dk, 0.0f);
    kernels->fill(stage.full_dv, 0.0f);
    for (const HeadGroup& group : stage.groups)
      for (const ChunkBlock& block : pairing.blocks) {
        const auto queries = [&](const TensorView& tensor, Axes axes) {
          return query_rows(tensor, axes, group, block);
        };
        backward_block.q = queries(stage.full_q, kBshd);
        backward_block.q_position = block.queries.position;
        backward_block.segments.clear();
        for (const VisibleKey& key : block.keys)
          backward_block.segments.push_back(
              {{kv_rows(stage.full_k, group, key.chunk), kv_rows(stage.full_v, group, key.chunk), key.chunk.position},
               kv_rows(stage.full_dk, group, key.chunk),
               kv_rows(stage.full_dv, group, key.chunk)});
        backward_block.dout = queries(stage.full_dout, kBshd);
        backward_block.out = output_travels() ? queries(stage.full_out, kBshd) : TensorView{};
        backward_block.lse = queries(stage.full_lse, kBhs);
        backward_block.delta = output_travels() ? TensorView{} : queries(stage.full_delta, kBhs);
        backward_block.mask = mask;
        backward_block.scale = scale;
        backward_block.dq = queries(stage.full_dq, kBshd);
        kernels->backward(backward_block);
      }
  }

  // One pass over the stages: every stage's inputs packed and sent at once, then stage by stage
  // its inputs awaited and unpacked, its attention (`attend` gets the profile an inner strategy
  // fills, or null) and its results packed and sent while the next stage attends; last every
  // stage's results awaited and unpacked. `inputs` and `results` are the pass's exchanges. The
  // packs and unpacks take the travelling pieces and the own piece apart (Pieces): the own one
  // packed once the transfer has started, and its results unpacked before their transfer ends.
  template <typename PackInputs, typename UnpackInputs, typename Attend, typename PackResults, typename UnpackResults>
  void pass_over_stages(ProfileRecorder& recorder, Profile* profile, AllToAllExchange HeadStage::*inputs,
                        AllToAllExchange HeadStage::*results, PackInputs pack_inputs, UnpackInputs unpack_inputs,
                        Attend attend, PackResults pack_results, UnpackResults unpack_results) {
    std::vector<std::unique_ptr<PendingTransfer>> arriving(stages.size()), leaving(stages.size());
    for (std::size_t index = 0; index < stages.size(); ++index) {
      HeadStage& stage = stages[index];
      recorder.compute(kToHeadsStep, [&] { pack_inputs(stage, Pieces::travelling); });
      arriving[index] = start(recorder, kToHeadsStep, stage.*inputs);
    }
    recorder.compute(kToHeadsStep, [&] {
      for (HeadStage& stage : stages) {
        pack_inputs(stage, Pieces::own);
        unpack_inputs(stage, Pieces::own);
      }
    });
    for (std::size_t index = 0; index < stages.size(); ++index) {
      HeadStage& stage = stages[index];
      recorder.wait(kToHeadsStep, comm, *arriving[index]);
      recorder.compute(kToHeadsStep, [&] { unpack_inputs(stage, Pieces::travelling); });
      Profile* inner_profile = profile ? &inner_timing : nullptr;
      recorder.compute(kAttentionStep, [&] { attend(stage, inner_profile); });
      if (inner_profile) recorder.fold_nested(kAttentionStep, *inner_profile);
      recorder.compute(kToSequenceStep, [&] { pack_results(stage, Pieces::travelling); });
      leaving[index] = start(recorder, kToSequenceStep, stage.*results);
      recorder.compute(kToSequenceStep, [&] {
        pack_results(stage, Pieces::own);
        unpack_results(stage, Pieces::own);
      });
    }
    for (std::size_t index = 0; index < stages.size(); ++index) {
      recorder.wait(kToSequenceStep, comm, *leaving[index]);
      recorder.compute(kToSequenceStep, [&] { unpack_results(stages[index], Pieces::travelling); });
    }
  }

  // Starts `blocks`' all-to-all at `step`, counting what it sends.
  std::unique_ptr<PendingTransfer> start(ProfileRecorder& recorder, int step, AllToAllExchange& blocks) {
    const int peers = comm.size() - 1;
    recorder.sent(step, static_cast<double>(blocks.bytes_per_peer()) * peers, peers);
    return blocks.start(comm);
  }

  // Whether `peer`'s piece is among `pieces`.
  bool among(int peer, Pieces pieces) const { return (peer == rank) == (pieces == Pieces::own); }

  // Sequence shard -> blocks: the block for peer p gets heads `heads_of[p]` of this rank's tokens.
  void pack_head_shards(const TensorView& shard, Axes axes, const std::vector<HeadRange>& heads_of,
                        const AllToAllExchange& blocks, int part, Pieces pieces) {
    for (int peer = 0; peer < ranks; ++peer) {
      if (!among(peer, pieces)) continue;
      const HeadRange& heads = heads_of[static_cast<std::size_t>(peer)];
      kernels->copy(shard.slice(axes.head, heads.first, heads.count),
                    blocks.to_send(peer, part).slice(axes.head, 0, heads.count));
    }
  }

  // delta = rowsum(dout * out) of the stage's heads, written straight into each peer's block.
  void pack_delta(const HeadStage& stage, const TensorView& out, const TensorView& dout, Pieces pieces) {
    for (int peer = 0; peer < ranks; ++peer) {
      if (!among(peer, pieces)) continue;
      const HeadRange& heads = stage.query_heads_of[static_cast<std::size_t>(peer)];
      kernels->softmax_delta(out.slice(kBshd.head, heads.first, heads.count),
                             dout.slice(kBshd.head, heads.first, heads.count),
                             stage.backward_inputs.to_send(peer, kOutputPart));
    }
  }

  // Blocks -> head shard: block j holds rank j's tokens, which go to their place in the sequence
  // (where they landed already when the part is placed there).
  void unpack_sequence_shards(const AllToAllExchange& blocks, int part, Axes axes, TensorView full, Pieces pieces) {
    if (blocks.is_placed(part)) return;
    for (int source = 0; source < ranks; ++source)
      if (among(source, pieces))
        kernels->copy(blocks.received(source, part).slice(axes.head, 0, full.size(axes.head)),
                      full.slice(axes.seq, source * local_seq, local_seq));
  }

  // Head shard -> blocks: the block for peer p gets p's tokens of this rank's heads (which travel
  // from `full` itself when the part is placed there).
  void pack_sequence_shards(const TensorView& full, Axes axes, const AllToAllExchange& blocks, int part,
                            Pieces pieces) {
    if (blocks.is_placed(part)) return;
    for (int peer = 0; peer < ranks; ++peer)
      if (among(peer, pieces))
        kernels->copy(full.slice(axes.seq, peer * local_seq, local_seq),
                      blocks.to_send(peer, part).slice(axes.head, 0, full.size(axes.head)));
  }

  // Blocks -> sequence shard: block j holds heads `heads_of[j]` of this rank's tokens.
  void unpack_head_shards(const AllToAllExchange& blocks, int part, Axes axes, const std::vector<HeadRange>& heads_of,
                          TensorView shard, Arrival arrival, Pieces pieces) {
    for (int source = 0; source < ranks; ++source) {
      if (!among(source, pieces)) continue;
      const HeadRange& heads = heads_of[static_cast<std::size_t>(source)];
      const TensorView arrived = blocks.received(source, part).slice(axes.head, 0, heads.count);
      const TensorView place = shard.slice(axes.head, heads.first, heads.count);
      if (arrival == Arrival::sum) kernels->add(arrived, place);
      else kernels->copy(arrived, place);
    }
  }

  void pack_inputs(const HeadStage& stage, const AllToAllExchange& inputs, const TensorView& q, const TensorView& k,
                   const TensorView& v, Pieces pieces) {
    pack_head_shards(q, kBshd, stage.query_heads_of, inputs, kQPart, pieces);
    pack_head_shards(k, kBshd, stage.kv_heads_of, inputs, kKPart, pieces);
    pack_head_shards(v, kBshd, stage.kv_heads_of, inputs, kVPart, pieces);
  }
  void unpack_inputs(const HeadStage& stage, const AllToAllExchange& inputs, Pieces pieces) {
    unpack_sequence_shards(inputs, kQPart, kBshd, stage.full_q, pieces);
    unpack_sequence_shards(inputs, kKPart, kBshd, stage.full_k, pieces);
    unpack_sequence_shards(inputs, kVPart, kBshd, stage.full_v, pieces);
  }

  AcrossGroups across;
  Communicator& comm;   // the ranks that trade heads for tokens: the group, or the world
  const int rank;   // in comm
  const int ranks;  // in comm: N1 for USP, N for plain Ulysses
  const int64_t local_seq;       // S / N
  const int64_t group_seq;       // the sequence a head shard holds: S / N2 (plain Ulysses: S)
  const int64_t heads_per_rank;  // H / ranks query heads per head shard
  const int64_t group_size;      // H / HK query heads per kv head
  const DType result_dtype;      // of full_out, full_dq, full_dk, full_dv and the gradient blocks
  std::vector<HeadStage> stages;  // in the order they are moved and attended
  ChunkPairing pairing;  // the local attention's blocks over the gathered sequence, and rows seeing no key

  std::vector<DeviceBuffer> head_shard_buffers;  // every stage's full_q, full_k, full_v, full_lse
  bool forward_exchanges_ready = false;          // their buffers allocated and parts placed
  std::vector<DeviceBuffer> forward_buffers;     // full_final_out
  std::vector<DeviceBuffer> out_buffers;         // full_out
  std::vector<DeviceBuffer> backward_buffers;
  TensorView dk_sum;       // (B, S/N, HK, D) fp32: every rank's contribution to this rank's tokens
  TensorView dv_sum;       // (B, S/N, HK, D) fp32
  Profile inner_timing;    // the inner strategy's last call
  // Reused across calls so that their segment lists keep their capacity.
  ForwardBlock forward_block;
  BackwardBlock backward_block;
};

std::unique_ptr<Strategy> make_ulysses_strategy(Communicator& communicator, const AttentionShape& shape,
                                                const AttentionOptions& options, const std::string& caller_error) {
  const int ranks = communicator.size();
  const std::vector<CallField> signature = call_signature(Algorithm::ulysses, shape, options);
  const bool packed = !options.document_lengths.empty();
  agree_on_call(communicator,
                first_error({caller_error, shape_and_options_error(shape, options, communicator.device()),
                             packed ? documents_error(Algorithm::ulysses, shape.seq, ranks, {}, options)
                                    : "",
                             ulysses_error(shape, ranks)}),
                signature);
  if (!packed)
    return make_agreed_ulysses_strategy(communicator, AcrossGroups{},
                                        SequenceLayout(LayoutKind::contiguous, shape.seq, ranks), std::nullopt,
                                        signature, shape, options);
  const DocumentLayout documents =
      strategy_document_layout(Algorithm::ulysses, ranks, {}, options);
  return make_agreed_ulysses_strategy(communicator, AcrossGroups{}, documents.sequence_layout(), documents, signature,
                                      shape, options);
}

std::unique_ptr<Strategy> make_agreed_ulysses_strategy(Communicator& world, AcrossGroups across, SequenceLayout layout,
                                                       const std::optional<DocumentLayout>& documents,
                                                       std::vector<CallField> signature, const AttentionShape& shape,
                                                       const AttentionOptions& options) {
  return std::make_unique<UlyssesStrategy>(world, std::move(across), std::move(layout), documents,
                                           std::move(signature), shape, options);
}

}  // namespace spattn
