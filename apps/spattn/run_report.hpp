#pragma once
// What `spattn run` prints: a readable table, or one JSON object as the last line.

#include <optional>
#include <string>
#include <vector>

#include "accuracy_report.hpp"
#include "cli_options.hpp"
#include "spattn/device.hpp"
#include "spattn/profile.hpp"

namespace spattn::app {

/// Timings of one pass (forward or backward) of the slowest rank, and its rate.
struct PassTiming {
  Profile profile;
  double tflops = 0;  // FLOP (flash-attention convention) / total time
};

struct RunReport {
  RunOptions options;     // as run (shape taken from --inputs when given)
  int ranks = 1;
  int threads_per_rank = 1;
  Device device{};              // rank 0's device
  std::string transport = "mpi";
  int ranks_per_device = 1;
  std::string selection;  // --algo auto: why this strategy; "" otherwise
  // With --doc-lens: how the documents lie over the ranks (DocumentLayout::describe) and their
  // padding tokens in all; "" and 0 otherwise.
  std::string documents;
  int64_t padding = 0;
  PassTiming forward;
  std::optional<PassTiming> backward;
  std::optional<std::vector<OutputError>> errors;  // with --check
};

/// Forward FLOP by the flash-attention convention: 4 * B * H * S^2 * D, half of it for a plain
/// causal mask; with a sliding window, 4 * B * H * D per visible (query, key) pair. With packed
/// documents the sum of that over the documents (S their lengths; padding is no work).
/// Backward is 2.5x forward.
double forward_flop(const RunOptions& options);

std::string format_table(const RunReport& report);
std::string format_json(const RunReport& report);

}  // namespace spattn::app
