#pragma once
// The communicator of every rank of the test run (MPI_COMM_WORLD).

#include "spattn/mpi_communicator.hpp"

namespace spattn {

MpiCommunicator& world();

}  // namespace spattn
