// All-gather attention (Llama 3 style): every rank gathers the keys and values of the whole
// sequence and attends its own zigzag queries to them once; backward reduce-scatters dK and dV
// (fp32) back to their owners. Work goes in steps of a group of kv heads, so the gathered keys
// and values of only two groups are in memory, and the gather of group g+1 (the reduce-scatter of
// group g-1 in backward) overlaps the compute of group g.

#include <algorithm>
#include <limits>
#include <optional>
#include <utility>

#include "kernels/block_kernels.hpp"
#include "spattn/error.hpp"
#include "schedule/document_cut.hpp"
#include "schedule/strategy_rules.hpp"
#include "strategies/call_validation.hpp"
#include "strategies/device_buffer.hpp"
#include "strategies/profile_recorder.hpp"
#include "strategies/strategy_base.hpp"

namespace spattn {

namespace {

// At most this many steps: each step's gather is exposed only at the first, but every step is one
// more round of cuDNN calls, which run below their best rate on few heads at short lengths.
constexpr int64_t kMaxHeadGroups = 4;

// One rank's keys and values of one group of kv heads side by side, the unit every collective
// moves.
struct KvHeads {
  TensorView k;  // (B, S_local, G, D)
  TensorView v;  // (B, S_local, G, D)
};

// kv heads per step: the fewest that leave at most kMaxHeadGroups steps and divide the kv heads.
int64_t kv_heads_per_group(int64_t kv_heads) {
  int64_t groups = std::min(kv_heads, kMaxHeadGroups);
  while (kv_heads % groups != 0) ++groups;
  return kv_heads / groups;
}

}  // namespace

class AllGatherStrategy final : public StrategyBase {
 public:
  // The ranks of `communicator` agreed on the call (make_allgather_strategy). `documents`: the
  // packed documents when the call has them (the layout is theirs).
  AllGatherStrategy(Communicator& communicator, std::vector<CallField> signature, SequenceLayout layout,
                    const std::optional<DocumentLayout>& documents, const AttentionShape& call_shape,
                    const AttentionOptions& call_options)
      : StrategyBase(communicator, std::move(signature), std::move(layout), call_shape, call_options),
        rank(communicator.rank()),
        ranks(communicator.size()),
        local_seq(sequence_layout.local_length()),
        heads_per_kv_head(call_shape.heads / call_shape.kv_heads),
        group_kv_heads(kv_heads_per_group(call_shape.kv_heads)),
        groups(static_cast<int>(call_shape.kv_heads / group_kv_heads)) {
    // Every rank's chunks, as gathered: rank by rank, each at its offset in its rank's shard, cut
    // where documents end (a rank's stretch of the whole sequence holds several).
    const auto chunks_of = [&](int holder) {
      return documents ? documents->chunks(holder) : sequence_layout.chunks(holder);
    };
    std::vector<SequenceChunk> keys;
    for (int source = 0; source < ranks; ++source)
      for (const SequenceChunk& chunk : chunks_of(source)) {
        keys.push_back(chunk);
        owner_of_key.push_back(source);
      }
    pairing = pair_chunks(chunks_of(rank), keys, mask, documents ? &*documents : nullptr);
  }

  void forward(const TensorView& q, const TensorView& k, const TensorView& v, TensorView out, TensorView lse,
               Profile* profile) override {
    begin_forward(world, q, k, v, out, lse);
    ensure_workspace(/*backward=*/false);
    ProfileRecorder recorder(profile, groups, *kernels, "forward");
    std::unique_ptr<PendingTransfer> gather;
    recorder.compute(0, [&] { gather = start_gather(k, v, 0, recorder, 0); });
    for (int group = 0; group < groups; ++group) {
      std::unique_ptr<PendingTransfer> next_gather;
      if (group + 1 < groups) recorder.compute(group, [&] { next_gather = start_gather(k, v, group + 1, recorder, group); });
      recorder.wait(group, world, *gather);
      recorder.compute(group, [&] { forward_group(q, out, lse, group); });
      gather = std::move(next_gather);
    }
    recorder.finish();
  }

  void backward(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& out,
                const TensorView& lse, const TensorView& dout, TensorView dq, TensorView dk, TensorView dv,
                Profile* profile) override {
    begin_backward(world, q, k, v, out, lse, dout, dq, dk, dv);
    ensure_workspace(/*backward=*/true);
    ProfileRecorder recorder(profile, groups, *kernels, "backward");
    std::unique_ptr<PendingTransfer> gather, reduction;
    recorder.compute(0, [&] {
      kernels->prepare_backward_delta(out, dout, delta);
      kernels->fill(dq_accumulator, 0.0f);
      gather = start_gather(k, v, 0, recorder, 0);
    });
    for (int group = 0; group < groups; ++group) {
      std::unique_ptr<PendingTransfer> next_gather;
      if (group + 1 < groups) recorder.compute(group, [&] { next_gather = start_gather(k, v, group + 1, recorder, group); });
      recorder.wait(group, world, *gather);
      recorder.compute(group, [&] { backward_group(q, out, dout, lse, group); });
      // The previous group's sums must land before its buffers are reused by this group's.
      if (reduction) finish_reduction(recorder, *reduction, group - 1, dk, dv, group);
      recorder.sent(group, static_cast<double>(2 * group_elements() * sizeof(float)) * (ranks - 1), ranks - 1);
      reduction = world.start_reduce_scatter_sum(static_cast<const float*>(gradient_gathered[group % 2].data()),
                                                static_cast<float*>(gradient_reduced[group % 2].data()),
                                                2 * group_elements());
      gather = std::move(next_gather);
    }
    finish_reduction(recorder, *reduction, groups - 1, dk, dv, groups - 1);
    recorder.compute(groups - 1, [&] { kernels->copy(dq_accumulator, dq); });
    recorder.finish();
  }

 private:
  // Elements of one rank's keys (or values) of one group of kv heads: B * S_local * G * D.
  std::size_t group_elements() const {
    return static_cast<std::size_t>(shape.batch * local_seq * group_kv_heads * shape.head_dim);
  }

  // A (k, v) pair of one group of kv heads at `data`, keys first.
  KvHeads group_at(void* data, DType dtype) const {
    const TensorView k = TensorView::contiguous(data, dtype, {shape.batch, local_seq, group_kv_heads, shape.head_dim},
                                                kernels->device());
    TensorView v = k;
    v.data = static_cast<char*>(data) + group_elements() * dtype_size(dtype);
    return {k, v};
  }

  // Rank `source`'s (k, v) of one group inside a gathered buffer (blocks in rank order).
  KvHeads gathered_group(const DeviceBuffer& buffer, DType dtype, int source) const {
    return group_at(static_cast<char*>(buffer.data()) + 2 * group_elements() * dtype_size(dtype) * source, dtype);
  }

  void ensure_workspace(bool backward) {
    const std::size_t kv_bytes = 2 * group_elements() * dtype_size(shape.dtype);
    const std::size_t gradient_bytes = 2 * group_elements() * sizeof(float);
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

  // kv heads of `group` in a (B, S, HK, D) tensor.
  TensorView kv_heads_of(const TensorView& tensor, int group) const {
    return tensor.slice(2, group * group_kv_heads, group_kv_heads);
  }

  // Packs this rank's kv heads of `group` and starts gathering every rank's into gathered[group % 2].
  std::unique_ptr<PendingTransfer> start_gather(const TensorView& k, const TensorView& v, int group,
                                                ProfileRecorder& recorder, int step) {
    const KvHeads mine = group_at(packed[group % 2].data(), shape.dtype);
    kernels->copy(kv_heads_of(k, group), mine.k);
    kernels->copy(kv_heads_of(v, group), mine.v);
    const std::size_t bytes = 2 * group_elements() * dtype_size(shape.dtype);
    recorder.sent(step, static_cast<double>(bytes) * (ranks - 1), ranks - 1);
    return world.start_all_gather(mine.k.data, gathered[group % 2].data(), bytes);
  }

  // Query heads that read the kv heads of `group` (GQA: query head h reads kv head h / (H/HK)).
  TensorView query_heads(const TensorView& tensor, int group) const {
    return tensor.slice(2, group * group_kv_heads * heads_per_kv_head, group_kv_heads * heads_per_kv_head);
  }
  TensorView lse_heads(const TensorView& lse, int group) const {
    return lse.slice(1, group * group_kv_heads * heads_per_kv_head, group_kv_heads * heads_per_kv_head);
  }

  // Each query chunk of this group's heads is one block over every chunk it sees, so the block
  // writes its rows of out (through final_out) and lse at once.
  void forward_group(const TensorView& q, const TensorView& out, const TensorView& lse, int group) {
    for (const SequenceChunk& rows : pairing.rows_without_keys) {
      kernels->fill(query_heads(out.slice(1, rows.local_offset, rows.length), group), 0.0f);
      kernels->fill(lse_heads(lse.slice(2, rows.local_offset, rows.length), group),
                    -std::numeric_limits<float>::infinity());
    }
    const DeviceBuffer& keys = gathered[group % 2];
    for (const ChunkBlock& block : pairing.blocks) {
      const SequenceChunk& queries = block.queries;
      forward_block.segments.clear();
      for (const VisibleKey& visible : block.keys) {
        const KvHeads source = gathered_group(keys, shape.dtype, owner_of_key[visible.index]);
        forward_block.segments.push_back({source.k.slice(1, visible.chunk.local_offset, visible.chunk.length),
                                          source.v.slice(1, visible.chunk.local_offset, visible.chunk.length),
                                          visible.chunk.position});
      }
      forward_block.q = query_heads(q.slice(1, queries.local_offset, queries.length), group);
      forward_block.q_position = queries.position;
      forward_block.mask = mask;
      forward_block.scale = scale;
      forward_block.out = query_heads(out_accumulator.slice(1, queries.local_offset, queries.length), group);
      forward_block.lse = lse_heads(lse.slice(2, queries.local_offset, queries.length), group);
      forward_block.final_out = query_heads(out.slice(1, queries.local_offset, queries.length), group);
      kernels->forward(forward_block);
    }
  }

  void backward_group(const TensorView& q, const TensorView& out, const TensorView& dout, const TensorView& lse,
                      int group) {
    const DeviceBuffer& keys = gathered[group % 2];
    const DeviceBuffer& gradients = gradient_gathered[group % 2];
    kernels->fill(TensorView::contiguous(gradients.data(), DType::f32,
                                         {static_cast<int64_t>(2 * group_elements()) * ranks}, kernels->device()),
                  0.0f);
    for (const ChunkBlock& block : pairing.blocks) {
      const SequenceChunk& queries = block.queries;
      backward_block.segments.clear();
      for (const VisibleKey& visible : block.keys) {
        const int owner = owner_of_key[visible.index];
        const KvHeads source = gathered_group(keys, shape.dtype, owner);
        const KvHeads gradient = gathered_group(gradients, DType::f32, owner);
        const int64_t offset = visible.chunk.local_offset;
        const int64_t length = visible.chunk.length;
        backward_block.segments.push_back(
            {{source.k.slice(1, offset, length), source.v.slice(1, offset, length), visible.chunk.position},
             gradient.k.slice(1, offset, length),
             gradient.v.slice(1, offset, length)});
      }
      const int64_t offset = queries.local_offset;
      backward_block.q = query_heads(q.slice(1, offset, queries.length), group);
      backward_block.q_position = queries.position;
      backward_block.dout = query_heads(dout.slice(1, offset, queries.length), group);
      backward_block.out = query_heads(out.slice(1, offset, queries.length), group);
      backward_block.lse = lse_heads(lse.slice(2, offset, queries.length), group);
      backward_block.delta = lse_heads(delta.slice(2, offset, queries.length), group);
      backward_block.mask = mask;
      backward_block.scale = scale;
      backward_block.dq = query_heads(dq_accumulator.slice(1, offset, queries.length), group);
      kernels->backward(backward_block);
    }
  }

  // Waits for the reduce-scatter of `group` and writes this rank's sums into dk, dv.
  void finish_reduction(ProfileRecorder& recorder, PendingTransfer& reduction, int group, TensorView dk, TensorView dv,
                        int step) {
    recorder.wait(step, world, reduction);
    recorder.compute(step, [&] {
      const KvHeads sums = group_at(gradient_reduced[group % 2].data(), DType::f32);
      kernels->copy(sums.k, kv_heads_of(dk, group));
      kernels->copy(sums.v, kv_heads_of(dv, group));
    });
  }

  const int rank;
  const int ranks;
  const int64_t local_seq;
  const int64_t heads_per_kv_head;
  const int64_t group_kv_heads;  // kv heads per step, G
  const int groups;              // steps: HK / G
  std::vector<int> owner_of_key;  // the rank of each key chunk pair_chunks was given
  ChunkPairing pairing;           // this rank's query chunks with the chunks they see, and rows seeing none

  // Double buffers: index group % 2.
  DeviceBuffer packed[2];             // this rank's (k, v) of one group of kv heads, dtype
  DeviceBuffer gathered[2];           // every rank's (k, v) of one group, rank order
  DeviceBuffer gradient_gathered[2];  // fp32 (dk, dv) for every rank's keys of one group
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
  const int ranks = communicator.size();
  std::vector<CallField> signature = call_signature(Algorithm::allgather, shape, options);
  const bool packed = !options.document_lengths.empty();
  agree_on_call(communicator,
                first_error({caller_error, shape_and_options_error(shape, options, communicator.device()),
                             packed ? documents_error(Algorithm::allgather, shape.seq, ranks, {}, options)
                                    : allgather_error(shape, ranks)}),
                signature);
  if (!packed)
    return std::make_unique<AllGatherStrategy>(communicator, std::move(signature),
                                               SequenceLayout(LayoutKind::zigzag, shape.seq, ranks), std::nullopt,
                                               shape, options);
  const DocumentLayout documents =
      strategy_document_layout(Algorithm::allgather, ranks, {}, options);
  return std::make_unique<AllGatherStrategy>(communicator, std::move(signature), documents.sequence_layout(),
                                             documents, shape, options);
}

}  // namespace spattn
