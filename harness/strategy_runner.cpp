#include "strategy_runner.hpp"

#include "spattn/error.hpp"
#include "spattn/local_attention.hpp"

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

// Adds `one` into `sum` (totals and per-step entries).
void add_profile(Profile& sum, const Profile& one) {
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

// This rank's shard of a full tensor.
HostTensor shard_of(const SequenceLayout& layout, int rank, const HostTensor& full, int seq_dim) {
  const TensorView& view = full.view();
  HostTensor local = seq_dim == 1 ? HostTensor(view.dtype, {view.size(0), layout.local_length(), view.size(2), view.size(3)})
                                  : HostTensor(view.dtype, {view.size(0), view.size(1), layout.local_length()});
  shard_sequence(layout, rank, view, local.view(), seq_dim);
  return local;
}

// Every rank's shard gathered and put in its place in a full tensor.
HostTensor gather_full(Communicator& communicator, const SequenceLayout& layout, const HostTensor& local,
                       int seq_dim) {
  const TensorView& view = local.view();
  const int ranks = communicator.size();
  const std::size_t shard_bytes = static_cast<std::size_t>(view.numel()) * dtype_size(view.dtype);
  std::vector<unsigned char> everyone(shard_bytes * static_cast<std::size_t>(ranks));
  auto gather = communicator.start_all_gather(view.data, everyone.data(), shard_bytes);
  communicator.wait(*gather);
  HostTensor full = seq_dim == 1 ? HostTensor(view.dtype, {view.size(0), layout.global_length(), view.size(2), view.size(3)})
                                 : HostTensor(view.dtype, {view.size(0), view.size(1), layout.global_length()});
  for (int rank = 0; rank < ranks; ++rank) {
    TensorView shard = view;
    shard.data = everyone.data() + shard_bytes * static_cast<std::size_t>(rank);
    unshard_sequence(layout, rank, shard, full.view(), seq_dim);
  }
  return full;
}

}  // namespace

AttentionOutputs run_single_device(const AttentionProblem& problem) {
  const AttentionShape& shape = problem.shape;
  const auto [B, S, H, HK, D] = std::make_tuple(shape.batch, shape.seq, shape.heads, shape.kv_heads, shape.head_dim);
  AttentionOutputs outputs{HostTensor(shape.dtype, {B, S, H, D}), HostTensor(DType::f32, {B, H, S}), {}, {}, {}};
  outputs.out.poison();
  outputs.lse.poison();
  local_attention_forward(problem.q.view(), problem.k.view(), problem.v.view(), outputs.out.view(), outputs.lse.view(),
                          problem.options);
  if (problem.dout.empty()) return outputs;
  outputs.dq = HostTensor(shape.dtype, {B, S, H, D});
  outputs.dk = HostTensor(shape.dtype, {B, S, HK, D});
  outputs.dv = HostTensor(shape.dtype, {B, S, HK, D});
  for (HostTensor* gradient : {&outputs.dq, &outputs.dk, &outputs.dv}) gradient->poison();
  local_attention_backward(problem.q.view(), problem.k.view(), problem.v.view(), outputs.out.view(),
                           outputs.lse.view(), problem.dout.view(), outputs.dq.view(), outputs.dk.view(),
                           outputs.dv.view(), problem.options);
  return outputs;
}

StrategyRun run_strategy(Communicator& communicator, Algorithm algorithm, const AttentionProblem& problem,
                         int warmup, int iterations, bool per_step_profile,
                         const StrategyOptions& strategy_options) {
  DistributedAttention plan(communicator, algorithm, problem.shape, problem.options, strategy_options);
  const SequenceLayout& layout = plan.layout();
  const int rank = communicator.rank();
  const bool backward = !problem.dout.empty();
  const AttentionShape& shape = problem.shape;
  const int64_t local_seq = layout.local_length();

  const HostTensor q = shard_of(layout, rank, problem.q, 1);
  const HostTensor k = shard_of(layout, rank, problem.k, 1);
  const HostTensor v = shard_of(layout, rank, problem.v, 1);
  HostTensor out(shape.dtype, {shape.batch, local_seq, shape.heads, shape.head_dim});
  HostTensor lse(DType::f32, {shape.batch, shape.heads, local_seq});
  out.poison();
  lse.poison();
  HostTensor dout, dq, dk, dv;
  if (backward) {
    dout = shard_of(layout, rank, problem.dout, 1);
    dq = HostTensor(shape.dtype, {shape.batch, local_seq, shape.heads, shape.head_dim});
    dk = HostTensor(shape.dtype, {shape.batch, local_seq, shape.kv_heads, shape.head_dim});
    dv = HostTensor(shape.dtype, {shape.batch, local_seq, shape.kv_heads, shape.head_dim});
    for (HostTensor* gradient : {&dq, &dk, &dv}) gradient->poison();
  }

  StrategyRun run;
  for (int iteration = 0; iteration < warmup + iterations; ++iteration) {
    const bool timed = iteration >= warmup;
    Profile forward_profile, backward_profile;
    forward_profile.per_step = backward_profile.per_step = per_step_profile;
    plan.forward(q.view(), k.view(), v.view(), out.view(), lse.view(), &forward_profile);
    if (backward)
      plan.backward(q.view(), k.view(), v.view(), out.view(), lse.view(), dout.view(), dq.view(), dk.view(),
                    dv.view(), &backward_profile);
    if (!timed) continue;
    add_profile(run.forward, forward_profile);
    add_profile(run.backward, backward_profile);
  }
  divide_profile(run.forward, iterations);
  divide_profile(run.backward, iterations);

  run.outputs.out = gather_full(communicator, layout, out, 1);
  run.outputs.lse = gather_full(communicator, layout, lse, 2);
  if (backward) {
    run.outputs.dq = gather_full(communicator, layout, dq, 1);
    run.outputs.dk = gather_full(communicator, layout, dk, 1);
    run.outputs.dv = gather_full(communicator, layout, dv, 1);
  }
  return run;
}

}  // namespace spattn
