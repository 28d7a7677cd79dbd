#pragma once

#include "cli_options.hpp"
#include "spattn/error.hpp"

namespace spattn::app {

/// An error of one process before its ranks are formed (a bad RANK in a job started without
/// mpirun, say): no communicator exists to agree on it, so every process prints its own.
class LaunchError : public Error {
 public:
  using Error::Error;
};

/// `spattn run`: a distributed attention run with optional check, outputs and timing report, over
/// MPI_COMM_WORLD, or over oneCCL in a job started without mpirun (RANK, WORLD_SIZE, MASTER_ADDR and
/// MASTER_PORT set, as torchrun sets them). Collective. Returns the exit status (0, or 1 when
/// --check fails).
int run_command(const RunOptions& options);

}  // namespace spattn::app
