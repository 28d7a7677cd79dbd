// Attention on one GPU by kernel and pass: spattn's own Hopper kernels on the whole sequence as one
// block against spattn's cuDNN path on the single piece it cuts the same call into. PyTorch's
// SDPA backends append their rows to the same CSV (bench/kernel_sdpa.py);
// bench/plot_kernel_results.py draws and tabulates them per pass.
//
//   spattn_kernel_bench [--passes forward,backward,forward+backward] [--seqs 1024,2048,4096,8192,16384,32768]
//       [--head-dims 64,128] [--causal both|yes|no]
//       [--kernels own,own_fp32_out,own_merge,cudnn,own_deterministic,cudnn_deterministic] [--heads 32]
//       [--kv-heads 32] [--dtype bf16|fp16] [--warmup 3] [--iters 10] [--repeats 5] [--csv PATH]
//       [--sustain SECONDS [--windows PATH]]
//
// One timed call of each (pass, kernel) holds exactly:
//   forward   own           hopper_forward of one ForwardBlock, out in the input dtype through
//                           final_out (as a call on the whole sequence writes it), fp32 lse
//             own_fp32_out  the same with fp32 out (as every block but a chunk's last inside a
//                           distributed step writes it); this pass only
//             own_merge     the same merged into a running result (fp32 out and lse, accumulate)
//                           and written in the input dtype, as the last block of a chunk's rows
//                           inside a distributed step does; this pass only
//             cudnn         CudnnAttention::forward: out in the input dtype, fp32 lse
//   backward  own           what a backward of its own needs from out and lse: a cudaMemsetAsync
//                           of each of the fp32 dq, dk, dv to 0 (the kernel adds into them), the
//                           CUDA block kernels' softmax_delta (delta = rowsum(dout * out), fp32),
//                           hopper_backward of one BackwardBlock. dq, dk, dv stay in fp32: no
//                           conversion to the input dtype follows
//             cudnn         CudnnAttention::backward: dq, dk, dv written in the input dtype (cuDNN
//                           recomputes delta itself)
//             Both read the same out (input dtype) and lse, which cuDNN's forward made for each
//             input set before timing.
//             own_deterministic, cudnn_deterministic  the same in deterministic mode
//                           (AttentionOptions::deterministic: the own backward with its dQ turn
//                           counters, zeroed by the call; cuDNN's deterministic algorithm); not
//                           in the forward pass, which is deterministic either way
//   forward+backward        the kernel's forward (own: `own`'s, out in the input dtype), then its
//                           backward as above from that forward's out and lse
//
// Each case holds 16k x heads query rows or more (batch = max(1, 16384 / S)). Before timing, the
// own kernels are compared with cuDNN on the same inputs, into NaN-poisoned outputs (a benchmark
// of a wrong kernel is worthless; exit 1 beyond the bounds): where a pass has a forward, out and
// lse (2e-2 of the largest |out|, 1e-2 in lse); where a pass has a backward, dq, dk and dv (2e-2
// of each one's largest |value|). Time: the median over --repeats of --iters back-to-back calls
// between two CUDA events, after --warmup calls, alternating between two input sets so that small
// problems do not run from L2, every (pass, kernel) taking turns within each repeat. FLOP by the
// flash-attention convention: a forward 4 B H S^2 D, half of it causal; a backward 2.5 forwards,
// forward+backward 3.5.
//
// With --sustain, each (pass, kernel) instead runs alone, back to back, for that many seconds
// (after --warmup calls; timed in runs of --iters calls between two events), and its time is the
// mean over all of them: the rate a training step's kernels keep once the GPU's power cap holds
// its clock down, which short alternating repeats do not reach. --windows then writes each run's
// wall-clock window in nvidia-smi's timestamp format (local time), so that the GPU's power and
// clock samples can be told apart by kernel (bench/power_by_window.py).
//
// CSV columns: kernel,pass,causal,seq,head_dim,heads,kv_heads,dtype,ms,tflops (causal 0 or 1;
// pass forward, backward or forward+backward). Windows CSV columns: kernel,pass,causal,seq,
// head_dim,start,end,ms,tflops.

#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <functional>
#include <initializer_list>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "bench_options.hpp"
#include "bench_tensor.hpp"
#include "kernels/cuda/cuda_elementwise_kernels.hpp"
#include "kernels/cuda/cudnn_attention.hpp"
#include "kernels/hopper/hopper_backward.hpp"
#include "kernels/hopper/hopper_forward.hpp"
#include "spattn/device_memory.hpp"
#include "spattn/error.hpp"

namespace spattn {
namespace {

enum class Pass { forward, backward, forward_backward };

const std::vector<Pass> kAllPasses = {Pass::forward, Pass::backward, Pass::forward_backward};

const char* pass_name(Pass pass) {
  switch (pass) {
    case Pass::forward:
      return "forward";
    case Pass::backward:
      return "backward";
    case Pass::forward_backward:
      return "forward+backward";
  }
  return "";
}

bool has_forward(Pass pass) { return pass != Pass::backward; }
bool has_backward(Pass pass) { return pass != Pass::forward; }

/// A kernel the bench times (--kernels), with what sets its calls apart.
struct BenchKernel {
  const char* name;
  bool own;            // spattn's own Hopper kernels; else cuDNN
  bool fp32_out;       // the own forward with fp32 out (a distributed step's blocks): the forward pass only
  bool deterministic;  // AttentionOptions::deterministic: passes with a backward only (a forward is either way)
  bool merges;         // the own forward merging into a running result: the forward pass only
};

constexpr BenchKernel kBenchKernels[] = {{"own", true, false, false, false},
                                         {"own_fp32_out", true, true, false, false},
                                         {"own_merge", true, false, false, true},
                                         {"cudnn", false, false, false, false},
                                         {"own_deterministic", true, false, true, false},
                                         {"cudnn_deterministic", false, false, true, false}};

const BenchKernel& bench_kernel(const std::string& name) {
  for (const BenchKernel& kernel : kBenchKernels)
    if (name == kernel.name) return kernel;
  std::string names;
  for (const BenchKernel& kernel : kBenchKernels) names += std::string(names.empty() ? "" : ", ") + kernel.name;
  SPATTN_FAIL("--kernels takes " << names << ", got '" << name << "'");
}

/// Whether `kernel` has a call in `pass`.
bool runs_in(const BenchKernel& kernel, Pass pass) {
  if (kernel.fp32_out || kernel.merges) return pass == Pass::forward;
  if (kernel.deterministic) return has_backward(pass);
  return true;
}

/// A pass's FLOP in forwards (flash-attention's convention: a backward does 2.5 forwards' worth).
double forwards_in(Pass pass) { return (has_forward(pass) ? 1.0 : 0.0) + (has_backward(pass) ? 2.5 : 0.0); }

struct KernelBenchOptions {
  std::vector<Pass> passes = kAllPasses;
  std::vector<int64_t> seqs = {1024, 2048, 4096, 8192, 16384, 32768};
  std::vector<int64_t> head_dims = {64, 128};
  std::vector<bool> causal = {false, true};
  std::vector<std::string> kernels = {"own", "own_fp32_out", "cudnn"};
  int64_t heads = 32;
  int64_t kv_heads = 32;
  DType dtype = DType::bf16;
  int warmup = 3;
  int iterations = 10;
  int repeats = 5;
  int64_t sustain_seconds = 0;  // 0: alternating repeats; else each call alone for this long
  std::string csv;
  std::string windows_csv;  // with sustain_seconds: each call's wall-clock window

  bool any_pass(bool (*has)(Pass)) const { return std::any_of(passes.begin(), passes.end(), has); }
  bool any_kernel(bool (*is)(const BenchKernel&)) const {
    return std::any_of(kernels.begin(), kernels.end(),
                       [is](const std::string& name) { return is(bench_kernel(name)); });
  }
};

std::vector<Pass> parse_passes(const std::string& text) {
  std::vector<Pass> passes;
  for (const std::string& name : split_list(text)) {
    const auto pass = std::find_if(kAllPasses.begin(), kAllPasses.end(), [&](Pass p) { return name == pass_name(p); });
    SPATTN_CHECK(pass != kAllPasses.end(),
                 "--passes takes forward, backward and forward+backward, got '" << name << "'");
    passes.push_back(*pass);
  }
  SPATTN_CHECK(!passes.empty(), "--passes expects at least one pass");
  return passes;
}

KernelBenchOptions parse(int argc, char** argv) {
  KernelBenchOptions options;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    const auto value = [&]() -> std::string {
      SPATTN_CHECK(i + 1 < argc, "missing value after " << flag);
      return argv[++i];
    };
    if (flag == "--passes") {
      options.passes = parse_passes(value());
    } else if (flag == "--seqs") {
      options.seqs = parse_counts(flag, value());
    } else if (flag == "--head-dims") {
      options.head_dims = parse_counts(flag, value());
    } else if (flag == "--causal") {
      const std::string which = value();
      SPATTN_CHECK(which == "both" || which == "yes" || which == "no",
                   "--causal expects both, yes or no, got '" << which << "'");
      options.causal = which == "both" ? std::vector<bool>{false, true} : std::vector<bool>{which == "yes"};
    } else if (flag == "--kernels") {
      options.kernels = split_list(value());
      for (const std::string& kernel : options.kernels) bench_kernel(kernel);  // refuses an unknown name
    } else if (flag == "--heads") {
      options.heads = parse_counts(flag, value()).front();
    } else if (flag == "--kv-heads") {
      options.kv_heads = parse_counts(flag, value()).front();
    } else if (flag == "--dtype") {
      options.dtype = parse_dtype(value());
      SPATTN_CHECK(options.dtype != DType::f32, "--dtype: the GPU kernels take bf16 or fp16");
    } else if (flag == "--warmup") {
      options.warmup = static_cast<int>(parse_counts(flag, value()).front());
    } else if (flag == "--iters") {
      options.iterations = static_cast<int>(parse_counts(flag, value()).front());
    } else if (flag == "--repeats") {
      options.repeats = static_cast<int>(parse_counts(flag, value()).front());
    } else if (flag == "--csv") {
      options.csv = value();
    } else if (flag == "--sustain") {
      options.sustain_seconds = parse_counts(flag, value()).front();
    } else if (flag == "--windows") {
      options.windows_csv = value();
    } else {
      SPATTN_FAIL("unknown option '" << flag << "'; see the comment at the top of bench/kernel_bench.cpp");
    }
  }
  SPATTN_CHECK(options.heads % options.kv_heads == 0,
               "--heads " << options.heads << " must be a multiple of --kv-heads " << options.kv_heads);
  SPATTN_CHECK(options.windows_csv.empty() || options.sustain_seconds > 0,
               "--windows " << options.windows_csv << " needs --sustain (the windows are the sustained runs')");
  return options;
}

#define BENCH_CUDA_CHECK(call)                                                               \
  do {                                                                                       \
    const cudaError_t status = (call);                                                       \
    SPATTN_CHECK(status == cudaSuccess, #call << " failed: " << cudaGetErrorString(status)); \
  } while (false)

/// Two CUDA events that time runs of calls on a stream.
class CallTimer {
 public:
  explicit CallTimer(cudaStream_t stream) : stream_(stream) {
    BENCH_CUDA_CHECK(cudaEventCreate(&start_));
    BENCH_CUDA_CHECK(cudaEventCreate(&stop_));
  }
  ~CallTimer() {
    cudaEventDestroy(start_);
    cudaEventDestroy(stop_);
  }
  CallTimer(const CallTimer&) = delete;
  CallTimer& operator=(const CallTimer&) = delete;

  /// Milliseconds of `count` back-to-back calls of `call` (input sets alternating 0, 1).
  double run_ms(const std::function<void(int)>& call, int count) const {
    BENCH_CUDA_CHECK(cudaEventRecord(start_, stream_));
    for (int i = 0; i < count; ++i) call(i % 2);
    BENCH_CUDA_CHECK(cudaEventRecord(stop_, stream_));
    BENCH_CUDA_CHECK(cudaEventSynchronize(stop_));
    float ms = 0;
    BENCH_CUDA_CHECK(cudaEventElapsedTime(&ms, start_, stop_));
    return ms;
  }

 private:
  cudaStream_t stream_;
  cudaEvent_t start_, stop_;
};

/// The time of one (pass, kernel) call, and with --sustain the wall-clock window it ran in.
struct CallTime {
  double ms = 0;
  std::string window_start, window_end;  // nvidia-smi's timestamp format, local time; empty without --sustain
};

/// Now in nvidia-smi's --query-gpu timestamp format ("2026/11/29 00:41:54.551", local time).
std::string wall_clock_now() {
  const auto now = std::chrono::system_clock::now();
  const std::time_t seconds = std::chrono::system_clock::to_time_t(now);
  const auto milliseconds =
      std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000;
  std::tm local{};
  localtime_r(&seconds, &local);
  char text[32];
  const std::size_t length = std::strftime(text, sizeof text, "%Y/%m/%d %H:%M:%S", &local);
  std::snprintf(text + length, sizeof text - length, ".%03lld", static_cast<long long>(milliseconds));
  return text;
}

/// Median milliseconds per call of each of `calls` over `repeats` runs of `iterations` calls, after
/// `warmup` calls of each. The kernels take turns within every repeat, so that a slower minute of
/// the GPU (clocks, temperature) falls on all of them alike.
std::vector<CallTime> median_ms(const KernelBenchOptions& options, const CallTimer& timer,
                                const std::vector<std::function<void(int)>>& calls) {
  for (const auto& call : calls)
    for (int i = 0; i < options.warmup; ++i) call(i % 2);
  std::vector<std::vector<double>> times(calls.size());
  for (int repeat = 0; repeat < options.repeats; ++repeat)
    for (std::size_t kernel = 0; kernel < calls.size(); ++kernel)
      times[kernel].push_back(timer.run_ms(calls[kernel], options.iterations) / options.iterations);
  std::vector<CallTime> medians;
  for (std::vector<double>& kernel_times : times) {
    std::sort(kernel_times.begin(), kernel_times.end());
    medians.push_back({kernel_times[kernel_times.size() / 2], "", ""});
  }
  return medians;
}

/// Mean milliseconds per call of each of `calls`, each alone after its `warmup` calls, in runs of
/// `iterations` calls until `sustain_seconds` of GPU time have passed, with its wall-clock window.
std::vector<CallTime> sustained_ms(const KernelBenchOptions& options, const CallTimer& timer,
                                   const std::vector<std::function<void(int)>>& calls) {
  std::vector<CallTime> means;
  for (const auto& call : calls) {
    for (int i = 0; i < options.warmup; ++i) call(i % 2);
    CallTime time;
    time.window_start = wall_clock_now();
    double total_ms = 0;
    int64_t count = 0;
    while (total_ms < 1e3 * static_cast<double>(options.sustain_seconds)) {
      total_ms += timer.run_ms(call, options.iterations);
      count += options.iterations;
    }
    time.window_end = wall_clock_now();
    time.ms = total_ms / static_cast<double>(count);
    means.push_back(time);
  }
  return means;
}

/// A device tensor read back as fp64 values.
std::vector<double> download(const TensorView& tensor) {
  std::vector<unsigned char> bytes(static_cast<std::size_t>(tensor.numel()) * dtype_size(tensor.dtype));
  copy_bytes(tensor.data, tensor.device, bytes.data(), Device::cpu(), bytes.size());
  std::vector<double> values(static_cast<std::size_t>(tensor.numel()));
  for (std::size_t i = 0; i < values.size(); ++i) {
    if (tensor.dtype == DType::f32) {
      float value;
      std::memcpy(&value, bytes.data() + 4 * i, 4);
      values[i] = value;
    } else {
      uint16_t bits;
      std::memcpy(&bits, bytes.data() + 2 * i, 2);
      values[i] = tensor.dtype == DType::bf16 ? bf16_to_float(bits) : fp16_to_float(bits);
    }
  }
  return values;
}

/// How far a kernel's tensor lies from cuDNN's of the same shape.
struct Difference {
  double error = 0;       // largest |value - reference|
  double largest = 0;     // largest |reference|
  int64_t unwritten = 0;  // elements left NaN by the poison on either side

  bool within(double fraction_of_largest) const { return unwritten == 0 && error <= fraction_of_largest * largest; }
};

/// `offset`: what `values` should exceed `reference` by.
Difference difference(const TensorView& values, const TensorView& reference, double offset = 0) {
  const std::vector<double> value = download(values), expected = download(reference);
  Difference result;
  for (std::size_t i = 0; i < value.size(); ++i) {
    result.unwritten += std::isnan(value[i]) || std::isnan(expected[i]);
    result.largest = std::max(result.largest, std::abs(expected[i]));
    result.error = std::max(result.error, std::abs(value[i] - offset - expected[i]));
  }
  return result;
}

/// A tensor in device memory of its own.
class DeviceTensor {
 public:
  DeviceTensor(const Device& device, DType dtype, std::initializer_list<int64_t> shape)
      : view_(TensorView::contiguous(nullptr, dtype, shape, device)),
        memory_(device, static_cast<std::size_t>(view_.numel()) * dtype_size(dtype)) {
    view_.data = memory_.data();
  }
  const TensorView& view() const { return view_; }

  /// Sets every byte to `byte` on `stream`: 0 zeroes, 0xff makes every fp32, bf16 and fp16 element NaN.
  void set_bytes(int byte, cudaStream_t stream) const {
    BENCH_CUDA_CHECK(cudaMemsetAsync(memory_.data(), byte, memory_.bytes(), stream));
  }

 private:
  TensorView view_;
  DeviceMemory memory_;
};

/// An attention's result, what a backward reads of its forward.
struct AttentionOutput {
  DeviceTensor out;  // (B, S, H, D) input dtype
  DeviceTensor lse;  // (B, H, S) fp32
};

/// What the kernels read; a case holds two of them, used in turns.
struct InputSet {
  BenchTensor q, k, v, dout;  // q, dout (B, S, H, D); k, v (B, S, HK, D)
  AttentionOutput attention;  // of q, k, v by cuDNN's forward: what the backward pass alone reads
};

struct Gradients {
  DeviceTensor dq;      // (B, S, H, D)
  DeviceTensor dk, dv;  // (B, S, HK, D)
};

/// What every case calls, on one stream.
struct BenchKernels {
  BenchKernels(const Device& on_device, cudaStream_t on_stream)
      : device(on_device),
        stream(on_stream),
        cudnn(on_device, on_stream),
        cudnn_deterministic(on_device, on_stream),
        tile_counter(on_device),
        query_grad_turns(on_device),
        elementwise(on_device, on_stream) {
    cudnn_deterministic.set_deterministic_backward(true);
  }

  Device device;
  cudaStream_t stream;
  cuda::CudnnAttention cudnn;
  cuda::CudnnAttention cudnn_deterministic;           // its deterministic backward algorithm
  const cuda::hopper::QueryTileCounter tile_counter;  // of the own forward's launches
  cuda::hopper::QueryGradTurns query_grad_turns;      // of the deterministic own backward
  cuda::CudaElementwiseKernels elementwise;           // softmax_delta before the own backward
};

/// One case (head dim, mask, sequence length): its tensors, its kernels' calls and their check.
/// Every call enqueues on the stream and takes the input set, 0 or 1.
class KernelCase {
 public:
  KernelCase(const KernelBenchOptions& options, BenchKernels& kernels, int64_t seq, int64_t head_dim, bool causal)
      : options_(options),
        kernels_(kernels),
        batch_(std::max<int64_t>(1, 16384 / seq)),
        seq_(seq),
        head_dim_(head_dim),
        causal_(causal),
        mask_{-1, causal ? 0 : -1},
        scale_(1.0f / std::sqrt(static_cast<float>(head_dim))) {
    const std::vector<cuda::CudnnPiece> pieces = cuda::plan_cudnn_pieces(seq, 0, seq, 0, mask_);
    SPATTN_CHECK(pieces.size() == 1, "cuDNN takes this call in " << pieces.size() << " pieces, not one");
    piece_ = pieces.front();
    sets_.reserve(2);
    for (int set = 0; set < 2; ++set) {
      const auto random = [&](int64_t heads, uint64_t seed) {
        return BenchTensor(kernels.device, options.dtype, {batch_, seq_, heads, head_dim_}, 10 * set + seed);
      };
      sets_.push_back({random(options.heads, 1), random(options.kv_heads, 2), random(options.kv_heads, 3),
                       random(options.heads, 4), attention_output()});
    }
    own_forward_unsupported_ = cuda::hopper_forward_unsupported(own_forward_block(0, false));
    own_backward_unsupported_ = cuda::hopper_backward_unsupported(own_backward_block(0, sets_[0].attention.lse));
  }

  int64_t batch() const { return batch_; }

  /// "" when the own kernels run `pass` on this case; otherwise why not.
  std::string own_unsupported(Pass pass) const {
    if (has_forward(pass) && !own_forward_unsupported_.empty()) return "forward: " + own_forward_unsupported_;
    if (has_backward(pass) && !own_backward_unsupported_.empty()) return "backward: " + own_backward_unsupported_;
    return "";
  }

  /// Makes the backward pass's inputs (cuDNN's forward of every input set), then compares the own
  /// kernels with cuDNN's where they run one of the options' passes; false where they disagree.
  bool prepare_and_check() {
    bool agrees = true;
    if (options_.any_pass(has_forward) && own_forward_unsupported_.empty()) {
      agrees &= check_forward();
      if (options_.any_kernel([](const BenchKernel& kernel) { return kernel.merges; })) agrees &= check_merge();
    }
    if (!options_.any_pass(has_backward)) return agrees;
    for (int set = 0; set < 2; ++set) cudnn_forward(set, sets_[set].attention);
    if (own_backward_unsupported_.empty()) agrees &= check_backward();
    return agrees;
  }

  /// One timed call of `kernel` in `pass`: see the header comment. A backward after a forward reads
  /// that forward's out and lse; the backward pass alone reads the input set's, made before timing.
  std::function<void(int)> call(const BenchKernel& kernel, Pass pass) const {
    const bool deterministic = kernel.deterministic;
    if (kernel.merges) return [this](int set) { own_merge_forward(set); };
    if (!kernel.own)
      return [this, pass, deterministic](int set) {
        if (has_forward(pass)) cudnn_forward(set, cudnn_output_);
        if (has_backward(pass))
          cudnn_backward(set, has_forward(pass) ? cudnn_output_ : sets_[set].attention, deterministic);
      };
    const bool final_out = !kernel.fp32_out;
    return [this, pass, final_out, deterministic](int set) {
      if (has_forward(pass)) own_forward(set, final_out);
      if (has_backward(pass)) own_backward(set, has_forward(pass) ? own_output_ : sets_[set].attention, deterministic);
    };
  }

 private:
  DeviceTensor query_rows(DType dtype) const {
    return DeviceTensor(kernels_.device, dtype, {batch_, seq_, options_.heads, head_dim_});
  }
  DeviceTensor key_rows(DType dtype) const {
    return DeviceTensor(kernels_.device, dtype, {batch_, seq_, options_.kv_heads, head_dim_});
  }
  DeviceTensor row_statistics() const {
    return DeviceTensor(kernels_.device, DType::f32, {batch_, options_.heads, seq_});
  }
  AttentionOutput attention_output() const { return {query_rows(options_.dtype), row_statistics()}; }
  Gradients gradients(DType dtype) const { return {query_rows(dtype), key_rows(dtype), key_rows(dtype)}; }

  /// The own forward's block: fp32 out into own_fp32_out_, or with `final_out` into
  /// own_output_.out in the input dtype; lse into own_output_.lse. With `accumulate` it merges into
  /// the running result that own_fp32_out_ and own_output_.lse hold.
  ForwardBlock own_forward_block(int set, bool final_out, bool accumulate = false) const {
    const InputSet& input = sets_[set];
    ForwardBlock block;
    block.q = input.q.view();
    block.segments = {KvSegment{input.k.view(), input.v.view(), 0}};
    block.mask = mask_;
    block.scale = scale_;
    block.out = own_fp32_out_.view();
    block.lse = own_output_.lse.view();
    if (final_out) block.final_out = own_output_.out.view();
    block.accumulate = accumulate;
    return block;
  }

  /// The own backward's block given the forward's `lse`; its out stays empty (the own backward
  /// reads delta_, never out).
  BackwardBlock own_backward_block(int set, const DeviceTensor& lse) const {
    const InputSet& input = sets_[set];
    BackwardBlock block;
    block.q = input.q.view();
    block.segments = {KvGradSegment{KvSegment{input.k.view(), input.v.view(), 0}, own_gradients_.dk.view(),
                                    own_gradients_.dv.view()}};
    block.dout = input.dout.view();
    block.lse = lse.view();
    block.delta = delta_.view();
    block.mask = mask_;
    block.scale = scale_;
    block.dq = own_gradients_.dq.view();
    return block;
  }

  void own_forward(int set, bool final_out) const {
    cuda::hopper_forward(own_forward_block(set, final_out), kernels_.stream, &kernels_.tile_counter);
  }

  /// Merges the set's attention into the running result and writes out in the input dtype. The
  /// running fp32 out is left as it was and lse grows by the merge: repeated calls stay finite.
  void own_merge_forward(int set) const {
    cuda::hopper_forward(own_forward_block(set, true, true), kernels_.stream, &kernels_.tile_counter);
  }

  void cudnn_forward(int set, const AttentionOutput& into) const {
    const InputSet& input = sets_[set];
    kernels_.cudnn.forward(input.q.view(), input.k.view(), input.v.view(), piece_, scale_, into.out.view(),
                           into.lse.view());
  }

  /// A backward of its own from `attention`: dq, dk, dv zeroed (the kernel adds into them), delta
  /// = rowsum(dout * out), then the kernel (deterministic: with the turn counters).
  void own_backward(int set, const AttentionOutput& attention, bool deterministic = false) const {
    for (const DeviceTensor* gradient : {&own_gradients_.dq, &own_gradients_.dk, &own_gradients_.dv})
      gradient->set_bytes(0, kernels_.stream);
    kernels_.elementwise.softmax_delta(attention.out.view(), sets_[set].dout.view(), delta_.view());
    cuda::hopper_backward(own_backward_block(set, attention.lse), kernels_.stream,
                          deterministic ? &kernels_.query_grad_turns : nullptr);
  }

  void cudnn_backward(int set, const AttentionOutput& attention, bool deterministic = false) const {
    const InputSet& input = sets_[set];
    (deterministic ? kernels_.cudnn_deterministic : kernels_.cudnn)
        .backward(input.q.view(), input.k.view(), input.v.view(), attention.out.view(), input.dout.view(),
                  attention.lse.view(), piece_, scale_, cudnn_gradients_.dq.view(), cudnn_gradients_.dk.view(),
                  cudnn_gradients_.dv.view());
  }

  /// The own forward's fp32 out and lse against cuDNN's, on input set 0.
  bool check_forward() const {
    for (const DeviceTensor* output : {&own_fp32_out_, &own_output_.lse, &cudnn_output_.out, &cudnn_output_.lse})
      output->set_bytes(0xff, kernels_.stream);
    own_forward(0, false);
    cudnn_forward(0, cudnn_output_);
    BENCH_CUDA_CHECK(cudaStreamSynchronize(kernels_.stream));
    const Difference out = difference(own_fp32_out_.view(), cudnn_output_.out.view());
    const Difference lse = difference(own_output_.lse.view(), cudnn_output_.lse.view());
    const bool agrees = out.within(2e-2) && lse.unwritten == 0 && lse.error <= 1e-2;
    std::printf("check forward %s: own vs cudnn out %.2e of max |out| %.3f, lse %.2e, %lld unwritten: %s\n",
                describe().c_str(), out.error / out.largest, out.largest, lse.error,
                static_cast<long long>(out.unwritten + lse.unwritten), agrees ? "agree" : "DISAGREE");
    return agrees;
  }

  /// The own forward merged into its own result on input set 0: out unchanged (against cuDNN's) and
  /// lse larger by log 2. Leaves a finite running result for the timed merges.
  bool check_merge() const {
    for (const DeviceTensor* output :
         {&own_fp32_out_, &own_output_.out, &own_output_.lse, &cudnn_output_.out, &cudnn_output_.lse})
      output->set_bytes(0xff, kernels_.stream);
    own_forward(0, false);
    own_merge_forward(0);
    cudnn_forward(0, cudnn_output_);
    BENCH_CUDA_CHECK(cudaStreamSynchronize(kernels_.stream));
    const Difference out = difference(own_output_.out.view(), cudnn_output_.out.view());
    const Difference lse = difference(own_output_.lse.view(), cudnn_output_.lse.view(), std::log(2.0));
    const bool agrees = out.within(2e-2) && lse.unwritten == 0 && lse.error <= 1e-2;
    std::printf(
        "check merge %s: own merged into itself vs cudnn out %.2e of max |out| %.3f, lse - log 2 %.2e, "
        "%lld unwritten: %s\n",
        describe().c_str(), out.error / out.largest, out.largest, lse.error,
        static_cast<long long>(out.unwritten + lse.unwritten), agrees ? "agree" : "DISAGREE");
    return agrees;
  }

  /// The own backward's dq, dk, dv against cuDNN's from the same out and lse, on input set 0. The
  /// own call zeroes its gradients before its kernel adds into them, so of its outputs only delta's
  /// poison can show; a gradient its kernel leaves unwritten reads 0 and shows as an error. The
  /// deterministic own backward too where it is timed.
  bool check_backward() const {
    bool agrees = check_backward(false);
    if (options_.any_kernel([](const BenchKernel& kernel) { return kernel.own && kernel.deterministic; }))
      agrees &= check_backward(true);
    return agrees;
  }
  bool check_backward(bool deterministic) const {
    for (const DeviceTensor* output : {&delta_, &own_gradients_.dq, &own_gradients_.dk, &own_gradients_.dv,
                                       &cudnn_gradients_.dq, &cudnn_gradients_.dk, &cudnn_gradients_.dv})
      output->set_bytes(0xff, kernels_.stream);
    own_backward(0, sets_[0].attention, deterministic);
    cudnn_backward(0, sets_[0].attention);
    BENCH_CUDA_CHECK(cudaStreamSynchronize(kernels_.stream));
    const Difference dq = difference(own_gradients_.dq.view(), cudnn_gradients_.dq.view());
    const Difference dk = difference(own_gradients_.dk.view(), cudnn_gradients_.dk.view());
    const Difference dv = difference(own_gradients_.dv.view(), cudnn_gradients_.dv.view());
    const bool agrees = dq.within(2e-2) && dk.within(2e-2) && dv.within(2e-2);
    std::printf(
        "check backward %s: own%s vs cudnn dq %.2e of max |dq| %.3f, dk %.2e of %.3f, dv %.2e of %.3f, %lld "
        "unwritten: %s\n",
        describe().c_str(), deterministic ? " (deterministic)" : "", dq.error / dq.largest, dq.largest,
        dk.error / dk.largest, dk.largest, dv.error / dv.largest, dv.largest,
        static_cast<long long>(dq.unwritten + dk.unwritten + dv.unwritten), agrees ? "agree" : "DISAGREE");
    return agrees;
  }

  std::string describe() const {
    std::ostringstream text;
    text << "D " << head_dim_ << " causal " << (causal_ ? 1 : 0) << " S " << seq_;
    return text.str();
  }

  const KernelBenchOptions& options_;
  BenchKernels& kernels_;
  const int64_t batch_, seq_, head_dim_;
  const bool causal_;
  const AttentionMask mask_;
  const float scale_;
  cuda::CudnnPiece piece_;  // the one call cuDNN takes the case in
  std::vector<InputSet> sets_;
  const DeviceTensor own_fp32_out_ = query_rows(DType::f32);
  const AttentionOutput own_output_ = attention_output(), cudnn_output_ = attention_output();
  const DeviceTensor delta_ = row_statistics();  // (B, H, S) fp32, rowsum(dout * out) for the own backward
  const Gradients own_gradients_ = gradients(DType::f32), cudnn_gradients_ = gradients(options_.dtype);
  std::string own_forward_unsupported_, own_backward_unsupported_;
};

struct Row {
  std::string kernel;
  Pass pass;
  bool causal;
  int64_t seq, head_dim, batch;
  CallTime time;
  double tflops;
};

}  // namespace

/// Runs every case on `stream`; false when the own kernels disagreed with cuDNN somewhere.
bool run_cases(const KernelBenchOptions& options, cudaStream_t stream, std::vector<Row>& rows) {
  BenchKernels kernels({DeviceKind::cuda, 0}, stream);
  bool wrong = false;

  for (const int64_t head_dim : options.head_dims)
    for (const bool causal : options.causal)
      for (const int64_t seq : options.seqs) {
        KernelCase bench_case(options, kernels, seq, head_dim, causal);
        wrong |= !bench_case.prepare_and_check();

        std::vector<std::pair<Pass, std::string>> timed;  // (pass, kernel) of each call
        std::vector<std::function<void(int)>> calls;
        for (const Pass pass : options.passes) {
          const std::string own_unsupported = bench_case.own_unsupported(pass);
          if (!own_unsupported.empty())
            std::printf("own: not run in pass %s at D %lld: %s\n", pass_name(pass), static_cast<long long>(head_dim),
                        own_unsupported.c_str());
          for (const std::string& name : options.kernels) {
            const BenchKernel& kernel = bench_kernel(name);
            if (!runs_in(kernel, pass) || (kernel.own && !own_unsupported.empty())) continue;
            timed.emplace_back(pass, name);
            calls.push_back(bench_case.call(kernel, pass));
          }
        }
        const CallTimer timer(stream);
        const std::vector<CallTime> times =
            options.sustain_seconds > 0 ? sustained_ms(options, timer, calls) : median_ms(options, timer, calls);

        const int64_t batch = bench_case.batch();
        const double forward_flop =
            4.0 * batch * options.heads * static_cast<double>(seq) * seq * head_dim * (causal ? 0.5 : 1.0);
        for (std::size_t i = 0; i < calls.size(); ++i) {
          const auto& [pass, kernel] = timed[i];
          const double tflops = forwards_in(pass) * forward_flop / (times[i].ms * 1e-3) * 1e-12;
          rows.push_back({kernel, pass, causal, seq, head_dim, batch, times[i], tflops});
          std::printf("%-12s %-16s D %3lld causal %d S %6lld B %2lld: %8.3f ms %7.1f TFLOP/s%s\n", kernel.c_str(),
                      pass_name(pass), static_cast<long long>(head_dim), causal ? 1 : 0, static_cast<long long>(seq),
                      static_cast<long long>(batch), times[i].ms, tflops,
                      times[i].window_start.empty()
                          ? ""
                          : (" sustained " + times[i].window_start + " - " + times[i].window_end).c_str());
        }
      }
  return !wrong;
}

int run_kernel_bench(int argc, char** argv) {
  const KernelBenchOptions options = parse(argc, argv);
  BENCH_CUDA_CHECK(cudaSetDevice(0));
  cudaStream_t stream;
  BENCH_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  std::vector<Row> rows;
  const bool agrees = run_cases(options, stream, rows);  // its cuDNN handle is gone before the stream
  BENCH_CUDA_CHECK(cudaStreamDestroy(stream));

  if (!options.csv.empty()) {
    std::ifstream existing(options.csv);
    const bool needs_header = !existing.good() || existing.peek() == std::ifstream::traits_type::eof();
    existing.close();
    std::ofstream csv(options.csv, std::ios::app);
    if (needs_header) csv << "kernel,pass,causal,seq,head_dim,heads,kv_heads,dtype,ms,tflops\n";
    for (const Row& row : rows)
      csv << row.kernel << "," << pass_name(row.pass) << "," << (row.causal ? 1 : 0) << "," << row.seq << ","
          << row.head_dim << "," << options.heads << "," << options.kv_heads << "," << dtype_name(options.dtype) << ","
          << row.time.ms << "," << row.tflops << "\n";
  }
  if (!options.windows_csv.empty()) {
    std::ofstream windows(options.windows_csv);
    SPATTN_CHECK(windows.good(), "cannot write --windows " << options.windows_csv);
    windows << "kernel,pass,causal,seq,head_dim,start,end,ms,tflops\n";
    for (const Row& row : rows)
      windows << row.kernel << "," << pass_name(row.pass) << "," << (row.causal ? 1 : 0) << "," << row.seq << ","
              << row.head_dim << "," << row.time.window_start << "," << row.time.window_end << "," << row.time.ms << ","
              << row.tflops << "\n";
  }
  if (!agrees) std::printf("the own kernels disagree with cuDNN beyond the bounds above\n");
  return agrees ? 0 : 1;
}

}  // namespace spattn

int main(int argc, char** argv) {
  try {
    return spattn::run_kernel_bench(argc, argv);
  } catch (const std::exception& error) {
    std::fprintf(stderr, "spattn_kernel_bench: %s\n", error.what());
    return 2;
  }
}
