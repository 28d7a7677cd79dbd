#include "info_command.hpp"

#include <sstream>

#include "json_string.hpp"
#include "spattn/build_info.hpp"

namespace spattn::app {

namespace {

std::string joined(const std::vector<std::string>& items, const char* separator, const char* quote) {
  std::string text;
  for (const std::string& item : items) text += (text.empty() ? "" : separator) + (quote + item + quote);
  return text;
}

std::string block_kernels_json(const std::vector<BlockKernelsInfo>& block_kernels) {
  std::string json;
  for (const BlockKernelsInfo& kernels : block_kernels) {
    json += (json.empty() ? "{\"name\": " : ", {\"name\": ") + json_string(kernels.name) +
            ", \"supports\": " + json_string(kernels.supports) + "}";
  }
  return "[" + json + "]";
}

}  // namespace

std::string info_text(bool json) {
  const BuildInfo info = build_info();
  std::ostringstream text;
  if (json) {
    text << "{\"version\": \"" << info.version << "\", \"kernel_backends\": [" << joined(info.kernel_backends, ", ", "\"")
         << "], \"block_kernels\": " << block_kernels_json(info.block_kernels)
         << ", \"communicators\": [" << joined(info.communicators, ", ", "\"") << "], \"mpi\": \"" << info.mpi_library
         << "\", \"blas\": \"" << info.blas << "\", \"devices\": [" << joined(info.devices, ", ", "\"")
         << "], \"cpu_cores\": " << info.cpu_cores
         << ", \"cpu_threads\": " << info.cpu_threads << "}";
    return text.str();
  }
  text << "spattn " << info.version << "\n"
       << "  kernel backends: " << joined(info.kernel_backends, ", ", "") << "\n";
  const char* label = "  block kernels:   ";
  for (const BlockKernelsInfo& kernels : info.block_kernels) {
    text << label << kernels.name << ": " << kernels.supports << "\n";
    label = "                   ";
  }
  text << "  communicators:   " << joined(info.communicators, ", ", "") << "\n"
       << "  MPI:             " << info.mpi_library << "\n"
       << "  BLAS:            " << info.blas << "\n"
       << "  devices:         " << joined(info.devices, ", ", "") << " (" << info.cpu_cores << " CPU hardware threads)\n"
       << "  CPU threads:     " << info.cpu_threads << " per process (--threads or OMP_NUM_THREADS)\n";
  return text.str();
}

}  // namespace spattn::app
