#include "run_command.hpp"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "accuracy_report.hpp"
#include "npy_file.hpp"
#include "run_report.hpp"
#include "spattn/cost_model.hpp"
#include "spattn/build_info.hpp"
#include "spattn/device_communicator.hpp"
#include "spattn/document_layout.hpp"
#include "spattn/launch_environment.hpp"
#include "spattn/mpi_communicator.hpp"
#include "spattn/reference_attention.hpp"
#include "strategy_runner.hpp"
#include "timeline_file.hpp"

namespace spattn::app {

namespace {

// Ranks sharing this machine, from the launcher's environment (MPI launchers', torchrun's; 1 when
// not launched by one).
int ranks_on_this_machine() {
  for (const char* name : {"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS", "MPICH_LOCAL_SIZE", "LOCAL_WORLD_SIZE"})
    if (const char* value = std::getenv(name)) return std::max(1, std::atoi(value));
  return 1;
}

// --threads, else OMP_NUM_THREADS, else the machine's cores shared among its ranks.
void choose_cpu_threads(const RunOptions& options) {
  if (options.threads > 0) {
    set_cpu_threads(options.threads);
  } else if (!std::getenv("OMP_NUM_THREADS")) {
    set_cpu_threads(std::max(1, build_info().cpu_cores / ranks_on_this_machine()));
  }
}

// An (N, ...) array's values rounded into a tensor of `dtype`.
HostTensor tensor_from(const NpyArray& array, DType dtype) {
  const auto& s = array.shape;
  HostTensor tensor(dtype, {s[0], s[1], s[2], s[3]});
  for (int64_t i = 0; i < array.numel(); ++i) tensor.set(i, array.values[static_cast<std::size_t>(i)]);
  return tensor;
}

// The problem in --inputs DIR: shapes come from q.npy and k.npy; the other files must match.
AttentionProblem problem_from_directory(RunOptions& options, const AttentionOptions& attention) {
  const std::filesystem::path directory(options.inputs_dir);
  const NpyArray q = read_npy((directory / "q.npy").string());
  SPATTN_CHECK(q.shape.size() == 4, "q.npy has shape " << format_shape(q.shape) << "; expected 4 dimensions (B, S, H, D)");
  const NpyArray k = read_npy((directory / "k.npy").string());
  SPATTN_CHECK(k.shape.size() == 4, "k.npy has shape " << format_shape(k.shape) << "; expected 4 dimensions (B, S, HK, D)");
  const std::vector<int64_t> kv_shape = {q.shape[0], q.shape[1], k.shape[2], q.shape[3]};
  expect_shape(k, kv_shape, "k.npy", "B, S, HK, D");
  const NpyArray v = read_npy((directory / "v.npy").string());
  expect_shape(v, kv_shape, "v.npy", "B, S, HK, D");
  options.batch = q.shape[0];
  options.seq = q.shape[1];
  options.heads = q.shape[2];
  options.kv_heads = k.shape[2];
  options.head_dim = q.shape[3];
  const std::string documents_error = packed_documents_error(options.document_lengths, options.seq);
  SPATTN_CHECK(documents_error.empty(), "--doc-lens with q.npy " << format_shape(q.shape) << ": " << documents_error);
  AttentionProblem problem{AttentionShape{options.batch, options.seq, options.heads, options.kv_heads, options.head_dim,
                                          options.dtype},
                           attention, tensor_from(q, options.dtype), tensor_from(k, options.dtype),
                           tensor_from(v, options.dtype), HostTensor()};
  if (options.backward) {
    const NpyArray dout = read_npy((directory / "dout.npy").string());
    expect_shape(dout, q.shape, "dout.npy", "B, S, H, D");
    problem.dout = tensor_from(dout, options.dtype);
  }
  return problem;
}

AttentionOptions attention_options(const RunOptions& options) {
  AttentionOptions attention;
  attention.causal = options.causal;
  attention.window_left = options.window_left;
  attention.window_right = options.window_right;
  attention.softmax_scale = options.scale;
  attention.kernel = options.kernel;
  attention.deterministic = options.deterministic;
  attention.document_lengths = options.document_lengths;
  attention.document_split = options.document_split;
  return attention;
}

// Every rank's outcome of `load`, agreed: a file that one rank cannot read fails them all.
AttentionProblem agreed_problem(Communicator& world, RunOptions& options) {
  const AttentionOptions attention = attention_options(options);
  std::string error;
  AttentionProblem problem;
  try {
    if (options.inputs_dir.empty()) {
      problem = random_problem(AttentionShape{options.batch, options.seq, options.heads, options.kv_heads,
                                              options.head_dim, options.dtype},
                               attention, options.seed, options.backward);
    } else {
      problem = problem_from_directory(options, attention);
    }
  } catch (const Error& failure) {
    error = failure.what();
  }
  agree_on_call(world, error, {});
  return problem;
}

// The slowest rank's profile (largest total), so that the report shows what a step of the
// whole job costs.
Profile slowest_rank(Communicator& world, const Profile& mine) {
  const double fields[3] = {mine.total_ms, mine.compute_ms, mine.comm_wait_ms};
  std::vector<double> everyone(3 * static_cast<std::size_t>(world.size()));
  world.host_all_gather(fields, everyone.data(), sizeof fields);
  std::size_t slowest = 0;
  for (std::size_t rank = 1; rank < static_cast<std::size_t>(world.size()); ++rank)
    if (everyone[3 * rank] > everyone[3 * slowest]) slowest = rank;
  Profile profile = mine;
  profile.total_ms = everyone[3 * slowest];
  profile.compute_ms = everyone[3 * slowest + 1];
  profile.comm_wait_ms = everyone[3 * slowest + 2];
  return profile;
}

// --algo auto: the strategy the cost model expects fastest for this shape and mask on `ranks`
// ranks of the --preset cluster (nodes: --nodes, else as many as the ranks fill). Every rank
// computes the same choice from the same agreed problem. One rank: ring, which is then local
// attention like every strategy. Sets the algorithm in `options` and hamilton2's nodes in
// `strategy_options`; returns the line the report prints.
std::string select_strategy(RunOptions& options, const AttentionProblem& problem, int ranks,
                            StrategyOptions& strategy_options) {
  if (ranks == 1) {
    options.algorithm = algorithm_name(Algorithm::ring);
    return "auto: 1 rank, local attention";
  }
  const std::string preset = !options.preset.empty() ? options.preset : options.device == "cuda" ? "nvswitch" : "cpu";
  const int nodes = options.nodes > 1 ? options.nodes : 0;
  Cluster kind = cluster_preset(preset);
  if (!options.network.empty()) kind.across_nodes = network_preset(options.network);
  const Cluster cluster = sized_cluster(kind, ranks, nodes, nodes > 0 ? ranks / nodes : 0);
  strategy_options.nodes = cluster.nodes;
  // With documents the model prices one sequence of their padded length (zigzag per document's,
  // which splits over the ranks in either layout), among the strategies that take documents.
  AttentionShape priced_shape = problem.shape;
  if (!problem.options.document_lengths.empty())
    priced_shape.seq =
        DocumentLayout(LayoutKind::zigzag, problem.options.document_lengths, ranks).sequence_layout().global_length();
  std::vector<StrategyCost> costs = compare_strategies(cluster, priced_shape, ranks, problem.options, strategy_options);
  costs.erase(std::remove_if(costs.begin(), costs.end(),
                             [&](const StrategyCost& cost) {
                               return !documents_unsupported(cost.algorithm, problem.options.document_lengths,
                                                             problem.options.document_split)
                                           .empty();
                             }),
              costs.end());
  const StrategyCost& chosen = fastest_strategy(costs, options.backward);
  options.algorithm = algorithm_name(chosen.algorithm);
  std::ostringstream why;
  why << std::fixed << std::setprecision(3) << "auto: the cost model's fastest " << (options.backward ? "forward+backward" : "forward") << " on " << preset
      << " (" << cluster.nodes << " node" << (cluster.nodes == 1 ? "" : "s") << ")";
  for (const StrategyCost& cost : costs)
    if (cost.applies())
      why << (&cost == &chosen ? "; *" : "; ") << algorithm_name(cost.algorithm) << " "
          << (options.backward ? cost.forward_backward_seconds : cost.forward_seconds) * 1e3 << " ms";
  return why.str();
}

void write_outputs(const std::string& directory, const AttentionOutputs& outputs) {
  std::filesystem::create_directories(directory);
  const std::pair<const char*, const HostTensor*> files[] = {{"out.npy", &outputs.out}, {"lse.npy", &outputs.lse},
                                                             {"dq.npy", &outputs.dq},   {"dk.npy", &outputs.dk},
                                                             {"dv.npy", &outputs.dv}};
  for (const auto& [name, tensor] : files) {
    if (tensor->empty()) continue;
    const TensorView& view = tensor->view();
    std::vector<float> values(static_cast<std::size_t>(view.numel()));
    for (int64_t i = 0; i < view.numel(); ++i) values[static_cast<std::size_t>(i)] = static_cast<float>(tensor->at(i));
    std::vector<int64_t> shape(view.shape.begin(), view.shape.begin() + view.ndim);
    write_npy((std::filesystem::path(directory) / name).string(), values.data(), shape);
  }
}

// The ranks of this job and the transport its tensors take: MPI's ranks under an MPI launcher (or
// a single process), else those that torchrun's variables describe, formed over oneCCL, which
// --transport auto then means. Errors here are this process's own (no communicator exists yet to
// agree on them), so they are thrown as LaunchError.
std::unique_ptr<Communicator> form_world(const RunOptions& options, Transport& transport) {
  transport = parse_transport(options.transport);
  if (!launched_by_environment()) return std::make_unique<MpiCommunicator>();
  try {
    std::unique_ptr<Communicator> world = make_environment_world(parse_device_kind(options.device), transport);
    transport = Transport::oneccl;
    return world;
  } catch (const TimeoutError&) {
    throw;
  } catch (const Error& failure) {
    throw LaunchError(failure.what());
  }
}

}  // namespace

int run_command(const RunOptions& given) {
  RunOptions options = given;
  choose_cpu_threads(options);
  Transport transport = Transport::automatic;
  const std::unique_ptr<Communicator> ranks = form_world(options, transport);
  Communicator& world = *ranks;
  const DevicePlacement placement = place_on_devices(world, parse_device_kind(options.device), transport);
  const std::unique_ptr<Communicator> communicator = make_device_communicator(world, placement);
  const AttentionProblem problem = agreed_problem(world, options);
  StrategyOptions strategy_options;
  strategy_options.nodes = options.nodes;
  strategy_options.inner = options.inner;
  strategy_options.across = parse_algorithm(options.across);
  std::string selection;
  if (options.algorithm == kAutoAlgorithm) selection = select_strategy(options, problem, world.size(), strategy_options);
  const Algorithm algorithm = parse_algorithm(options.algorithm);
  std::ofstream timeline;
  if (!options.timeline_path.empty()) timeline = open_timeline(world, options.timeline_path);
  const StrategyRun run = run_strategy(*communicator, algorithm, problem, options.warmup, options.iters,
                                       options.profile_steps || !options.timeline_path.empty(), strategy_options);
  const std::string timeline_error = options.timeline_path.empty() ? "" : write_timeline(world, timeline, run);

  RunReport report;
  report.options = options;
  report.ranks = world.size();
  report.threads_per_rank = cpu_threads();
  report.device = placement.device;
  report.transport = transport_name(placement.transport);
  report.ranks_per_device = placement.ranks_per_device;
  report.selection = selection;
  if (!problem.options.document_lengths.empty()) {
    const DocumentLayout documents =
        plan_document_layout(algorithm, world.size(), problem.options,
                             resolved_strategy_options(algorithm, world.size(), problem.shape, strategy_options));
    report.documents = documents.describe();
    report.padding = documents.padding();
  }
  const double flop = forward_flop(options);
  report.forward.profile = slowest_rank(world, run.forward);
  report.forward.tflops = flop / (report.forward.profile.total_ms * 1e-3) * 1e-12;
  if (options.backward) {
    PassTiming backward{slowest_rank(world, run.backward), 0};
    backward.tflops = 2.5 * flop / (backward.profile.total_ms * 1e-3) * 1e-12;
    report.backward = backward;
  }

  // Rank 0 checks, writes and reports; every rank then exits with rank 0's verdict.
  int status = 0;
  std::string error = timeline_error;
  if (world.rank() == 0 && error.empty()) {
    try {
      if (options.check) {
        const AttentionOutputs single = run_single_device(problem, placement.device);
        const ReferenceResult reference = reference_attention(problem.q.view(), problem.k.view(), problem.v.view(),
                                                              problem.dout.view(), problem.options);
        report.errors = compare_with_reference(run.outputs, single, reference);
        if (!all_pass(*report.errors)) status = 1;
      }
      if (!options.outputs_dir.empty()) write_outputs(options.outputs_dir, run.outputs);
      std::cout << (options.json ? format_json(report) : format_table(report)) << std::endl;
    } catch (const Error& failure) {
      error = failure.what();
    }
  }
  agree_on_call(world, error, {});
  std::vector<int> statuses(static_cast<std::size_t>(world.size()));
  world.host_all_gather(&status, statuses.data(), sizeof status);
  return statuses.front();
}

}  // namespace spattn::app
