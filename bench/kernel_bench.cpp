// One attention forward on one GPU, by kernel: spattn's own Hopper forward on the whole sequence
// as one ForwardBlock (`own`: out in the input dtype through final_out, as a call on the whole
// sequence writes it; `own_fp32_out`: fp32 out, as every block but a chunk's last inside a
// distributed step writes it) against spattn's cuDNN path on the single piece it cuts the same
// call into (`cudnn`: CudnnAttention, out in the input dtype). PyTorch's SDPA
// backends append their rows to the same CSV (bench/kernel_sdpa.py); bench/plot_kernel_results.py
// draws and tabulates them.
//
//   spattn_kernel_bench [--seqs 1024,2048,4096,8192,16384,32768] [--head-dims 64,128]
//       [--causal both|yes|no] [--kernels own,own_fp32_out,cudnn] [--heads 32] [--kv-heads 32]
//       [--dtype bf16|fp16] [--warmup 3] [--iters 10] [--repeats 5] [--csv PATH]
//
// Each case holds 16k x heads query rows or more (batch = max(1, 16384 / S)). Before timing, the
// own kernel's out and lse are compared with cuDNN's on the same inputs (exit 1 beyond 2e-2 of
// the largest |out|, or 1e-2 in lse): a benchmark of a wrong kernel is worthless. Time: the median
// over --repeats of --iters back-to-back calls between two CUDA events, after --warmup calls,
// alternating between two input sets so that small problems do not run from L2, the kernels
// taking turns within each repeat. FLOP by the flash-attention convention: 4 B H S^2 D, half of
// it causal.
//
// CSV columns: kernel,pass,causal,seq,head_dim,heads,kv_heads,dtype,ms,tflops (causal 0 or 1).

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "bench_options.hpp"
#include "bench_tensor.hpp"
#include "kernels/cuda/cudnn_attention.hpp"
#include "kernels/hopper/hopper_forward.hpp"
#include "spattn/device_memory.hpp"
#include "spattn/error.hpp"

namespace spattn {
namespace {

struct KernelBenchOptions {
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
  std::string csv;
};

KernelBenchOptions parse(int argc, char** argv) {
  KernelBenchOptions options;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    const auto value = [&]() -> std::string {
      SPATTN_CHECK(i + 1 < argc, "missing value after " << flag);
      return argv[++i];
    };
    if (flag == "--seqs") {
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
      for (const std::string& kernel : options.kernels)
        SPATTN_CHECK(kernel == "own" || kernel == "own_fp32_out" || kernel == "cudnn",
                     "--kernels takes own, own_fp32_out and cudnn, got '" << kernel << "'");
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
    } else {
      SPATTN_FAIL("unknown option '" << flag << "'; see the comment at the top of bench/kernel_bench.cpp");
    }
  }
  SPATTN_CHECK(options.heads % options.kv_heads == 0,
               "--heads " << options.heads << " must be a multiple of --kv-heads " << options.kv_heads);
  return options;
}

#define BENCH_CUDA_CHECK(call)                                                                   \
  do {                                                                                           \
    const cudaError_t status = (call);                                                           \
    SPATTN_CHECK(status == cudaSuccess, #call << " failed: " << cudaGetErrorString(status));      \
  } while (false)

/// Median milliseconds per call of each of `calls` (each taking the input set, alternating 0, 1)
/// over `repeats` timings of `iterations` calls each, after `warmup` calls of each. The kernels
/// take turns within every repeat, so that a slower minute of the GPU (clocks, temperature) falls
/// on all of them alike.
std::vector<double> median_ms(const KernelBenchOptions& options, cudaStream_t stream,
                              const std::vector<std::function<void(int)>>& calls) {
  for (const auto& call : calls)
    for (int i = 0; i < options.warmup; ++i) call(i % 2);
  cudaEvent_t start, stop;
  BENCH_CUDA_CHECK(cudaEventCreate(&start));
  BENCH_CUDA_CHECK(cudaEventCreate(&stop));
  std::vector<std::vector<double>> times(calls.size());
  for (int repeat = 0; repeat < options.repeats; ++repeat)
    for (std::size_t kernel = 0; kernel < calls.size(); ++kernel) {
      BENCH_CUDA_CHECK(cudaEventRecord(start, stream));
      for (int i = 0; i < options.iterations; ++i) calls[kernel](i % 2);
      BENCH_CUDA_CHECK(cudaEventRecord(stop, stream));
      BENCH_CUDA_CHECK(cudaEventSynchronize(stop));
      float ms = 0;
      BENCH_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
      times[kernel].push_back(ms / options.iterations);
    }
  BENCH_CUDA_CHECK(cudaEventDestroy(start));
  BENCH_CUDA_CHECK(cudaEventDestroy(stop));
  std::vector<double> medians;
  for (std::vector<double>& kernel_times : times) {
    std::sort(kernel_times.begin(), kernel_times.end());
    medians.push_back(kernel_times[kernel_times.size() / 2]);
  }
  return medians;
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

struct Row {
  std::string kernel;
  bool causal;
  int64_t seq, head_dim, batch;
  double ms, tflops;
};

}  // namespace

/// Runs every case on `stream`; false when the own kernel disagreed with cuDNN somewhere.
bool run_cases(const KernelBenchOptions& options, cudaStream_t stream, std::vector<Row>& rows) {
  const Device device{DeviceKind::cuda, 0};
  cuda::CudnnAttention cudnn(device, stream);
  const cuda::hopper::QueryTileCounter tile_counter(device);  // the own launches on `stream`
  bool wrong = false;

  for (const int64_t head_dim : options.head_dims)
    for (const bool causal : options.causal)
      for (const int64_t seq : options.seqs) {
        const int64_t batch = std::max<int64_t>(1, 16384 / seq);
        const int64_t H = options.heads, HK = options.kv_heads, D = head_dim;
        const AttentionMask mask{-1, causal ? 0 : -1};
        const float scale = 1.0f / std::sqrt(static_cast<float>(D));
        std::vector<BenchTensor> q, k, v;
        for (int set = 0; set < 2; ++set) {
          q.emplace_back(device, options.dtype, std::initializer_list<int64_t>{batch, seq, H, D}, 10 * set + 1);
          k.emplace_back(device, options.dtype, std::initializer_list<int64_t>{batch, seq, HK, D}, 10 * set + 2);
          v.emplace_back(device, options.dtype, std::initializer_list<int64_t>{batch, seq, HK, D}, 10 * set + 3);
        }
        DeviceMemory own_out(device, static_cast<std::size_t>(batch * seq * H * D) * 4),
            own_lse(device, static_cast<std::size_t>(batch * H * seq) * 4),
            own_final_out(device, static_cast<std::size_t>(batch * seq * H * D) * dtype_size(options.dtype)),
            cudnn_out(device, static_cast<std::size_t>(batch * seq * H * D) * dtype_size(options.dtype)),
            cudnn_lse(device, static_cast<std::size_t>(batch * H * seq) * 4);
        const auto own_call = [&](int set, bool final_out) {
          ForwardBlock block;
          block.q = q[set].view();
          block.segments = {KvSegment{k[set].view(), v[set].view(), 0}};
          block.mask = mask;
          block.scale = scale;
          block.out = TensorView::contiguous(own_out.data(), DType::f32, {batch, seq, H, D}, device);
          block.lse = TensorView::contiguous(own_lse.data(), DType::f32, {batch, H, seq}, device);
          if (final_out)
            block.final_out = TensorView::contiguous(own_final_out.data(), options.dtype, {batch, seq, H, D}, device);
          cuda::hopper_forward(block, stream, &tile_counter);
        };
        const std::vector<cuda::CudnnPiece> pieces = cuda::plan_cudnn_pieces(seq, 0, seq, 0, mask);
        SPATTN_CHECK(pieces.size() == 1, "cuDNN takes this call in " << pieces.size() << " pieces, not one");
        const TensorView cudnn_out_view =
            TensorView::contiguous(cudnn_out.data(), options.dtype, {batch, seq, H, D}, device);
        const TensorView cudnn_lse_view = TensorView::contiguous(cudnn_lse.data(), DType::f32, {batch, H, seq}, device);
        const auto cudnn_call = [&](int set) {
          cudnn.forward(q[set].view(), k[set].view(), v[set].view(), pieces.front(), scale, cudnn_out_view,
                        cudnn_lse_view);
        };

        ForwardBlock probe;
        probe.q = q[0].view();
        probe.segments = {KvSegment{k[0].view(), v[0].view(), 0}};
        probe.mask = mask;
        probe.scale = scale;
        probe.out = TensorView::contiguous(own_out.data(), DType::f32, {batch, seq, H, D}, device);
        probe.lse = TensorView::contiguous(own_lse.data(), DType::f32, {batch, H, seq}, device);
        const std::string own_unsupported = cuda::hopper_forward_unsupported(probe);
        if (!own_unsupported.empty()) std::printf("own: not run at D %lld: %s\n", static_cast<long long>(D), own_unsupported.c_str());

        if (own_unsupported.empty()) {  // the check before any timing, on NaN-poisoned outputs
          for (const DeviceMemory* output : {&own_out, &own_lse, &cudnn_out, &cudnn_lse})
            BENCH_CUDA_CHECK(cudaMemsetAsync(output->data(), 0xff, output->bytes(), stream));
          own_call(0, false);
          cudnn_call(0);
          BENCH_CUDA_CHECK(cudaStreamSynchronize(stream));
          const std::vector<double> own_values = download(probe.out), cudnn_values = download(cudnn_out_view);
          const std::vector<double> own_lse_values = download(probe.lse), cudnn_lse_values = download(cudnn_lse_view);
          double largest = 0, out_error = 0, lse_error = 0;
          int64_t unwritten = 0;  // NaN left by the poison on either side
          for (std::size_t i = 0; i < own_values.size(); ++i) {
            unwritten += std::isnan(own_values[i]) || std::isnan(cudnn_values[i]);
            largest = std::max(largest, std::abs(cudnn_values[i]));
            out_error = std::max(out_error, std::abs(own_values[i] - cudnn_values[i]));
          }
          for (std::size_t i = 0; i < own_lse_values.size(); ++i) {
            unwritten += std::isnan(own_lse_values[i]) || std::isnan(cudnn_lse_values[i]);
            lse_error = std::max(lse_error, std::abs(own_lse_values[i] - cudnn_lse_values[i]));
          }
          const bool agrees = unwritten == 0 && out_error <= 2e-2 * largest && lse_error <= 1e-2;
          std::printf("check D %lld causal %d S %lld: own vs cudnn out %.2e of max |out| %.3f, lse %.2e, %lld unwritten: %s\n",
                      static_cast<long long>(D), causal ? 1 : 0, static_cast<long long>(seq), out_error / largest,
                      largest, lse_error, static_cast<long long>(unwritten), agrees ? "agree" : "DISAGREE");
          wrong |= !agrees;
        }

        const double flop = 4.0 * batch * H * static_cast<double>(seq) * seq * D * (causal ? 0.5 : 1.0);
        std::vector<std::string> kernels;
        std::vector<std::function<void(int)>> calls;
        for (const std::string& kernel : options.kernels) {
          const bool own = kernel != "cudnn";
          if (own && !own_unsupported.empty()) continue;
          kernels.push_back(kernel);
          calls.push_back(own ? std::function<void(int)>([&, kernel](int set) { own_call(set, kernel == "own"); })
                              : std::function<void(int)>(cudnn_call));
        }
        const std::vector<double> milliseconds = median_ms(options, stream, calls);
        for (std::size_t i = 0; i < kernels.size(); ++i) {
          rows.push_back({kernels[i], causal, seq, D, batch, milliseconds[i], flop / (milliseconds[i] * 1e-3) * 1e-12});
          std::printf("%-12s D %3lld causal %d S %6lld B %2lld: %8.3f ms %7.1f TFLOP/s\n", kernels[i].c_str(),
                      static_cast<long long>(D), causal ? 1 : 0, static_cast<long long>(seq),
                      static_cast<long long>(batch), milliseconds[i], rows.back().tflops);
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
      csv << row.kernel << ",forward," << (row.causal ? 1 : 0) << "," << row.seq << "," << row.head_dim << ","
          << options.heads << "," << options.kv_heads << "," << dtype_name(options.dtype) << "," << row.ms << ","
          << row.tflops << "\n";
  }
  if (!agrees) std::printf("the own kernel disagrees with cuDNN beyond the bound above\n");
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
