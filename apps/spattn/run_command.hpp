#pragma once

#include "cli_options.hpp"

namespace spattn::app {

/// `spattn run`: a distributed attention run over MPI_COMM_WORLD with optional check, outputs
/// and timing report. Collective. Returns the exit status (0, or 1 when --check fails).
int run_command(const RunOptions& options);

}  // namespace spattn::app
