// spattn._core: the C++ core for Python. Tensors cross as DLPack views (no copies), spattn::Error
// becomes spattn.SpattnError with the same message, and every call that computes or
// communicates releases the GIL.

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/unique_ptr.h>
#include <nanobind/stl/vector.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "spattn/build_info.hpp"
#include "spattn/cost_model.hpp"
#include "spattn/distributed_attention.hpp"
#include "spattn/error.hpp"
#include "spattn/local_attention.hpp"
#include "spattn/mpi_communicator.hpp"
#include "spattn/profile.hpp"
#include "spattn/launch_environment.hpp"
#ifdef SPATTN_WITH_ONECCL
#include "spattn/oneccl_communicator.hpp"
#endif
#ifdef SPATTN_WITH_NCCL
#include "spattn/nccl_communicator.hpp"
#endif
#include "schedule/cycle_schedule.hpp"
#include "tensor_from_dlpack.hpp"

namespace nb = nanobind;
using namespace nb::literals;

namespace spattn::python {

namespace {

using Array = nb::ndarray<>;

AttentionOptions attention_options(bool causal, int64_t window_left, int64_t window_right,
                                   std::optional<float> softmax_scale, const std::string& kernel,
                                   std::vector<int64_t> document_lengths = {},
                                   const std::string& document_split = "per_document", bool deterministic = false) {
  AttentionOptions options;
  options.deterministic = deterministic;
  options.document_lengths = std::move(document_lengths);
  options.document_split = parse_document_split(document_split);
  options.causal = causal;
  options.window_left = window_left;
  options.window_right = window_right;
  options.softmax_scale = softmax_scale;
  options.kernel = parse_kernel_choice(kernel);
  return options;
}

// Every rank's `data` (bytes of any length), in rank order: the channel setup_distributed uses
// to tell the other ranks where torch.distributed's store listens.
std::vector<nb::bytes> all_gather_bytes(MpiCommunicator& communicator, const nb::bytes& data) {
  const int ranks = communicator.size();
  std::vector<char> mine(static_cast<const char*>(data.data()), static_cast<const char*>(data.data()) + data.size());
  std::vector<int64_t> lengths(static_cast<std::size_t>(ranks));
  std::vector<char> gathered;
  int64_t longest = 0;
  {
    nb::gil_scoped_release release;
    const int64_t length = static_cast<int64_t>(mine.size());
    communicator.host_all_gather(&length, lengths.data(), sizeof length);
    longest = std::max<int64_t>(1, *std::max_element(lengths.begin(), lengths.end()));
    mine.resize(static_cast<std::size_t>(longest));
    gathered.resize(static_cast<std::size_t>(longest) * static_cast<std::size_t>(ranks));
    communicator.host_all_gather(mine.data(), gathered.data(), static_cast<std::size_t>(longest));
  }
  std::vector<nb::bytes> result;
  for (int rank = 0; rank < ranks; ++rank)
    result.emplace_back(gathered.data() + rank * longest, static_cast<std::size_t>(lengths[static_cast<std::size_t>(rank)]));
  return result;
}

// A DistributedAttention over a communicator the Python object keeps alive (keep_alive below).
class Plan {
 public:
  Plan(Communicator& communicator, const std::string& algorithm, int64_t batch, int64_t seq, int64_t heads,
       int64_t kv_heads, int64_t head_dim, const std::string& dtype, bool causal, int64_t window_left,
       int64_t window_right, std::optional<float> softmax_scale, int nodes, int inner, const std::string& across,
       const std::string& kernel, std::vector<int64_t> document_lengths, const std::string& document_split,
       bool deterministic)
      : attention_(make(communicator, algorithm, batch, seq, heads, kv_heads, head_dim, dtype, causal, window_left,
                        window_right, softmax_scale, nodes, inner, across, kernel, std::move(document_lengths),
                        document_split, deterministic)) {}

  std::string algorithm() const { return algorithm_name(attention_->algorithm()); }
  const SequenceLayout& layout() const { return attention_->layout(); }

  // (position, length, local_offset) of each chunk `rank` holds, in shard order.
  std::vector<std::tuple<int64_t, int64_t, int64_t>> chunks(int rank) const {
    SPATTN_CHECK(rank >= 0 && rank < layout().ranks(), "rank " << rank << "; ranks are 0.." << layout().ranks() - 1);
    std::vector<std::tuple<int64_t, int64_t, int64_t>> result;
    for (const SequenceChunk& chunk : layout().chunks(rank))
      result.emplace_back(chunk.position, chunk.length, chunk.local_offset);
    return result;
  }

  // Later calls enqueue their compute on `stream` (a cudaStream_t as an integer, e.g.
  // torch.cuda.current_stream().cuda_stream; 0 is the legacy default stream). Ignored on the CPU.
  void set_stream(std::uintptr_t stream) { attention_->set_stream(reinterpret_cast<void*>(stream)); }

  nb::object forward(const Array& q, const Array& k, const Array& v, const Array& out, const Array& lse, bool profile) {
    const TensorView views[] = {tensor_from_dlpack("q", q), tensor_from_dlpack("k", k), tensor_from_dlpack("v", v),
                                tensor_from_dlpack("out", out), tensor_from_dlpack("lse", lse)};
    return profiled(profile, [&](Profile* timing) {
      attention_->forward(views[0], views[1], views[2], views[3], views[4], timing);
    });
  }

  // Waits for the device and raises the error of a transfer that failed after its call returned.
  void synchronize() {
    nb::gil_scoped_release release;
    attention_->synchronize();
  }

  nb::object backward(const Array& q, const Array& k, const Array& v, const Array& out, const Array& lse, const Array& dout,
                const Array& dq, const Array& dk, const Array& dv, bool profile) {
    const TensorView views[] = {tensor_from_dlpack("q", q),       tensor_from_dlpack("k", k),
                                tensor_from_dlpack("v", v),       tensor_from_dlpack("out", out),
                                tensor_from_dlpack("lse", lse),   tensor_from_dlpack("dout", dout),
                                tensor_from_dlpack("dq", dq),     tensor_from_dlpack("dk", dk),
                                tensor_from_dlpack("dv", dv)};
    return profiled(profile, [&](Profile* timing) {
      attention_->backward(views[0], views[1], views[2], views[3], views[4], views[5], views[6], views[7], views[8],
                           timing);
    });
  }

 private:
  // Runs `call` without the GIL, given a per-step Profile when `profile` is set; returns that
  // profile as a dict, else None.
  template <class Call>
  static nb::object profiled(bool profile, const Call& call) {
    Profile timing;
    timing.per_step = true;
    {
      nb::gil_scoped_release release;
      call(profile ? &timing : nullptr);
    }
    if (!profile) return nb::none();
    return profile_dict(timing);
  }

  // What `spattn run` prints for a pass: totals, each step's compute, wait and traffic, and the
  // timeline that `spattn run --timeline` writes.
  static nb::dict profile_dict(const Profile& profile) {
    const auto timing = [](double compute_ms, double comm_wait_ms, double bytes_sent, int messages_sent) {
      nb::dict entry;
      entry["compute_ms"] = compute_ms;
      entry["comm_wait_ms"] = comm_wait_ms;
      entry["bytes_sent"] = bytes_sent;
      entry["messages_sent"] = messages_sent;
      return entry;
    };
    nb::dict result = timing(profile.compute_ms, profile.comm_wait_ms, profile.bytes_sent, profile.messages_sent);
    result["total_ms"] = profile.total_ms;
    nb::list steps;
    for (const StepTiming& step : profile.steps)
      steps.append(timing(step.compute_ms, step.comm_wait_ms, step.bytes_sent, step.messages_sent));
    result["steps"] = steps;
    nb::list spans;
    for (const ProfileSpan& span : profile.spans) {
      nb::dict entry;
      entry["step"] = span.step;
      entry["kind"] = span.kind == ProfileSpan::Kind::comm_wait ? "comm_wait" : "compute";
      entry["start_ms"] = span.start_ms;
      entry["end_ms"] = span.end_ms;
      spans.append(entry);
    }
    result["spans"] = spans;
    return result;
  }

  static std::unique_ptr<DistributedAttention> make(Communicator& communicator, const std::string& algorithm,
                                                    int64_t batch, int64_t seq, int64_t heads, int64_t kv_heads,
                                                    int64_t head_dim, const std::string& dtype, bool causal,
                                                    int64_t window_left, int64_t window_right,
                                                    std::optional<float> softmax_scale, int nodes, int inner,
                                                    const std::string& across, const std::string& kernel,
                                                    std::vector<int64_t> document_lengths,
                                                    const std::string& document_split, bool deterministic) {
    const AttentionShape shape{batch, seq, heads, kv_heads, head_dim, parse_dtype(dtype)};
    const AttentionOptions options = attention_options(causal, window_left, window_right, softmax_scale, kernel,
                                                       std::move(document_lengths), document_split, deterministic);
    StrategyOptions strategy_options;
    strategy_options.nodes = nodes;
    strategy_options.inner = inner;
    strategy_options.across = parse_algorithm(across);
    const Algorithm parsed = parse_algorithm(algorithm);
    // Collective: the ranks agree on the call before it returns.
    nb::gil_scoped_release release;
    return std::make_unique<DistributedAttention>(communicator, parsed, shape, options, strategy_options);
  }

  std::unique_ptr<DistributedAttention> attention_;
};

// The cost model's estimate of every algorithm for one shape on a preset cluster, best first
// among those that apply: (algorithm, configuration, forward seconds, forward+backward seconds,
// why not ("" when it applies)). `nodes`: how many nodes the ranks are spread over, equally and in
// order; 0: as many as they fill, in nodes of the preset's size.
std::vector<std::tuple<std::string, std::string, double, double, std::string>> estimate_strategies(
    const std::string& cluster_name, int ranks, int64_t batch, int64_t seq, int64_t heads, int64_t kv_heads,
    int64_t head_dim, const std::string& dtype, bool causal, int nodes, int64_t window_left, int64_t window_right) {
  SPATTN_CHECK(ranks >= 2, "the cost model compares strategies on 2 or more ranks; got " << ranks);
  SPATTN_CHECK(nodes >= 0 && (nodes == 0 || ranks % nodes == 0),
               "nodes " << nodes << " must divide the " << ranks << " ranks (or be 0: nodes of the preset's size)");
  const Cluster cluster = sized_cluster(cluster_preset(cluster_name), ranks, nodes, nodes > 0 ? ranks / nodes : 0);
  const AttentionShape shape{batch, seq, heads, kv_heads, head_dim, parse_dtype(dtype)};
  StrategyOptions options;
  options.nodes = cluster.nodes;
  AttentionOptions attention;
  attention.causal = causal;
  attention.window_left = window_left;
  attention.window_right = window_right;
  std::vector<StrategyCost> costs = compare_strategies(cluster, shape, ranks, attention, options);
  std::stable_sort(costs.begin(), costs.end(),
                   [](const StrategyCost& a, const StrategyCost& b) { return modelled_faster(a, b, true); });
  std::vector<std::tuple<std::string, std::string, double, double, std::string>> result;
  for (const StrategyCost& cost : costs)
    result.emplace_back(algorithm_name(cost.algorithm), cost.configuration, cost.forward_seconds,
                        cost.forward_backward_seconds, cost.not_applicable);
  return result;
}

nb::dict build_info_dict() {
  const BuildInfo info = build_info();
  nb::dict result;
  result["version"] = info.version;
  result["kernel_backends"] = info.kernel_backends;
  nb::list block_kernels;
  for (const BlockKernelsInfo& kernels : info.block_kernels) {
    nb::dict entry;
    entry["name"] = kernels.name;
    entry["supports"] = kernels.supports;
    block_kernels.append(entry);
  }
  result["block_kernels"] = block_kernels;
  result["communicators"] = info.communicators;
  result["mpi_library"] = info.mpi_library;
  result["blas"] = info.blas;
  result["devices"] = info.devices;
  result["cpu_threads"] = info.cpu_threads;
  result["cpu_cores"] = info.cpu_cores;
  return result;
}

}  // namespace

}  // namespace spattn::python

NB_MODULE(_core, m) {
  using namespace spattn;
  using namespace spattn::python;
  m.doc() = "spattn's C++ core: distributed exact attention plans over MPI (CPU tensors) or NCCL (CUDA tensors), "
            "tensors through DLPack";

  nb::exception<Error> spattn_error(m, "SpattnError", PyExc_RuntimeError);
  // Registered after SpattnError, so tried before it (nanobind tries the latest translator first).
  nb::exception<TimeoutError>(m, "SpattnTimeoutError", spattn_error);
  // Autograd graphs and user code keep plans alive in module globals, which Python may still hold
  // when nanobind checks for leaks at shutdown: those are not leaks of the binding.
  nb::set_leak_warnings(false);

  m.def(
      "algorithms",
      [] {
        std::vector<std::string> names;
        for (Algorithm algorithm : all_algorithms()) names.push_back(algorithm_name(algorithm));
        return names;
      },
      "Every algorithm name a Plan takes, in the order help texts list them.");
  m.def("build_info", &build_info_dict,
        "What this build contains: version, kernel backends, block kernels, communicators, ...");
  m.def(
      "parse_kernel_choice", [](const std::string& name) { return kernel_choice_name(parse_kernel_choice(name)); },
      "name"_a,
      "`name` when it names a choice of block kernels (auto, own or cudnn); SpattnError naming the allowed "
      "names otherwise.");
  m.def("without_error_prefix", &without_error_prefix, "message"_a,
        "`message` without the 'spattn: ' that every SpattnError starts with, for quoting it in another error.");
  m.def("window_error", &window_error, "left"_a, "right"_a,
        "'' when (left, right) is a sliding window spattn takes (each side >= 0, or -1 for unbounded); "
        "otherwise why not.");
  m.def("set_cpu_threads", &set_cpu_threads, "threads"_a, "Threads the CPU kernels use in this process.");
  m.def("cpu_threads", &cpu_threads, "Threads the CPU kernels use in this process.");

  m.def("cluster_presets", &cluster_preset_names, "The cluster presets estimate_strategies takes.");
  m.def(
      "cluster_nodes",
      [](const std::string& cluster, int ranks) { return sized_cluster(cluster_preset(cluster), ranks, 0, 0).nodes; },
      "cluster"_a, "ranks"_a, "The nodes `ranks` fill, in nodes of the preset's size (what estimate_strategies "
      "assumes when not told).");
  m.def("estimate_strategies", &estimate_strategies, "cluster"_a, "ranks"_a, "batch"_a, "seq"_a, "heads"_a,
        "kv_heads"_a, "head_dim"_a, "dtype"_a, "causal"_a, "nodes"_a = 0, "window_left"_a = -1, "window_right"_a = -1,
        "The cost model's (algorithm, configuration, forward s, forward+backward s, why not) for every "
        "algorithm, the applicable ones first, fastest first; nodes: how many the ranks spread over "
        "(0: nodes of the preset's size); window_left/right: the sliding window (-1: unbounded).");

  // The rotation schedules' cycles, for spattn.hamilton_attention's helpers (TASP's names).
  m.def("hamiltonian_decomposition", &hamiltonian_decomposition, "ranks"_a,
        "The n-1 arc-disjoint directed Hamiltonian cycles of the complete directed graph on n ranks that the "
        "hamilton algorithm rotates slots along (each cycle lists the ranks in travel order; the last sends to the "
        "first); SpattnError saying why for n with none (4 and 6).");
  m.def("hamiltonian_decomposition_error", &hamiltonian_decomposition_error, "ranks"_a,
        "Why hamiltonian_decomposition(ranks) has no answer, or \"\" when it has one.");
  m.def("two_level_cycles", &two_level_cycles, "ranks_per_node"_a, "nodes"_a,
        "The m cycles of hamilton2 over nodes of m consecutive ranks: cycle i runs the zig-zag path i of the node "
        "through node 0, then node 1, ..., and back; SpattnError saying why when the scheme does not exist.");
  m.def("two_level_error", &two_level_error, "ranks_per_node"_a, "nodes"_a,
        "Why two_level_cycles(ranks_per_node, nodes) has no answer, or \"\" when it has one.");

  nb::class_<Communicator>(m, "Communicator", "A group of ranks that spattn's plans transfer over.")
      .def_prop_ro("rank", &Communicator::rank)
      .def_prop_ro("size", &Communicator::size)
      .def_prop_ro("device", [](const Communicator& communicator) { return device_name(communicator.device()); })
      .def(
          "reject_call",
          [](Communicator& communicator, const std::string& error) {
            SPATTN_CHECK(!error.empty(), "reject_call needs the reason: an empty error would accept the call");
            agree_on_call(communicator, error, {});
          },
          "error"_a, nb::call_guard<nb::gil_scoped_release>(),
          "This rank's part in the agreement that starts every plan's creation and call on the other "
          "ranks, as a refusal: their calls raise SpattnError naming this rank and `error`, instead "
          "of waiting for it; this one raises SpattnError with `error`.");

  nb::class_<MpiCommunicator, Communicator>(m, "MpiCommunicator",
                              "spattn's communicator over MPI_COMM_WORLD (initializes MPI when nobody has), or over some of "
                              "its ranks (over_ranks).")
      .def(
          "__init__", [](MpiCommunicator* self) { new (self) MpiCommunicator(); },
          nb::call_guard<nb::gil_scoped_release>())
      .def("barrier", &MpiCommunicator::barrier, nb::call_guard<nb::gil_scoped_release>())
      .def("over_ranks", &MpiCommunicator::over_ranks, "ranks"_a, nb::call_guard<nb::gil_scoped_release>(),
           "A communicator over these ranks of this one (rank i of it is ranks[i]), collective over "
           "them only: every listed rank calls it with the same list, the others need not.")
      .def("all_gather_bytes", &all_gather_bytes, "data"_a,
           "Every rank's bytes, in rank order (collective; any lengths).");

  m.def("launched_by_environment", &launched_by_environment,
        "Whether this process was started without an MPI launcher but with WORLD_SIZE set (torchrun, a shell "
        "loop): CPU tensors then run over oneCCL by default.");

#ifdef SPATTN_WITH_ONECCL
  nb::class_<OnecclCommunicator, Communicator>(m, "OnecclCommunicator",
                                               "spattn's communicator over oneCCL, for CPU tensors.")
      .def(
          "__init__",
          [](OnecclCommunicator* self, int rank, int size, nb::callable share) {
            // share runs Python (torch.distributed's broadcast): it takes the GIL it needs back.
            nb::gil_scoped_release release;  // collective: waits for every rank
            new (self) OnecclCommunicator(rank, size, [&](const std::string& mine) {
              nb::gil_scoped_acquire acquire;
              const nb::bytes shared = nb::cast<nb::bytes>(share(nb::bytes(mine.data(), mine.size())));
              return std::string(static_cast<const char*>(shared.data()), shared.size());
            });
          },
          "rank"_a, "size"_a, "share"_a,
          "Rank `rank` of `size` processes (collective): share(address: bytes) -> bytes is given this rank's "
          "key-value store address and returns rank 0's, e.g. by torch.distributed.broadcast_object_list.");
#endif

#ifdef SPATTN_WITH_NCCL
  m.def(
      "make_nccl_unique_id",
      [] {
        const NcclUniqueIdBytes id = make_nccl_unique_id();
        return nb::bytes(id.data(), id.size());
      },
      "A fresh NCCL unique id (bytes): one rank makes it, every rank of the new communicator passes it.");
  nb::class_<NcclCommunicator, Communicator>(m, "NcclCommunicator",
                                             "spattn's communicator over NCCL, one GPU per rank.")
      .def(
          "__init__",
          [](NcclCommunicator* self, int rank, int size, const nb::bytes& unique_id, int device_index) {
            NcclUniqueIdBytes id{};
            SPATTN_CHECK(unique_id.size() == id.size(),
                         "the NCCL unique id has " << unique_id.size() << " bytes; expected " << id.size());
            std::memcpy(id.data(), unique_id.data(), id.size());
            nb::gil_scoped_release release;  // collective: waits for every rank
            new (self) NcclCommunicator(rank, size, id, device_index);
          },
          "rank"_a, "size"_a, "unique_id"_a, "device_index"_a,
          "Rank `rank` of `size` ranks that all pass the same unique_id, on GPU `device_index` (collective).");
#endif

  nb::class_<Plan>(m, "Plan",
                   "A DistributedAttention plan for one global shape, dtype, mask, algorithm and choice of block "
                   "kernels (collective).")
      .def(nb::init<Communicator&, const std::string&, int64_t, int64_t, int64_t, int64_t, int64_t, const std::string&,
                    bool, int64_t, int64_t, std::optional<float>, int, int, const std::string&, const std::string&,
                    std::vector<int64_t>, const std::string&, bool>(),
           "communicator"_a, "algorithm"_a, "batch"_a, "seq"_a, "heads"_a, "kv_heads"_a, "head_dim"_a, "dtype"_a,
           "causal"_a = false, "window_left"_a = -1, "window_right"_a = -1, "softmax_scale"_a = nb::none(),
           "nodes"_a = 1, "inner"_a = 0, "across"_a = "zigzag", "kernel"_a = "auto",
           "document_lengths"_a = std::vector<int64_t>{}, "document_split"_a = "per_document",
           "deterministic"_a = false, nb::keep_alive<1, 2>())
      .def_prop_ro("algorithm", &Plan::algorithm)
      .def_prop_ro("layout_name", [](const Plan& plan) { return plan.layout().name(); })
      .def_prop_ro("global_length", [](const Plan& plan) { return plan.layout().global_length(); })
      .def_prop_ro("local_length", [](const Plan& plan) { return plan.layout().local_length(); })
      .def_prop_ro("ranks", [](const Plan& plan) { return plan.layout().ranks(); })
      .def_prop_ro("position_stride", [](const Plan& plan) { return plan.layout().position_stride(); })
      .def("chunks", &Plan::chunks, "rank"_a,
           "(position, length, local_offset) of each chunk the rank holds; its tokens position_stride apart.")
      .def("set_stream", &Plan::set_stream, "stream"_a,
           "The CUDA stream (cudaStream_t as an integer) that later calls enqueue their compute on.")
      .def("synchronize", &Plan::synchronize,
           "Waits until the device has run the calls so far; raises the error of a transfer among them that failed "
           "or timed out after its call returned (a peer died or stalled).")
      .def("forward", &Plan::forward, "q"_a, "k"_a, "v"_a, "out"_a, "lse"_a, "profile"_a = false,
           "out, lse = attention(q, k, v) on this rank's shard; out and lse are written in place. With profile, "
           "returns where the time went (total_ms, compute_ms, comm_wait_ms, bytes_sent, messages_sent and steps, "
           "a list of the same per step), else None.")
      .def("backward", &Plan::backward, "q"_a, "k"_a, "v"_a, "out"_a, "lse"_a, "dout"_a, "dq"_a, "dk"_a, "dv"_a,
           "profile"_a = false, "dq, dk, dv of forward, written in place; profile as forward's.");

  m.def(
      "local_forward",
      [](const Array& q, const Array& k, const Array& v, const Array& out, const Array& lse, bool causal,
         int64_t window_left, int64_t window_right, std::optional<float> softmax_scale, const std::string& kernel,
         std::vector<int64_t> document_lengths) {
        const TensorView views[] = {tensor_from_dlpack("q", q), tensor_from_dlpack("k", k), tensor_from_dlpack("v", v),
                                    tensor_from_dlpack("out", out), tensor_from_dlpack("lse", lse)};
        const AttentionOptions options =
            attention_options(causal, window_left, window_right, softmax_scale, kernel, std::move(document_lengths));
        nb::gil_scoped_release release;
        local_attention_forward(views[0], views[1], views[2], views[3], views[4], options);
      },
      "q"_a, "k"_a, "v"_a, "out"_a, "lse"_a, "causal"_a = false, "window_left"_a = -1, "window_right"_a = -1,
      "softmax_scale"_a = nb::none(), "kernel"_a = "auto", "document_lengths"_a = std::vector<int64_t>{},
      "Attention of a whole sequence in this process with spattn's kernels (the single-rank baseline); with "
      "document_lengths, of those documents packed without padding, each on its own.");
  m.def(
      "local_backward",
      [](const Array& q, const Array& k, const Array& v, const Array& out, const Array& lse, const Array& dout,
         const Array& dq, const Array& dk, const Array& dv, bool causal, int64_t window_left, int64_t window_right,
         std::optional<float> softmax_scale, const std::string& kernel, std::vector<int64_t> document_lengths,
         bool deterministic) {
        const TensorView views[] = {tensor_from_dlpack("q", q),       tensor_from_dlpack("k", k),
                                    tensor_from_dlpack("v", v),       tensor_from_dlpack("out", out),
                                    tensor_from_dlpack("lse", lse),   tensor_from_dlpack("dout", dout),
                                    tensor_from_dlpack("dq", dq),     tensor_from_dlpack("dk", dk),
                                    tensor_from_dlpack("dv", dv)};
        const AttentionOptions options = attention_options(causal, window_left, window_right, softmax_scale, kernel,
                                                           std::move(document_lengths), "per_document", deterministic);
        nb::gil_scoped_release release;
        local_attention_backward(views[0], views[1], views[2], views[3], views[4], views[5], views[6], views[7],
                                 views[8], options);
      },
      "q"_a, "k"_a, "v"_a, "out"_a, "lse"_a, "dout"_a, "dq"_a, "dk"_a, "dv"_a, "causal"_a = false, "window_left"_a = -1,
      "window_right"_a = -1, "softmax_scale"_a = nb::none(), "kernel"_a = "auto",
      "document_lengths"_a = std::vector<int64_t>{}, "deterministic"_a = false,
      "dq, dk, dv of local_forward, written in place; deterministic: the same bits every run "
      "(AttentionOptions::deterministic).");
}
