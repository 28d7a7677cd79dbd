// Ulysses attention: an all-to-all turns sequence shards into head shards (rank r gets the whole
// sequence of query heads [r H/N, (r+1) H/N) and of the kv heads they read), attention runs
// locally over the whole sequence, and an all-to-all turns the results back into sequence shards.
// Backward moves its inputs the same way and sends the gradients back, summing the gradients of
// kv heads that several ranks read.
//
// The heads move in waves: the same slice of every rank's query heads is moved, attended and moved
// back on its own, so that one wave's attention runs while the next wave's inputs and the last
// wave's results travel, and only the first wave's inputs and the last wave's results wait on the
// wire. A kv head travels with the first wave whose query heads read it, its gradients with the
// last.
//
// USP (usp_strategy.cpp) is the same code inside groups of N1 consecutive ranks, with a rotation
// across the groups attending the head shards (in one wave) instead of the local block kernels.

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

// Heads [first, first + count) minus the heads of `other`, which lie before them (`before`) or after
// them: consecutive waves of consecutive query heads read kv heads in order, and may share one at
// either end.
HeadRange minus_overlap(const HeadRange& heads, const HeadRange& other, bool before) {
  const int64_t end = heads.first + heads.count;
  if (other.count == 0) return heads;
  if (before) {
    const int64_t first = std::max(heads.first, other.first + other.count);
    return {first, std::max<int64_t>(0, end - first)};
  }
  return {heads.first, std::max<int64_t>(0, std::min(end, other.first) - heads.first)};
}

// Waves per call: more hide more of the all-to-alls behind attention, but each wave is a kernel
// call per head group and block with a grid of fewer heads. The most that divides the query heads
// of a head shard, up to this.
constexpr int64_t kMostWaves = 4;

int64_t wave_count(int64_t heads_per_rank) {
  for (int64_t waves = std::min(kMostWaves, heads_per_rank); waves > 1; --waves)
    if (heads_per_rank % waves == 0) return waves;
  return 1;
}

// Whether data arriving for a place overwrites it or is added to it.
enum class Arrival { overwrite, sum };

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
        // An inner strategy attends the head shard it was made for, whole.
        heads_per_wave(across.inner ? heads_per_rank : heads_per_rank / wave_count(heads_per_rank)),
        // An inner strategy reads and writes the call's dtype; the block kernels accumulate in
        // fp32, rounded once on the way back.
        result_dtype(across.inner ? call_shape.dtype : DType::f32) {
    for (int peer = 0; peer < ranks; ++peer) {
      query_heads_of.push_back({peer * heads_per_rank, heads_per_rank});
      kv_heads_of.push_back(kv_heads_read(query_heads_of.back(), group_size));
    }
    own_kv_heads = kv_heads_of[static_cast<std::size_t>(rank)].count;
    plan_waves();
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

    if (!across.inner) recorder.compute(kToHeadsStep, [&] { fill_rows_without_keys(); });
    Profile* inner_profile = profile && across.inner ? &inner_timing : nullptr;
    run_waves(
        recorder, inner_profile, &Wave::forward_inputs, &Wave::forward_results,
        [&](const Wave& wave) { pack_inputs(wave, wave.forward_inputs, q, k, v); },
        [&](const Wave& wave) { unpack_inputs(wave, wave.forward_inputs); },
        [&](const Wave& wave) {
          if (across.inner)
            across.inner->forward(full_q, full_k, full_v, full_out, full_lse, inner_profile);
          else
            attend_locally_forward(wave);
        },
        [&](const Wave& wave) {
          pack_sequence_shards(own_queries(full_out, kBshd, wave), kBshd, wave.forward_results, kOutPart);
          pack_sequence_shards(own_queries(full_lse, kBhs, wave), kBhs, wave.forward_results, kLsePart);
        },
        [&](const Wave& wave) {
          unpack_head_shards(wave.forward_results, kOutPart, kBshd, wave.query_of, out, Arrival::overwrite);
          unpack_head_shards(wave.forward_results, kLsePart, kBhs, wave.query_of, lse, Arrival::overwrite);
        });
    recorder.finish();
  }

  void backward(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& out,
                const TensorView& lse, const TensorView& dout, TensorView dq, TensorView dk, TensorView dv,
                Profile* profile) override {
    begin_backward(comm, q, k, v, out, lse, dout, dq, dk, dv);
    ensure_backward_workspace();
    ProfileRecorder recorder(profile, kSteps, *kernels, "backward");

    const TensorView output = output_travels() ? out : local_delta;
    recorder.compute(kToHeadsStep, [&] {
      if (!output_travels()) kernels->softmax_delta(out, dout, local_delta);
      // The block kernels add into the gradients of the head shards (a kv head read by several
      // waves gathers all of them), and the arriving gradients are summed in fp32.
      if (!across.inner) {
        kernels->fill(full_dq, 0.0f);
        kernels->fill(full_dk, 0.0f);
        kernels->fill(full_dv, 0.0f);
      }
      kernels->fill(dk_sum, 0.0f);
      kernels->fill(dv_sum, 0.0f);
    });
    Profile* inner_profile = profile && across.inner ? &inner_timing : nullptr;
    run_waves(
        recorder, inner_profile, &Wave::backward_inputs, &Wave::gradients,
        [&](const Wave& wave) { pack_backward_inputs(wave, q, k, v, output, lse, dout); },
        [&](const Wave& wave) { unpack_backward_inputs(wave); },
        [&](const Wave& wave) {
          if (across.inner)
            across.inner->backward(full_q, full_k, full_v, full_out, full_lse, full_dout, full_dq, full_dk, full_dv,
                                   inner_profile);
          else
            attend_locally_backward(wave);
        },
        [&](const Wave& wave) {
          pack_sequence_shards(own_queries(full_dq, kBshd, wave), kBshd, wave.gradients, kDqPart);
          pack_sequence_shards(own_kv(full_dk, wave.kv_leaving_of), kBshd, wave.gradients, kDkPart);
          pack_sequence_shards(own_kv(full_dv, wave.kv_leaving_of), kBshd, wave.gradients, kDvPart);
        },
        [&](const Wave& wave) {
          unpack_head_shards(wave.gradients, kDqPart, kBshd, wave.query_of, dq, Arrival::overwrite);
          unpack_head_shards(wave.gradients, kDkPart, kBshd, wave.kv_leaving_of, dk_sum, Arrival::sum);
          unpack_head_shards(wave.gradients, kDvPart, kBshd, wave.kv_leaving_of, dv_sum, Arrival::sum);
        });
    recorder.compute(kToSequenceStep, [&] {
      kernels->copy(dk_sum, dk);
      kernels->copy(dv_sum, dv);
    });
    recorder.finish();
  }

 private:
  // Parts of a wave's all-to-all blocks, in the order describe_exchanges adds them. Inputs to head
  // shards: the block for peer p holds this rank's tokens of p's query heads in the wave and of the
  // kv heads arriving with it (forward: q, k, v; backward also dout, lse and the forward output).
  // Results back to sequence shards: the block for peer p holds p's tokens of this rank's query
  // heads in the wave (forward: out, lse; backward: dq) and of the kv heads leaving with it (dk,
  // dv).
  //
  // The forward output that backward moves is delta = rowsum(dout * out) for block kernels that
  // read only delta, computed where out is so that out itself never travels, and out for an inner
  // strategy or kernels that read out (see output_travels).
  enum InputPart { kQPart, kKPart, kVPart, kDoutPart, kLseInPart, kOutputPart };
  enum ForwardResultPart { kOutPart, kLsePart };
  enum GradientPart { kDqPart, kDkPart, kDvPart };

  // One wave: the same slice of every rank's query heads, with its all-to-alls.
  struct Wave {
    std::vector<HeadRange> query_of;        // per rank, its global query heads in this wave
    std::vector<HeadRange> kv_arriving_of;  // per rank, the kv heads its wave reads first of its waves
    std::vector<HeadRange> kv_leaving_of;   // per rank, the kv heads its wave reads last of its waves
    std::vector<HeadGroup> groups;          // this rank's query heads of the wave as kernel calls
    AllToAllExchange forward_inputs;        // q, k, v
    AllToAllExchange forward_results;       // out, lse
    AllToAllExchange backward_inputs;       // q, k, v, dout, lse, and delta or out (see output_travels)
    AllToAllExchange gradients;             // dq, dk, dv in result_dtype
  };

  void plan_waves() {
    const int64_t wave_total = heads_per_rank / heads_per_wave;
    waves.resize(static_cast<std::size_t>(wave_total));
    for (int64_t index = 0; index < wave_total; ++index) {
      Wave& wave = waves[static_cast<std::size_t>(index)];
      for (int peer = 0; peer < ranks; ++peer) {
        const HeadRange query{peer * heads_per_rank + index * heads_per_wave, heads_per_wave};
        const HeadRange read = kv_heads_read(query, group_size);
        const HeadRange read_before =
            index > 0 ? kv_heads_read({query.first - heads_per_wave, heads_per_wave}, group_size) : HeadRange{};
        const HeadRange read_after = index + 1 < wave_total
                                         ? kv_heads_read({query.first + heads_per_wave, heads_per_wave}, group_size)
                                         : HeadRange{};
        wave.query_of.push_back(query);
        wave.kv_arriving_of.push_back(minus_overlap(read, read_before, /*before=*/true));
        wave.kv_leaving_of.push_back(minus_overlap(read, read_after, /*before=*/false));
      }
      // head_groups numbers heads from the wave's first query head and the kv head it reads; the
      // head shards from the rank's.
      const HeadRange& own_query = wave.query_of[static_cast<std::size_t>(rank)];
      wave.groups = head_groups(own_query, group_size);
      for (HeadGroup& group : wave.groups) {
        group.query.first += own_query.first - query_heads_of[static_cast<std::size_t>(rank)].first;
        group.kv.first += own_query.first / group_size - kv_heads_of[static_cast<std::size_t>(rank)].first;
      }
      describe_exchanges(wave);
    }
  }

  // Every block carries room for the most kv heads any rank's wave moves, because an all-to-all
  // needs blocks of one size; a rank that moves fewer leaves the rest unused. A kv head read by
  // query heads of several ranks goes into the block of each of them.
  void describe_exchanges(Wave& wave) {
    const int64_t B = shape.batch, D = shape.head_dim;
    const int64_t arriving = most_heads(wave.kv_arriving_of), leaving = most_heads(wave.kv_leaving_of);
    for (AllToAllExchange* inputs : {&wave.forward_inputs, &wave.backward_inputs}) {
      inputs->add_part(shape.dtype, {B, local_seq, heads_per_wave, D});  // q
      inputs->add_part(shape.dtype, {B, local_seq, arriving, D});        // k
      inputs->add_part(shape.dtype, {B, local_seq, arriving, D});        // v
    }
    wave.backward_inputs.add_part(shape.dtype, {B, local_seq, heads_per_wave, D});  // dout
    wave.backward_inputs.add_part(DType::f32, {B, heads_per_wave, local_seq});      // lse
    if (output_travels())
      wave.backward_inputs.add_part(shape.dtype, {B, local_seq, heads_per_wave, D});  // out
    else
      wave.backward_inputs.add_part(DType::f32, {B, heads_per_wave, local_seq});    // delta
    wave.forward_results.add_part(shape.dtype, {B, local_seq, heads_per_wave, D});  // out
    wave.forward_results.add_part(DType::f32, {B, heads_per_wave, local_seq});      // lse
    // The block kernels' gradients travel in fp32 so that a kv head's contributions from several
    // ranks are summed before the one rounding to the input dtype.
    wave.gradients.add_part(result_dtype, {B, local_seq, heads_per_wave, D});  // dq
    wave.gradients.add_part(result_dtype, {B, local_seq, leaving, D});         // dk
    wave.gradients.add_part(result_dtype, {B, local_seq, leaving, D});         // dv
  }

  static int64_t most_heads(const std::vector<HeadRange>& heads_of) {
    int64_t most = 0;
    for (const HeadRange& heads : heads_of) most = std::max(most, heads.count);
    return most;
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
    full_q = allocate(head_shard_buffers, shape.dtype, {B, group_seq, heads_per_rank, D});
    full_k = allocate(head_shard_buffers, shape.dtype, {B, group_seq, own_kv_heads, D});
    full_v = allocate(head_shard_buffers, shape.dtype, {B, group_seq, own_kv_heads, D});
    full_lse = allocate(head_shard_buffers, DType::f32, {B, heads_per_rank, group_seq});
  }
  void ensure_full_out() {
    if (!out_buffers.empty()) return;
    full_out = allocate(out_buffers, result_dtype, {shape.batch, group_seq, heads_per_rank, shape.head_dim});
  }
  void ensure_forward_workspace() {
    ensure_head_shards();
    ensure_full_out();
    for (Wave& wave : waves) {
      wave.forward_inputs.allocate(*kernels, ranks);
      wave.forward_results.allocate(*kernels, ranks);
    }
  }
  void ensure_backward_workspace() {
    ensure_head_shards();
    if (!backward_buffers.empty()) return;
    const int64_t B = shape.batch, D = shape.head_dim;
    if (output_travels()) ensure_full_out();
    if (!output_travels()) local_delta = allocate(backward_buffers, DType::f32, {B, shape.heads, local_seq});
    if (!output_travels()) full_delta = allocate(backward_buffers, DType::f32, {B, heads_per_rank, group_seq});
    full_dout = allocate(backward_buffers, shape.dtype, {B, group_seq, heads_per_rank, D});
    full_dq = allocate(backward_buffers, result_dtype, {B, group_seq, heads_per_rank, D});
    full_dk = allocate(backward_buffers, result_dtype, {B, group_seq, own_kv_heads, D});
    full_dv = allocate(backward_buffers, result_dtype, {B, group_seq, own_kv_heads, D});
    dk_sum = allocate(backward_buffers, DType::f32, {B, local_seq, shape.kv_heads, D});
    dv_sum = allocate(backward_buffers, DType::f32, {B, local_seq, shape.kv_heads, D});
    for (Wave& wave : waves) {
      wave.backward_inputs.allocate(*kernels, ranks);
      wave.gradients.allocate(*kernels, ranks);
    }
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

  // This rank's query heads of `wave` in a head-shard tensor with `axes`.
  TensorView own_queries(const TensorView& full, Axes axes, const Wave& wave) const {
    const int64_t first = wave.query_of[static_cast<std::size_t>(rank)].first;
    return full.slice(axes.head, first - query_heads_of[static_cast<std::size_t>(rank)].first, heads_per_wave);
  }

  // This rank's kv heads `heads_of[rank]` in a (B, group_seq, own_kv_heads, D) head-shard tensor.
  TensorView own_kv(const TensorView& full, const std::vector<HeadRange>& heads_of) const {
    const HeadRange& heads = heads_of[static_cast<std::size_t>(rank)];
    return full.slice(kBshd.head, heads.first - kv_heads_of[static_cast<std::size_t>(rank)].first, heads.count);
  }

  // Rows that see no key have out 0 and lse -inf, which no kernel call writes.
  void fill_rows_without_keys() {
    for (const SequenceChunk& rows : pairing.rows_without_keys) {
      kernels->fill(full_out.slice(kBshd.seq, rows.local_offset, rows.length), 0.0f);
      kernels->fill(full_lse.slice(kBhs.seq, rows.local_offset, rows.length), -std::numeric_limits<float>::infinity());
    }
  }

  // Attention of this rank's query heads of `wave` over the whole sequence with the block kernels.
  void attend_locally_forward(const Wave& wave) {
    for (const HeadGroup& group : wave.groups)
      for (const ChunkBlock& block : pairing.blocks) {
        const auto queries = [&](const TensorView& tensor, Axes axes) {
          return query_rows(tensor, axes, group, block);
        };
        forward_block.q = queries(full_q, kBshd);
        forward_block.q_position = block.queries.position;
        forward_block.segments.clear();
        for (const VisibleKey& key : block.keys)
          forward_block.segments.push_back(
              {kv_rows(full_k, group, key.chunk), kv_rows(full_v, group, key.chunk), key.chunk.position});
        forward_block.mask = mask;
        forward_block.scale = scale;
        forward_block.out = queries(full_out, kBshd);
        forward_block.lse = queries(full_lse, kBhs);
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

  // Adds the gradients of this rank's query heads of `wave` to full_dq, full_dk and full_dv.
  void attend_locally_backward(const Wave& wave) {
    for (const HeadGroup& group : wave.groups)
      for (const ChunkBlock& block : pairing.blocks) {
        const auto queries = [&](const TensorView& tensor, Axes axes) {
          return query_rows(tensor, axes, group, block);
        };
        backward_block.q = queries(full_q, kBshd);
        backward_block.q_position = block.queries.position;
        backward_block.segments.clear();
        for (const VisibleKey& key : block.keys)
          backward_block.segments.push_back(
              {{kv_rows(full_k, group, key.chunk), kv_rows(full_v, group, key.chunk), key.chunk.position},
               kv_rows(full_dk, group, key.chunk),
               kv_rows(full_dv, group, key.chunk)});
        backward_block.dout = queries(full_dout, kBshd);
        backward_block.out = output_travels() ? queries(full_out, kBshd) : TensorView{};
        backward_block.lse = queries(full_lse, kBhs);
        backward_block.delta = output_travels() ? TensorView{} : queries(full_delta, kBhs);
        backward_block.mask = mask;
        backward_block.scale = scale;
        backward_block.dq = queries(full_dq, kBshd);
        kernels->backward(backward_block);
      }
  }

  // The waves' pipeline, the same for forward and backward: each wave's inputs (its exchange
  // `inputs`) travel while the wave before it is attended and its results (`results`) while the
  // wave after it is, so that only the first inputs and the last results keep attention waiting.
  // The steps are functions of the wave: pack and unpack its inputs, attend, pack and unpack its
  // results. `inner_profile`, where attend fills one (an inner strategy's), is folded into the
  // attention step after each wave.
  template <typename PackInputs, typename UnpackInputs, typename Attend, typename PackResults, typename UnpackResults>
  void run_waves(ProfileRecorder& recorder, const Profile* inner_profile, AllToAllExchange Wave::*inputs,
                 AllToAllExchange Wave::*results, PackInputs&& pack_inputs_of, UnpackInputs&& unpack_inputs_of,
                 Attend&& attend, PackResults&& pack_results_of, UnpackResults&& unpack_results_of) {
    recorder.compute(kToHeadsStep, [&] { pack_inputs_of(waves.front()); });
    std::unique_ptr<PendingTransfer> arriving = start_exchange(recorder, kToHeadsStep, waves.front().*inputs);
    std::vector<std::unique_ptr<PendingTransfer>> leaving;
    for (std::size_t index = 0; index < waves.size(); ++index) {
      const Wave& wave = waves[index];
      const Wave* next = index + 1 < waves.size() ? &waves[index + 1] : nullptr;
      recorder.wait(kToHeadsStep, comm, *arriving);
      recorder.compute(kToHeadsStep, [&] {
        unpack_inputs_of(wave);
        if (next) pack_inputs_of(*next);
      });
      if (next) arriving = start_exchange(recorder, kToHeadsStep, next->*inputs);
      recorder.compute(kAttentionStep, [&] { attend(wave); });
      if (inner_profile) recorder.fold_nested(kAttentionStep, *inner_profile);
      recorder.compute(kToSequenceStep, [&] { pack_results_of(wave); });
      leaving.push_back(start_exchange(recorder, kToSequenceStep, wave.*results));
    }
    for (std::size_t index = 0; index < waves.size(); ++index) {
      recorder.wait(kToSequenceStep, comm, *leaving[index]);
      recorder.compute(kToSequenceStep, [&] { unpack_results_of(waves[index]); });
    }
  }

  std::unique_ptr<PendingTransfer> start_exchange(ProfileRecorder& recorder, int step, const AllToAllExchange& blocks) {
    const int peers = comm.size() - 1;
    recorder.sent(step, static_cast<double>(blocks.bytes_per_peer()) * peers, peers);
    return blocks.start(comm);
  }

  // Sequence shard -> blocks: the block for peer p gets heads `heads_of[p]` of this rank's tokens.
  void pack_head_shards(const TensorView& shard, Axes axes, const std::vector<HeadRange>& heads_of,
                        const AllToAllExchange& blocks, int part) {
    for (int peer = 0; peer < ranks; ++peer) {
      const HeadRange& heads = heads_of[static_cast<std::size_t>(peer)];
      if (heads.count == 0) continue;
      kernels->copy(shard.slice(axes.head, heads.first, heads.count),
                    blocks.to_send(peer, part).slice(axes.head, 0, heads.count));
    }
  }

  // Blocks -> head shard: block j holds rank j's tokens, which go to their place in the sequence
  // of `full`, the heads of the head shard that the part carries.
  void unpack_sequence_shards(const AllToAllExchange& blocks, int part, Axes axes, const TensorView& full) {
    if (full.size(axes.head) == 0) return;
    for (int source = 0; source < ranks; ++source)
      kernels->copy(blocks.received(source, part).slice(axes.head, 0, full.size(axes.head)),
                    full.slice(axes.seq, source * local_seq, local_seq));
  }

  // Head shard -> blocks: the block for peer p gets p's tokens of `full`, the heads of this rank's
  // head shard that the part carries.
  void pack_sequence_shards(const TensorView& full, Axes axes, const AllToAllExchange& blocks, int part) {
    if (full.size(axes.head) == 0) return;
    for (int peer = 0; peer < ranks; ++peer)
      kernels->copy(full.slice(axes.seq, peer * local_seq, local_seq),
                    blocks.to_send(peer, part).slice(axes.head, 0, full.size(axes.head)));
  }

  // Blocks -> sequence shard: block j holds heads `heads_of[j]` of this rank's tokens.
  void unpack_head_shards(const AllToAllExchange& blocks, int part, Axes axes, const std::vector<HeadRange>& heads_of,
                          TensorView shard, Arrival arrival) {
    for (int source = 0; source < ranks; ++source) {
      const HeadRange& heads = heads_of[static_cast<std::size_t>(source)];
      if (heads.count == 0) continue;
      const TensorView arrived = blocks.received(source, part).slice(axes.head, 0, heads.count);
      const TensorView place = shard.slice(axes.head, heads.first, heads.count);
      if (arrival == Arrival::sum) kernels->add(arrived, place);
      else kernels->copy(arrived, place);
    }
  }

  // q, k and v of `wave` into `inputs`, and out of them into the head shards.
  void pack_inputs(const Wave& wave, const AllToAllExchange& inputs, const TensorView& q, const TensorView& k,
                   const TensorView& v) {
    pack_head_shards(q, kBshd, wave.query_of, inputs, kQPart);
    pack_head_shards(k, kBshd, wave.kv_arriving_of, inputs, kKPart);
    pack_head_shards(v, kBshd, wave.kv_arriving_of, inputs, kVPart);
  }
  void unpack_inputs(const Wave& wave, const AllToAllExchange& inputs) {
    unpack_sequence_shards(inputs, kQPart, kBshd, own_queries(full_q, kBshd, wave));
    unpack_sequence_shards(inputs, kKPart, kBshd, own_kv(full_k, wave.kv_arriving_of));
    unpack_sequence_shards(inputs, kVPart, kBshd, own_kv(full_v, wave.kv_arriving_of));
  }

  // Backward's inputs of `wave`: q, k, v, dout, lse and `output` (out, or delta when the output
  // does not travel).
  void pack_backward_inputs(const Wave& wave, const TensorView& q, const TensorView& k, const TensorView& v,
                            const TensorView& output, const TensorView& lse, const TensorView& dout) {
    pack_inputs(wave, wave.backward_inputs, q, k, v);
    pack_head_shards(dout, kBshd, wave.query_of, wave.backward_inputs, kDoutPart);
    pack_head_shards(lse, kBhs, wave.query_of, wave.backward_inputs, kLseInPart);
    pack_head_shards(output, output_travels() ? kBshd : kBhs, wave.query_of, wave.backward_inputs, kOutputPart);
  }
  void unpack_backward_inputs(const Wave& wave) {
    unpack_inputs(wave, wave.backward_inputs);
    unpack_sequence_shards(wave.backward_inputs, kDoutPart, kBshd, own_queries(full_dout, kBshd, wave));
    unpack_sequence_shards(wave.backward_inputs, kLseInPart, kBhs, own_queries(full_lse, kBhs, wave));
    if (output_travels())
      unpack_sequence_shards(wave.backward_inputs, kOutputPart, kBshd, own_queries(full_out, kBshd, wave));
    else
      unpack_sequence_shards(wave.backward_inputs, kOutputPart, kBhs, own_queries(full_delta, kBhs, wave));
  }

  AcrossGroups across;
  Communicator& comm;   // the ranks that trade heads for tokens: the group, or the world
  const int rank;   // in comm
  const int ranks;  // in comm: N1 for USP, N for plain Ulysses
  const int64_t local_seq;       // S / N
  const int64_t group_seq;       // the sequence a head shard holds: S / N2 (plain Ulysses: S)
  const int64_t heads_per_rank;  // H / ranks query heads per head shard
  const int64_t group_size;      // H / HK query heads per kv head
  const int64_t heads_per_wave;  // query heads of a head shard that move and are attended together
  const DType result_dtype;      // of full_out, full_dq, full_dk, full_dv and the gradient blocks
  std::vector<HeadRange> query_heads_of;  // per rank, global query heads of its head shard
  std::vector<HeadRange> kv_heads_of;     // per rank, global kv heads its query heads read
  int64_t own_kv_heads = 0;               // kv heads this rank reads
  std::vector<Wave> waves;                // in the order they move
  ChunkPairing pairing;  // the local attention's blocks over the gathered sequence, and rows seeing no key

  std::vector<DeviceBuffer> head_shard_buffers;
  TensorView full_q;    // (B, group_seq, H/ranks, D)
  TensorView full_k;    // (B, group_seq, own_kv_heads, D)
  TensorView full_v;    // (B, group_seq, own_kv_heads, D)
  TensorView full_lse;  // (B, H/ranks, group_seq) fp32: written by forward, received by backward
  std::vector<DeviceBuffer> out_buffers;
  TensorView full_out;  // (B, group_seq, H/ranks, D) result_dtype: written by forward, received by backward when
                        // output_travels()
  std::vector<DeviceBuffer> backward_buffers;
  TensorView local_delta;  // (B, H, S/N) fp32, block kernels that read only delta
  TensorView full_dout;    // (B, group_seq, H/ranks, D)
  TensorView full_delta;   // (B, H/ranks, group_seq) fp32, block kernels that read only delta
  TensorView full_dq;      // (B, group_seq, H/ranks, D) result_dtype
  TensorView full_dk;      // (B, group_seq, own_kv_heads, D) result_dtype
  TensorView full_dv;      // (B, group_seq, own_kv_heads, D) result_dtype
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
