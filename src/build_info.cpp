// Reports on every layer of the build, so it sits above them.
#include "spattn/build_info.hpp"

#include <mpi.h>
#include <omp.h>

#include <algorithm>
#include <thread>

#include "spattn/error.hpp"

namespace spattn {

BuildInfo build_info() {
  BuildInfo info;
  info.version = SPATTN_VERSION;
  info.kernel_backends = {"cpu"};
  info.communicators = {"mpi"};
  char library[MPI_MAX_LIBRARY_VERSION_STRING];
  int length = 0;
  MPI_Get_library_version(library, &length);
  info.mpi_library = std::string(library, static_cast<std::size_t>(length));
  info.mpi_library = info.mpi_library.substr(0, info.mpi_library.find_first_of(",\n"));
  info.blas = "OpenBLAS (OpenMP)";
  info.cpu_threads = cpu_threads();
  info.cpu_cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  return info;
}

void set_cpu_threads(int threads) {
  SPATTN_CHECK(threads >= 1, "CPU threads must be at least 1, got " << threads);
  omp_set_num_threads(threads);
}

int cpu_threads() { return std::max(1, omp_get_max_threads()); }

}  // namespace spattn
