// Distributed attention throughput on GPUs, per GPU and as a share of one GPU's: every strategy
// against the ideal, which is one GPU running the whole global sequence with the same block
// kernel (DistributedAttention at one rank: a single block, no communication). Rows
// `cudnn_call_one_gpu` time one cuDNN call over the whole sequence alone, `own_call_one_gpu` one
// own-kernel call (sm_90; forward+backward where the own backward takes the shape), without the
// plan's merges and copies; rows `spattn_local_shard` one GPU on one rank's shard alone (tokens
// per GPU, no communication). --kernel picks the plans' block kernels (default auto: the own
// forward on sm_90, cuDNN elsewhere and for every backward); a list (--kernel own,cudnn) runs the
// plans' rows once per choice in the same run, each named spattn_<kernel>, so that one command
// compares them (bench/plot_results.py draws them apart).
// Peak MiB (peak_memory_mib in the CSV): device memory of forward+backward at its peak on the
// rank that needs most, spattn's own (memory_statistics: workspaces, cuDNN's) plus the caller's
// tensors (q, k, v, out, lse, dout, dq, dk, dv).
//
// --documents M packs each sequence with M documents of random lengths (--document-seed) that sum
// to it. Rows `spattn_documents` run each strategy on them (a query sees its own document only),
// `spattn_documents_one_gpu` one GPU on all of them, and spattn's ring of the same tokens without
// documents (every token sees every earlier one: a ring that knows no documents) comes beside them.
// All of them count the documents' FLOP, the work the documents ask for. Each strategy's line
// `work per rank` gives the most query-key pairs a rank computes over the mean (1: equal work).
// All-gather runs twice, per document and over the whole sequence (rows `allgather_whole_sequence`).
//
//   mpirun -np N spattn_gpu_bench [--algos ring,zigzag,ulysses,hamilton,allgather,usp]
//       [--tokens-per-gpu 8192,32768,65536] [--heads 32] [--kv-heads 32,8] [--head-dim 128]
//       [--batch 1] [--dtype bf16] [--causal both|yes|no] [--warmup 2] [--iters 5] [--calls back-to-back|apart]
//       [--transport auto] [--kernel auto|own|cudnn[,...]] [--no-ideal] [--csv PATH] [--device-name TEXT]
//       [--documents M] [--document-seed 1]
//
// FLOP by the flash-attention convention over the global sequence S: forward 4 B H S^2 D, half of
// it under a causal mask (with documents, the sum of that over the documents); forward+backward
// 3.5x forward. Per-GPU TFLOP/s divides by the ranks.
// Each time is the slowest rank's mean over --iters back-to-back calls after --warmup, bracketed
// by device synchronization (no Profile, so nothing inside the calls synchronizes); with --calls
// apart, the mean of --iters calls each timed alone, every rank's device synchronized and the
// ranks at a barrier before it (as `spattn run --timeline` times its calls): a rank that ends a
// call early then cannot start the next one's transfers while its peer still computes. The CSV has
// the columns of bench/torch_context_parallel.py, so that bench/plot_results.py draws both.

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <memory>
#include <optional>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "bench_options.hpp"
#include "bench_tensor.hpp"
#include "core/cuda/cuda_check.hpp"
#include "core/cuda/current_device_guard.hpp"
#include "kernels/cuda/cuda_elementwise_kernels.hpp"
#include "kernels/cuda/cudnn_attention.hpp"
#include "kernels/hopper/hopper_backward.hpp"
#include "kernels/hopper/hopper_forward.hpp"
#include "spattn/device_communicator.hpp"
#include "spattn/device_memory.hpp"
#include "spattn/distributed_attention.hpp"
#include "spattn/document_layout.hpp"
#include "spattn/error.hpp"
#include "spattn/memory_statistics.hpp"
#include "spattn/mpi_communicator.hpp"
#include "strategy_runner.hpp"

namespace spattn {
namespace {

struct BenchOptions {
  std::vector<std::string> algorithms = {"ring", "zigzag", "ulysses", "hamilton", "allgather", "usp"};
  std::vector<int64_t> tokens_per_gpu = {8192, 32768, 65536};
  int64_t heads = 32;
  std::vector<int64_t> kv_heads = {32, 8};
  int64_t head_dim = 128;
  int64_t batch = 1;
  DType dtype = DType::bf16;
  std::vector<bool> causal = {false, true};
  int warmup = 2;
  int iterations = 5;
  bool calls_apart = false;
  std::string transport = "auto";
  std::vector<KernelChoice> kernels = {KernelChoice::automatic};
  bool ideal = true;
  std::string csv;
  std::string device_name = "gpu";
  int64_t documents = 0;  // 0: no packed documents
  uint64_t document_seed = 1;
};

BenchOptions parse(int argc, char** argv) {
  BenchOptions options;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    const auto value = [&]() -> std::string {
      SPATTN_CHECK(i + 1 < argc, "missing value after " << flag);
      return argv[++i];
    };
    if (flag == "--algos") {
      options.algorithms = split_list(value());
      for (const std::string& name : options.algorithms) parse_algorithm(name);  // names the allowed ones
    } else if (flag == "--tokens-per-gpu") {
      options.tokens_per_gpu = parse_counts(flag, value());
    } else if (flag == "--heads") {
      options.heads = parse_counts(flag, value()).front();
    } else if (flag == "--kv-heads") {
      options.kv_heads = parse_counts(flag, value());
    } else if (flag == "--head-dim") {
      options.head_dim = parse_counts(flag, value()).front();
    } else if (flag == "--batch") {
      options.batch = parse_counts(flag, value()).front();
    } else if (flag == "--dtype") {
      options.dtype = parse_dtype(value());
      SPATTN_CHECK(options.dtype != DType::f32, "--dtype: the CUDA kernels take bf16 or fp16");
    } else if (flag == "--causal") {
      const std::string which = value();
      SPATTN_CHECK(which == "both" || which == "yes" || which == "no",
                   "--causal expects both, yes or no, got '" << which << "'");
      options.causal = which == "both" ? std::vector<bool>{false, true} : std::vector<bool>{which == "yes"};
    } else if (flag == "--warmup") {
      options.warmup = static_cast<int>(parse_counts(flag, value()).front());
    } else if (flag == "--iters") {
      options.iterations = static_cast<int>(parse_counts(flag, value()).front());
    } else if (flag == "--calls") {
      const std::string which = value();
      SPATTN_CHECK(which == "back-to-back" || which == "apart",
                   "--calls expects back-to-back or apart, got '" << which << "'");
      options.calls_apart = which == "apart";
    } else if (flag == "--transport") {
      options.transport = value();
    } else if (flag == "--kernel") {
      options.kernels.clear();
      for (const std::string& name : split_list(value())) {
        const KernelChoice kernel = parse_kernel_choice(name);
        SPATTN_CHECK(std::find(options.kernels.begin(), options.kernels.end(), kernel) == options.kernels.end(),
                     "--kernel names " << name << " twice");
        options.kernels.push_back(kernel);
      }
    } else if (flag == "--no-ideal") {
      options.ideal = false;
    } else if (flag == "--csv") {
      options.csv = value();
    } else if (flag == "--device-name") {
      options.device_name = value();
    } else if (flag == "--documents") {
      options.documents = parse_counts(flag, value()).front();
    } else if (flag == "--document-seed") {
      options.document_seed = static_cast<uint64_t>(parse_counts(flag, value()).front());
    } else {
      SPATTN_FAIL("unknown option '" << flag << "'; see the comment at the top of bench/gpu_attention_bench.cpp");
    }
  }
  return options;
}

// The slowest rank's value.
double slowest(Communicator& world, double mine) {
  std::vector<double> everyone(static_cast<std::size_t>(world.size()));
  world.host_all_gather(&mine, everyone.data(), sizeof mine);
  return *std::max_element(everyone.begin(), everyone.end());
}

// Mean milliseconds of `call` over the options' iterations after their warmup, back to back or
// each apart (see the header), the slowest rank's.
double time_calls(Communicator& world, const Device& device, const BenchOptions& options,
                  const std::function<void()>& call) {
  using Clock = std::chrono::steady_clock;
  const auto milliseconds_since = [](Clock::time_point start) {
    return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
  };
  for (int i = 0; i < options.warmup; ++i) call();
  double ms = 0;
  if (options.calls_apart) {
    for (int i = 0; i < options.iterations; ++i) {
      synchronize_device(device);
      world.barrier();
      const auto start = Clock::now();
      call();
      synchronize_device(device);
      ms += milliseconds_since(start);
    }
  } else {
    synchronize_device(device);
    world.barrier();
    const auto start = Clock::now();
    for (int i = 0; i < options.iterations; ++i) call();
    synchronize_device(device);
    ms = milliseconds_since(start);
  }
  return slowest(world, ms / options.iterations);
}

struct PassTimes {
  double forward_ms = 0;
  double forward_backward_ms = 0;
  double peak_mib = 0;  // device memory of forward+backward at its peak, the most over ranks
};

// Device memory that the calls since `before` held at their peak, in MiB, the most over the
// ranks of `world`: spattn's own at its peak (workspaces, cuDNN's included) plus the caller's
// tensors of `tensor_bytes`.
double peak_mib(Communicator& world, const Device& device, const MemoryStatistics& before, std::size_t tensor_bytes) {
  const double workspace = static_cast<double>(memory_statistics(device).peak_bytes_in_use - before.bytes_in_use);
  return slowest(world, (workspace + static_cast<double>(tensor_bytes)) / (1 << 20));
}

// Forward and forward+backward of `algorithm` over `communicator` at `shape`.
PassTimes time_strategy(Communicator& world, Communicator& communicator, Algorithm algorithm,
                        const AttentionShape& shape, const AttentionOptions& attention, const BenchOptions& options) {
  StrategyOptions strategy_options;
  const Device device = communicator.device();
  const MemoryStatistics before = memory_statistics(device);
  reset_peak_memory(device);
  DistributedAttention plan(communicator, algorithm, shape, attention, strategy_options);
  const int64_t local = plan.layout().local_length();
  const int64_t B = shape.batch, H = shape.heads, HK = shape.kv_heads, D = shape.head_dim;
  const uint64_t seed = 17 + static_cast<uint64_t>(communicator.rank()) * 101;
  const BenchTensor q(device, shape.dtype, {B, local, H, D}, seed), k(device, shape.dtype, {B, local, HK, D}, seed + 1),
      v(device, shape.dtype, {B, local, HK, D}, seed + 2), dout(device, shape.dtype, {B, local, H, D}, seed + 3);
  const BenchTensor out(device, shape.dtype, {B, local, H, D}, 0), dq(device, shape.dtype, {B, local, H, D}, 0),
      dk(device, shape.dtype, {B, local, HK, D}, 0), dv(device, shape.dtype, {B, local, HK, D}, 0);
  const BenchTensor lse(device, DType::f32, {B, H, local}, 0);
  const auto forward = [&] { plan.forward(q.view(), k.view(), v.view(), out.view(), lse.view()); };
  const auto forward_backward = [&] {
    forward();
    plan.backward(q.view(), k.view(), v.view(), out.view(), lse.view(), dout.view(), dq.view(), dk.view(), dv.view());
  };
  PassTimes times;
  times.forward_ms = time_calls(world, device, options, forward);
  times.forward_backward_ms = time_calls(world, device, options, forward_backward);
  std::size_t tensor_bytes = 0;
  for (const BenchTensor* tensor : {&q, &k, &v, &dout, &out, &dq, &dk, &dv, &lse}) tensor_bytes += tensor->bytes();
  times.peak_mib = peak_mib(world, device, before, tensor_bytes);
  return times;
}

// One cuDNN call over the whole sequence on this rank's GPU, forward and forward+backward, with
// no merge, conversion or plan around it: how much of the ideal's time is cuDNN's own.
PassTimes time_cudnn_alone(Communicator& alone, const AttentionShape& shape, bool causal, const BenchOptions& options) {
  const Device device = alone.device();
  const MemoryStatistics before = memory_statistics(device);
  reset_peak_memory(device);
  const int64_t B = shape.batch, S = shape.seq, H = shape.heads, HK = shape.kv_heads, D = shape.head_dim;
  const BenchTensor q(device, shape.dtype, {B, S, H, D}, 5), k(device, shape.dtype, {B, S, HK, D}, 6),
      v(device, shape.dtype, {B, S, HK, D}, 7), dout(device, shape.dtype, {B, S, H, D}, 8);
  const BenchTensor out(device, shape.dtype, {B, S, H, D}, 0), dq(device, shape.dtype, {B, S, H, D}, 0),
      dk(device, shape.dtype, {B, S, HK, D}, 0), dv(device, shape.dtype, {B, S, HK, D}, 0);
  const BenchTensor stats(device, DType::f32, {B, H, S}, 0);
  cuda::CudnnAttention attention(device, nullptr);
  cuda::CudnnPiece piece;
  piece.q_count = piece.k_count = S;
  if (causal) piece.right_bound = 0;
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  const auto forward = [&] { attention.forward(q.view(), k.view(), v.view(), piece, scale, out.view(), stats.view()); };
  const auto forward_backward = [&] {
    forward();
    attention.backward(q.view(), k.view(), v.view(), out.view(), dout.view(), stats.view(), piece, scale, dq.view(),
                       dk.view(), dv.view());
  };
  PassTimes times;
  times.forward_ms = time_calls(alone, device, options, forward);
  times.forward_backward_ms = time_calls(alone, device, options, forward_backward);
  std::size_t tensor_bytes = 0;
  for (const BenchTensor* tensor : {&q, &k, &v, &dout, &out, &dq, &dk, &dv, &stats}) tensor_bytes += tensor->bytes();
  times.peak_mib = peak_mib(alone, device, before, tensor_bytes);
  return times;
}

// One own-kernel call over the whole sequence, with no merge, conversion or plan around it: the
// forward (out in the input dtype through final_out, as a whole-sequence call writes it), and
// forward+backward where the own backward takes the shape (its fp32 dq, dk, dv zeroed, delta =
// rowsum(dout * out), then the kernel: what a backward of its own needs, as spattn_kernel_bench
// times it). What the plans' own-kernel rows are measured against.
PassTimes time_own_call_alone(Communicator& alone, const AttentionShape& shape, bool causal,
                              const BenchOptions& options) {
  const Device device = alone.device();
  // The zeroing below goes to the legacy stream of the current device, which must be this rank's.
  const cuda::CurrentDeviceGuard guard(device.index);
  const int64_t B = shape.batch, S = shape.seq, H = shape.heads, HK = shape.kv_heads, D = shape.head_dim;
  const BenchTensor q(device, shape.dtype, {B, S, H, D}, 5), k(device, shape.dtype, {B, S, HK, D}, 6),
      v(device, shape.dtype, {B, S, HK, D}, 7), dout(device, shape.dtype, {B, S, H, D}, 8),
      out(device, shape.dtype, {B, S, H, D}, 0);
  const BenchTensor running_out(device, DType::f32, {B, S, H, D}, 0), lse(device, DType::f32, {B, H, S}, 0),
      delta(device, DType::f32, {B, H, S}, 0);
  const BenchTensor dq(device, DType::f32, {B, S, H, D}, 0), dk(device, DType::f32, {B, S, HK, D}, 0),
      dv(device, DType::f32, {B, S, HK, D}, 0);
  const AttentionMask mask{-1, causal ? 0 : -1};
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  ForwardBlock forward_block;
  forward_block.q = q.view();
  forward_block.segments = {KvSegment{k.view(), v.view(), 0}};
  forward_block.mask = mask;
  forward_block.scale = scale;
  forward_block.out = running_out.view();
  forward_block.lse = lse.view();
  forward_block.final_out = out.view();
  const std::string unsupported = cuda::hopper_forward_unsupported(forward_block);
  SPATTN_CHECK(unsupported.empty(), "the own forward: " << unsupported);
  BackwardBlock backward_block;
  backward_block.q = q.view();
  backward_block.segments = {KvGradSegment{KvSegment{k.view(), v.view(), 0}, dk.view(), dv.view()}};
  backward_block.dout = dout.view();
  backward_block.lse = lse.view();
  backward_block.delta = delta.view();
  backward_block.mask = mask;
  backward_block.scale = scale;
  backward_block.dq = dq.view();
  const cuda::hopper::QueryTileCounter tile_counter(device);
  cuda::CudaElementwiseKernels elementwise(device, nullptr);
  const auto forward = [&] { cuda::hopper_forward(forward_block, nullptr, &tile_counter); };
  const auto forward_backward = [&] {
    forward();
    for (const BenchTensor* gradient : {&dq, &dk, &dv})
      SPATTN_CUDA_CHECK(cudaMemsetAsync(gradient->view().data, 0, gradient->bytes(), nullptr));
    elementwise.softmax_delta(out.view(), dout.view(), delta.view());
    cuda::hopper_backward(backward_block, nullptr);
  };
  PassTimes times;
  times.forward_ms = time_calls(alone, device, options, forward);
  if (cuda::hopper_backward_unsupported(backward_block).empty())
    times.forward_backward_ms = time_calls(alone, device, options, forward_backward);
  return times;
}

// `measure` on every rank or on none: when it throws on some rank, every rank drops it (the lowest
// failing rank says why), so that no rank goes on to a collective that another never reaches. A
// rank that a failed one left waiting inside a transfer meets spattn's timeout and fails too.
std::optional<PassTimes> measure_on_every_rank(Communicator& world, const std::string& what,
                                               const std::function<PassTimes()>& measure) {
  PassTimes times;
  int failed = 0;
  std::string why;
  try {
    times = measure();
  } catch (const Error& error) {
    failed = 1;
    why = error.what();
  }
  std::vector<int> everyone(static_cast<std::size_t>(world.size()));
  world.host_all_gather(&failed, everyone.data(), sizeof failed);
  const auto first_failed = std::find(everyone.begin(), everyone.end(), 1);
  if (first_failed == everyone.end()) return times;
  if (first_failed - everyone.begin() == world.rank())
    std::printf("%s (rank %d of %d): %s\n", what.c_str(), world.rank(), world.size(), why.c_str());
  return std::nullopt;
}

double forward_flop(const AttentionShape& shape, bool causal) {
  const double flop = 4.0 * static_cast<double>(shape.batch * shape.heads) * static_cast<double>(shape.seq) *
                      static_cast<double>(shape.seq) * static_cast<double>(shape.head_dim);
  return causal ? flop / 2 : flop;
}

// The forward FLOP of packed documents of `lengths`: each document's on its own.
double document_flop(AttentionShape shape, const std::vector<int64_t>& lengths, bool causal) {
  double flop = 0;
  for (const int64_t length : lengths) {
    shape.seq = length;
    flop += forward_flop(shape, causal);
  }
  return flop;
}

// `count` random document lengths, each at least 1, that sum to `tokens`: the pieces between
// `count` - 1 distinct cut points drawn uniformly (the same on every rank: one seed, one binary).
std::vector<int64_t> random_document_lengths(int64_t tokens, int64_t count, uint64_t seed) {
  SPATTN_CHECK(count <= tokens, "--documents " << count << " is more than the " << tokens << " tokens to pack");
  std::mt19937_64 generator(seed);
  std::uniform_int_distribution<int64_t> cut(1, tokens - 1);
  std::set<int64_t> cuts;
  while (static_cast<int64_t>(cuts.size()) < count - 1) cuts.insert(cut(generator));
  cuts.insert(tokens);
  std::vector<int64_t> lengths;
  int64_t previous = 0;
  for (const int64_t end : cuts) {
    lengths.push_back(end - previous);
    previous = end;
  }
  return lengths;
}

// The most query-key pairs a rank of `algorithm` computes on the packed documents of `attention`
// over the mean (1: equal work). Queries stay on their rank in every strategy that takes
// documents but Ulysses, whose ranks each take an equal share of the heads over every token, and
// usp, whose ranks each take an equal share of the heads over their group's tokens.
double work_per_rank_imbalance(Algorithm algorithm, int ranks, const AttentionOptions& attention,
                               const StrategyOptions& strategy) {
  if (algorithm == Algorithm::ulysses) return 1.0;
  const DocumentLayout layout = plan_document_layout(algorithm, ranks, attention, strategy);
  const AttentionMask mask = AttentionMask::from_options(attention);
  const int per_group = algorithm == Algorithm::usp ? strategy.inner : 1;
  int64_t most = 0, every = 0;
  for (int group = 0; group < ranks / per_group; ++group) {
    int64_t pairs = 0;
    for (int member = 0; member < per_group; ++member) pairs += layout.query_pairs(group * per_group + member, mask);
    most = std::max(most, pairs);
    every += pairs;
  }
  return every > 0 ? static_cast<double>(most) * (ranks / per_group) / static_cast<double>(every) : 1.0;
}

struct Row {
  std::string implementation, algorithm;
  int gpus = 1;
  int64_t tokens_per_gpu = 0, kv_heads = 0;
  bool causal = false;
  std::string pass;
  double ms = 0, tflops = 0, ideal_tflops = 0;
  double peak_mib = 0;  // of forward+backward, on each of its rows
};

void write_header() {
  std::printf("\n%-18s %-10s %4s %8s %4s %6s %-17s %10s %9s %9s %8s %9s\n", "implementation", "algorithm", "gpus",
              "tok/gpu", "HK", "causal", "pass", "ms", "TFLOP/s", "ideal", "% ideal", "peak MiB");
  std::fflush(stdout);
}

// Rows go out as each measurement ends, so that a run stopped at its time limit keeps what it measured.
void write_rows(const BenchOptions& options, const std::vector<Row>& rows) {
  for (const Row& row : rows)
    std::printf("%-18s %-10s %4d %8lld %4lld %6s %-17s %10.3f %9.1f %9.1f %8.1f %9.0f\n", row.implementation.c_str(),
                row.algorithm.c_str(), row.gpus, static_cast<long long>(row.tokens_per_gpu),
                static_cast<long long>(row.kv_heads), row.causal ? "yes" : "no", row.pass.c_str(), row.ms, row.tflops,
                row.ideal_tflops, row.ideal_tflops > 0 ? 100 * row.tflops / row.ideal_tflops : 0.0, row.peak_mib);
  std::fflush(stdout);
  if (options.csv.empty()) return;
  std::ifstream existing(options.csv);
  const bool new_file = !existing.good() || existing.peek() == std::ifstream::traits_type::eof();
  existing.close();
  std::ofstream csv(options.csv, std::ios::app);
  SPATTN_CHECK(csv.good(), "cannot write --csv " << options.csv);
  if (new_file)
    csv << "implementation,algorithm,gpus,device,batch,heads,kv_heads,head_dim,tokens_per_gpu,causal,dtype,pass,ms,"
           "tflops_per_gpu,ideal_tflops,percent_of_ideal,peak_memory_mib\n";
  for (const Row& row : rows) {
    csv << row.implementation << "," << row.algorithm << "," << row.gpus << "," << options.device_name << ","
        << options.batch << "," << options.heads << "," << row.kv_heads << "," << options.head_dim << ","
        << row.tokens_per_gpu << "," << (row.causal ? 1 : 0) << "," << dtype_name(options.dtype) << "," << row.pass
        << "," << row.ms << "," << row.tflops << ",";
    if (row.ideal_tflops > 0)
      csv << row.ideal_tflops << "," << 100 * row.tflops / row.ideal_tflops;
    else
      csv << ",";
    csv << "," << row.peak_mib << "\n";
  }
}

// Rank 0 writes `rows` (write_rows); then they are cleared.
void write_and_clear(Communicator& world, const BenchOptions& options, std::vector<Row>& rows) {
  if (world.rank() == 0) write_rows(options, rows);
  rows.clear();
}

// Which timing runs, on stderr: a run stopped at its time limit says where it was.
void announce(Communicator& world, const std::string& what, bool causal, int64_t seq) {
  if (world.rank() == 0)
    std::fprintf(stderr, "timing %s, %s, %lld tokens\n", what.c_str(), causal ? "causal" : "no mask",
                 static_cast<long long>(seq));
}

// The rows of `measured` (forward and forward+backward; a pass not timed has none) like `common`,
// for `flop` forward FLOP over its GPUs, against the ideal's times where it has them.
void add_rows(std::vector<Row>& rows, const Row& common, const PassTimes& measured, double flop,
              const PassTimes& ideal) {
  for (const auto& [pass, ms, ideal_ms, factor] :
       {std::make_tuple("forward", measured.forward_ms, ideal.forward_ms, 1.0),
        std::make_tuple("forward+backward", measured.forward_backward_ms, ideal.forward_backward_ms, 3.5)}) {
    if (ms <= 0) continue;
    Row row = common;
    row.pass = pass;
    row.ms = ms;
    row.tflops = factor * flop / (ms * 1e-3) * 1e-12 / row.gpus;
    row.ideal_tflops = ideal_ms > 0 ? factor * flop / (ideal_ms * 1e-3) * 1e-12 : 0;
    row.peak_mib = measured.peak_mib;
    rows.push_back(row);
  }
}

// The ideal: the whole sequence of `shape` on one GPU (each rank alone, `alone`), with `attention`'s
// mask, documents and kernels, as row `name` of `flop` forward FLOP; zero times where it fails (for
// want of memory, on every rank alike).
PassTimes time_ideal(Communicator& world, Communicator& alone, const BenchOptions& options, const AttentionShape& shape,
                     const AttentionOptions& attention, const std::string& name, double flop) {
  announce(world, name, attention.causal, shape.seq);
  const PassTimes ideal = measure_on_every_rank(world, name, [&] {
                            return time_strategy(alone, alone, Algorithm::ring, shape, attention, options);
                          }).value_or(PassTimes{});
  std::vector<Row> rows;
  add_rows(rows, Row{name, "local", 1, shape.seq, shape.kv_heads, attention.causal}, ideal, flop, PassTimes{});
  write_and_clear(world, options, rows);
  return ideal;
}

// The packed-documents rows of one sequence `shape` (see --documents at the top): one GPU on all
// the documents, each strategy on them with its work per rank, and spattn's ring of the same
// tokens without documents, all at the documents' FLOP.
void time_documents(Communicator& world, Communicator& communicator, Communicator& alone, const BenchOptions& options,
                    const AttentionShape& shape, AttentionOptions attention, const std::string& spattn_name,
                    int64_t tokens_per_gpu) {
  const int gpus = world.size();
  const bool causal = attention.causal;
  attention.document_lengths = random_document_lengths(shape.seq, options.documents, options.document_seed);
  const double flop = document_flop(shape, attention.document_lengths, causal);
  if (world.rank() == 0) {
    std::printf("documents of %lld tokens:", static_cast<long long>(shape.seq));
    for (const int64_t length : attention.document_lengths) std::printf(" %lld", static_cast<long long>(length));
    std::printf("\n");
  }
  const std::string name = spattn_name + "_documents";
  std::vector<Row> rows;
  const PassTimes ideal =
      options.ideal ? time_ideal(world, alone, options, shape, attention, name + "_one_gpu", flop) : PassTimes{};
  // All-gather also runs over the whole sequence (Llama 3's split: contiguous stretches, documents
  // cut wherever the stretches end), the split that llama3_flash_attn_varlen_func users get.
  std::vector<std::pair<std::string, DocumentSplit>> entries;
  for (const std::string& algorithm_name : options.algorithms) {
    entries.emplace_back(algorithm_name, DocumentSplit::per_document);
    if (parse_algorithm(algorithm_name) == Algorithm::allgather)
      entries.emplace_back(algorithm_name, DocumentSplit::whole_sequence);
  }
  for (const auto& [algorithm_name, split] : entries) {
    const Algorithm algorithm = parse_algorithm(algorithm_name);
    AttentionOptions split_attention = attention;
    split_attention.document_split = split;
    const std::string label =
        split == DocumentSplit::per_document ? algorithm_name : algorithm_name + "_" + document_split_name(split);
    if (!documents_unsupported(algorithm, attention.document_lengths, split).empty()) {
      if (world.rank() == 0) std::printf("%s takes no packed documents\n", label.c_str());
      continue;
    }
    const StrategyOptions strategy = resolved_strategy_options(algorithm, gpus, shape, {});
    AttentionShape padded = shape;
    padded.seq = plan_document_layout(algorithm, gpus, split_attention, strategy).sequence_layout().global_length();
    announce(world, name + " " + label, causal, padded.seq);
    const std::optional<PassTimes> measured = measure_on_every_rank(
        world, label, [&] { return time_strategy(world, communicator, algorithm, padded, split_attention, options); });
    if (!measured) continue;
    if (world.rank() == 0)
      std::printf("%s work per rank: the most over the mean %.4f (%lld tokens of padding)\n", label.c_str(),
                  work_per_rank_imbalance(algorithm, gpus, split_attention, strategy),
                  static_cast<long long>(padded.seq - shape.seq));
    add_rows(rows, Row{name, label, gpus, tokens_per_gpu, shape.kv_heads, causal}, *measured, flop, ideal);
    write_and_clear(world, options, rows);
  }
  // The ring that knows no documents: the whole sequence under the mask alone.
  AttentionOptions plain = attention;
  plain.document_lengths.clear();
  announce(world, spattn_name + " ring without documents", causal, shape.seq);
  const std::optional<PassTimes> measured = measure_on_every_rank(world, "ring without documents", [&] {
    return time_strategy(world, communicator, Algorithm::ring, shape, plain, options);
  });
  if (!measured) return;
  add_rows(rows, Row{spattn_name, "ring", gpus, tokens_per_gpu, shape.kv_heads, causal}, *measured, flop, ideal);
  write_and_clear(world, options, rows);
}

// The plans' rows of one configuration with `kernel` as their block kernels: one GPU on the whole
// sequence (the ideal), one GPU on one rank's shard, then every strategy (packed documents: their
// own rows). Rows are named spattn, or spattn_<kernel> when the kernels are not the default choice.
void time_plans(Communicator& world, Communicator& communicator, Communicator& alone, const BenchOptions& options,
                const AttentionShape& shape, bool causal, KernelChoice kernel, int64_t tokens) {
  AttentionOptions attention;
  attention.causal = causal;
  attention.kernel = kernel;
  const std::string spattn_name = kernel == KernelChoice::automatic ? "spattn" : "spattn_" + kernel_choice_name(kernel);
  if (options.documents > 0) {
    time_documents(world, communicator, alone, options, shape, attention, spattn_name, tokens);
    return;
  }
  const int gpus = world.size();
  const double flop = forward_flop(shape, causal);
  std::vector<Row> rows;
  const PassTimes ideal =
      options.ideal ? time_ideal(world, alone, options, shape, attention, spattn_name + "_one_gpu", flop) : PassTimes{};
  // One GPU on one rank's shard alone (tokens per GPU, no communication): what each strategy's
  // time and memory per GPU compare with.
  const AttentionShape shard{shape.batch, tokens, shape.heads, shape.kv_heads, shape.head_dim, shape.dtype};
  announce(world, spattn_name + "_local_shard", causal, tokens);
  const PassTimes local = measure_on_every_rank(world, "the local shard", [&] {
                            return time_strategy(alone, alone, Algorithm::ring, shard, attention, options);
                          }).value_or(PassTimes{});
  add_rows(rows, Row{spattn_name + "_local_shard", "local", 1, tokens, shape.kv_heads, causal}, local,
           forward_flop(shard, causal), PassTimes{});
  write_and_clear(world, options, rows);
  for (const std::string& name : options.algorithms) {
    announce(world, spattn_name + " " + name, causal, shape.seq);
    // A refused plan (e.g. hamilton at 4 ranks) is refused on every rank alike.
    const std::optional<PassTimes> measured = measure_on_every_rank(world, name, [&] {
      return time_strategy(world, communicator, parse_algorithm(name), shape, attention, options);
    });
    if (!measured) continue;
    add_rows(rows, Row{spattn_name, name, gpus, tokens, shape.kv_heads, causal}, *measured, flop, ideal);
    write_and_clear(world, options, rows);
  }
}

int run(int argc, char** argv) {
  const BenchOptions options = parse(argc, argv);
  MpiCommunicator world;
  const DevicePlacement placement = place_on_devices(world, DeviceKind::cuda, parse_transport(options.transport));
  const std::unique_ptr<Communicator> communicator = make_device_communicator(world, placement);
  // The ideal: each rank alone on its GPU (a communicator of one rank), rank 0's time reported.
  const std::unique_ptr<Communicator> alone = communicator->split(communicator->rank(), 0);
  const int gpus = world.size();
  if (world.rank() == 0)
    std::printf("spattn_gpu_bench: %d rank(s) over %s, %d rank(s) per GPU; warmup %d, iters %d, calls %s\n", gpus,
                transport_name(placement.transport).c_str(), placement.ranks_per_device, options.warmup,
                options.iterations, options.calls_apart ? "apart" : "back to back");
  if (world.rank() == 0) write_header();

  for (const int64_t kv_heads : options.kv_heads) {
    for (const bool causal : options.causal) {
      for (const int64_t tokens : options.tokens_per_gpu) {
        const AttentionShape shape{options.batch, tokens * gpus,    options.heads,
                                   kv_heads,      options.head_dim, options.dtype};
        const double flop = forward_flop(shape, causal);
        if (options.ideal && options.documents == 0) {
          // One kernel call over the whole sequence, whatever the plans' kernels: may fail for want
          // of memory.
          std::vector<Row> rows;
          announce(world, "cudnn_call_one_gpu", causal, shape.seq);
          const PassTimes cudnn = measure_on_every_rank(world, "cuDNN alone", [&] {
                                    return time_cudnn_alone(*alone, shape, causal, options);
                                  }).value_or(PassTimes{});
          announce(world, "own_call_one_gpu", causal, shape.seq);
          const PassTimes own = measure_on_every_rank(world, "the own kernel alone", [&] {
                                  return time_own_call_alone(*alone, shape, causal, options);
                                }).value_or(PassTimes{});
          add_rows(rows, Row{"cudnn_call_one_gpu", "local", 1, shape.seq, kv_heads, causal}, cudnn, flop, PassTimes{});
          add_rows(rows, Row{"own_call_one_gpu", "local", 1, shape.seq, kv_heads, causal}, own, flop, PassTimes{});
          write_and_clear(world, options, rows);
        }
        for (const KernelChoice kernel : options.kernels)
          time_plans(world, *communicator, *alone, options, shape, causal, kernel, tokens);
      }
    }
  }
  return 0;
}

}  // namespace
}  // namespace spattn

int main(int argc, char** argv) {
  try {
    return spattn::run(argc, argv);
  } catch (const spattn::Error& error) {
    std::fprintf(stderr, "%s\n", error.what());
    return 1;
  }
}
