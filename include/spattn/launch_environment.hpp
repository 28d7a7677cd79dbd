#pragma once
/// \file launch_environment.hpp
/// How a job's processes learn their ranks when no MPI launcher started them: from the environment
/// variables that torchrun sets (and that Intel's PyTorch bindings for oneCCL read), so that torchrun
/// or a plain shell loop can start spattn's ranks.

#include <string>

namespace spattn {

/// A job described by torchrun's variables. spattn takes torchrun's names rather than SPATTN_-prefixed
/// ones (which name spattn's own settings, such as SPATTN_TIMEOUT): the launchers that start such jobs
/// already set them, and a rank must not need a second copy of what its launcher told it.
struct LaunchEnvironment {
  int rank = 0;             ///< RANK: 0..world_size-1, distinct in every process
  int world_size = 1;       ///< WORLD_SIZE: the number of processes, at least 1
  std::string master_addr;  ///< MASTER_ADDR: host name or IPv4 address of rank 0's machine
  int master_port = 0;      ///< MASTER_PORT: 1..65535
  /// Where rank 0 may listen for the others: MASTER_PORT itself, or, under torchrun's agent store
  /// (TORCHELASTIC_USE_AGENT_STORE=True), whose agent already listens at MASTER_PORT with its own store
  /// protocol that spattn does not speak, the first free one of MASTER_PORT+1..MASTER_PORT+count.
  /// torchrun picked MASTER_PORT free but not the ports beside it, and any local connection may hold one.
  int first_rendezvous_port = 0;
  int rendezvous_port_count = 1;
};

/// This process's rank as its launcher's environment tells it before any communicator exists: an
/// MPI launcher's (OMPI_COMM_WORLD_RANK, PMIX_RANK, PMI_RANK), else RANK; 0 when none is set or
/// the value is not a number.
int launcher_rank();

/// Whether this process was started without an MPI launcher and with WORLD_SIZE set (torchrun, a
/// shell loop): its ranks then come from launch_environment(). Under an MPI launcher MPI's ranks
/// win, whatever else is set.
bool launched_by_environment();

/// RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT, checked before any communication: throws Error
/// naming the variable, its value and what is allowed when one is missing or out of range.
LaunchEnvironment launch_environment();

}  // namespace spattn
