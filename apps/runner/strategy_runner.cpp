#include "strategy_runner.hpp"

#include <memory>
#include <optional>

#include "device_tensor.hpp"
#include "schedule/ulysses_degree.hpp"
#include "spattn/device_memory.hpp"
#include "spattn/document_layout.hpp"
#include "spattn/error.hpp"
#include "spattn/local_attention.hpp"
#include "spattn/memory_statistics.hpp"

namespace spattn {

AttentionProblem random_problem(const AttentionShape& shape, const AttentionOptions& options, uint64_t seed,
                                bool backward) {
  const auto [B, S, H, HK, D] = std::make_tuple(shape.batch, shape.seq, shape.heads, shape.kv_heads, shape.head_dim);
  AttentionProblem problem{shape, options, HostTensor(shape.dtype, {B, S, H, D}), HostTensor(shape.dtype, {B, S, HK, D}),
                           HostTensor(shape.dtype, {B, S, HK, D}), HostTensor()};
  problem.q.fill_normal(seed);
  problem.k.fill_normal(seed + 1);
  problem.v.fill_normal(seed + 2);
  if (backward) {
    problem.dout = HostTensor(shape.dtype, {B, S, H, D});
    problem.dout.fill_normal(seed + 3);
  }
  return problem;
}

namespace {

// Adds `one` into `sum` (totals and per-step entries); the timeline is the latest call's.
void add_profile(Profile& sum, const Profile& one) {
  sum.spans = one.spans;
  sum.total_ms += one.total_ms;
  sum.comm_wait_ms += one.comm_wait_ms;
  sum.compute_ms += one.compute_ms;
  sum.bytes_sent += one.bytes_sent;
  sum.messages_sent += one.messages_sent;
  if (sum.steps.size() < one.steps.size()) sum.steps.resize(one.steps.size());
  for (std::size_t step = 0; step < one.steps.size(); ++step) {
    sum.steps[step].compute_ms += one.steps[step].compute_ms;
    sum.steps[step].comm_wait_ms += one.steps[step].comm_wait_ms;
    sum.steps[step].bytes_sent += one.steps[step].bytes_sent;
    sum.steps[step].messages_sent += one.steps[step].messages_sent;
  }
}

void divide_profile(Profile& profile, int count) {
  if (count <= 0) return;
  profile.total_ms /= count;
  profile.comm_wait_ms /= count;
  profile.compute_ms /= count;
  profile.bytes_sent /= count;
  profile.messages_sent /= count;  // every iteration sends the same messages
  for (StepTiming& step : profile.steps) {
    step.compute_ms /= count;
    step.comm_wait_ms /= count;
    step.bytes_sent /= count;
    step.messages_sent /= count;
  }
}

// How the problem's full tensors map to the ranks' shards: the plan's layout, or with packed
// documents their layout (the full tensors hold the documents without padding).
struct ShardMap {
  const SequenceLayout& layout;
  const std::optional<DocumentLayout>& documents;

  int64_t full_length() const { return documents ? documents->tokens() : layout.global_length(); }
  void shard(int rank, const TensorView& full, TensorView local, int seq_dim) const {
    if (documents) shard_documents(*documents, rank, full, local, seq_dim);
    else shard_sequence(layout, rank, full, local, seq_dim);
  }
  void unshard(int rank, const TensorView& local, TensorView full, int seq_dim) const {
    if (documents) unshard_documents(*documents, rank, local, full, seq_dim);
    else unshard_sequence(layout, rank, local, full, seq_dim);
  }
};

// This rank's shard of a full tensor.
HostTensor shard_of(const ShardMap& map, int rank, const HostTensor& full, int seq_dim) {
  const TensorView& view = full.view();
  const int64_t local_length = map.layout.local_length();
  HostTensor local = seq_dim == 1 ? HostTensor(view.dtype, {view.size(0), local_length, view.size(2), view.size(3)})
                                  : HostTensor(view.dtype, {view.size(0), view.size(1), local_length});
  map.shard(rank, view, local.view(), seq_dim);
  return local;
}

// A host tensor of `shape`'s dtype and shape, poisoned: outputs that a run leaves unwritten show.
HostTensor poisoned(DType dtype, std::initializer_list<int64_t> shape) {
  HostTensor tensor(dtype, shape);
  tensor.poison();
  return tensor;
}

// Every rank's shard gathered (on the communicator's device) and put in its place in a full
// host tensor.
HostTensor gather_full(Communicator& communicator, const ShardMap& map, const DeviceTensor& local, int seq_dim) {
  const TensorView& view = local.view();
  const int ranks = communicator.size();
  const std::size_t shard_bytes = static_cast<std::size_t>(view.numel()) * dtype_size(view.dtype);
  const DeviceMemory everyone(view.device, shard_bytes * static_cast<std::size_t>(ranks));
  auto gather = communicator.start_all_gather(view.data, everyone.data(), shard_bytes);
  communicator.wait(*gather);
  std::vector<unsigned char> on_host(everyone.bytes());
  copy_bytes(everyone.data(), view.device, on_host.data(), Device::cpu(), everyone.bytes());
  HostTensor full = seq_dim == 1 ? HostTensor(view.dtype, {view.size(0), map.full_length(), view.size(2), view.size(3)})
                                 : HostTensor(view.dtype, {view.size(0), view.size(1), map.full_length()});
  // Each rank's shard on the host: the local shard's contiguous view, moved to the host copy.
  TensorView shard = view;
  shard.device = Device::cpu();
  for (int rank = 0; rank < ranks; ++rank) {
    shard.data = on_host.data() + shard_bytes * static_cast<std::size_t>(rank);
    map.unshard(rank, shard, full.view(), seq_dim);
  }
  return full;
}

}  // namespace

AttentionOutputs run_single_device(const AttentionProblem& problem, const Device& device) {
  const AttentionShape& shape = problem.shape;
  const auto [B, S, H, HK, D] = std::make_tuple(shape.batch, shape.seq, shape.heads, shape.kv_heads, shape.head_dim);
  const DeviceTensor q(problem.q, device), k(problem.k, device), v(problem.v, device);
  DeviceTensor out(poisoned(shape.dtype, {B, S, H, D}), device), lse(poisoned(DType::f32, {B, H, S}), device);
  local_attention_forward(q.view(), k.view(), v.view(), out.view(), lse.view(), problem.options);
  AttentionOutputs outputs{out.to_host(), lse.to_host(), {}, {}, {}};
  if (problem.dout.empty()) return outputs;
  const DeviceTensor dout(problem.dout, device);
  DeviceTensor dq(poisoned(shape.dtype, {B, S, H, D}), device), dk(poisoned(shape.dtype, {B, S, HK, D}), device),
      dv(poisoned(shape.dtype, {B, S, HK, D}), device);
  local_attention_backward(q.view(), k.view(), v.view(), out.view(), lse.view(), dout.view(), dq.view(), dk.view(),
                           dv.view(), problem.options);
  outputs.dq = dq.to_host();
  outputs.dk = dk.to_host();
  outputs.dv = dv.to_host();
  return outputs;
}

StrategyOptions resolved_strategy_options(Algorithm algorithm, int ranks, const AttentionShape& shape,
                                          StrategyOptions strategy_options) {
  if (algorithm == Algorithm::usp)
    strategy_options.inner = resolved_ulysses_degree(ranks, strategy_options.inner, shape);
  return strategy_options;
}

StrategyRun run_strategy(Communicator& communicator, Algorithm algorithm, const AttentionProblem& problem,
                         int warmup, int iterations, bool per_step_profile,
                         const StrategyOptions& strategy_options) {
  const Device device = communicator.device();
  const MemoryStatistics before_plan = memory_statistics(device);
  reset_peak_memory(device);
  // Packed documents: the plan runs their padded sequence.
  std::optional<DocumentLayout> documents;
  AttentionShape plan_shape = problem.shape;
  if (!problem.options.document_lengths.empty()) {
    documents = plan_document_layout(algorithm, communicator.size(), problem.options,
                                     resolved_strategy_options(algorithm, communicator.size(), problem.shape,
                                                               strategy_options));
    plan_shape.seq = documents->sequence_layout().global_length();
  }
  auto plan = std::make_unique<DistributedAttention>(communicator, algorithm, plan_shape, problem.options,
                                                     strategy_options);
  const SequenceLayout& layout = plan->layout();
  const ShardMap map{layout, documents};
  const int rank = communicator.rank();
  const bool backward = !problem.dout.empty();
  const auto [B, H, HK, D, dtype] =
      std::make_tuple(problem.shape.batch, problem.shape.heads, problem.shape.kv_heads, problem.shape.head_dim,
                      problem.shape.dtype);
  const int64_t local_seq = layout.local_length();

  const DeviceTensor q(shard_of(map, rank, problem.q, 1), device);
  const DeviceTensor k(shard_of(map, rank, problem.k, 1), device);
  const DeviceTensor v(shard_of(map, rank, problem.v, 1), device);
  DeviceTensor out(poisoned(dtype, {B, local_seq, H, D}), device);
  DeviceTensor lse(poisoned(DType::f32, {B, H, local_seq}), device);
  DeviceTensor dout, dq, dk, dv;
  if (backward) {
    dout = DeviceTensor(shard_of(map, rank, problem.dout, 1), device);
    dq = DeviceTensor(poisoned(dtype, {B, local_seq, H, D}), device);
    dk = DeviceTensor(poisoned(dtype, {B, local_seq, HK, D}), device);
    dv = DeviceTensor(poisoned(dtype, {B, local_seq, HK, D}), device);
  }
  const auto call_forward = [&](Profile* profile) {
    plan->forward(q.view(), k.view(), v.view(), out.view(), lse.view(), profile);
  };
  const auto call_backward = [&](Profile* profile) {
    plan->backward(q.view(), k.view(), v.view(), out.view(), lse.view(), dout.view(), dq.view(), dk.view(), dv.view(),
                  profile);
  };

  StrategyRun run;
  // Every call is profiled: a Profile synchronizes with the device at the call's start and end
  // only (ProfileRecorder), so it keeps the overlap it measures.
  int64_t allocations_after_first_call = -1;
  for (int iteration = 0; iteration < warmup + iterations; ++iteration) {
    if (iteration == 1) allocations_after_first_call = memory_statistics(device).allocations;
    Profile forward_profile, backward_profile;
    forward_profile.per_step = backward_profile.per_step = per_step_profile;
    call_forward(&forward_profile);
    if (backward) call_backward(&backward_profile);
    // A transfer that failed after its call returned is reported here, not at a later call.
    plan->synchronize();
    if (iteration < warmup) continue;
    add_profile(run.forward, forward_profile);
    add_profile(run.backward, backward_profile);
  }
  divide_profile(run.forward, iterations);
  divide_profile(run.backward, iterations);
  if (allocations_after_first_call < 0) allocations_after_first_call = memory_statistics(device).allocations;
  const MemoryStatistics after_calls = memory_statistics(device);
  run.memory.peak_bytes = after_calls.peak_bytes_in_use - before_plan.bytes_in_use;
  run.memory.allocations_after_first_call =
      allocations_after_first_call < 0 ? 0 : after_calls.allocations - allocations_after_first_call;

  run.outputs.out = gather_full(communicator, map, out, 1);
  run.outputs.lse = gather_full(communicator, map, lse, 2);
  if (backward) {
    run.outputs.dq = gather_full(communicator, map, dq, 1);
    run.outputs.dk = gather_full(communicator, map, dk, 1);
    run.outputs.dv = gather_full(communicator, map, dv, 1);
  }
  plan.reset();
  run.memory.bytes_left_after_plan = memory_statistics(device).bytes_in_use - before_plan.bytes_in_use;
  return run;
}

}  // namespace spattn
