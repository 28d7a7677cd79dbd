#pragma once
/// \file build_info.hpp
/// What this build of spattn contains and how it runs on this machine.

#include <string>
#include <vector>

namespace spattn {

/// One set of block kernels in this build, and what it computes, in words.
struct BlockKernelsInfo {
  std::string name;      // "cpu"; on CUDA the KernelChoice it is chosen by: "own (Hopper sm_90)", "cudnn"
  std::string supports;  // dtypes, head dims, forward and backward
};

struct BuildInfo {
  std::string version;                     // e.g. "0.1.0"
  std::vector<std::string> kernel_backends;  // devices with block kernels, e.g. {"cpu"}
  std::vector<BlockKernelsInfo> block_kernels;  // every set of kernels, the CPU's first
  std::vector<std::string> communicators;    // e.g. {"mpi"}
  std::string mpi_library;                 // the MPI implementation's own version line
  std::string blas;                        // BLAS used by the CPU kernels
  std::vector<std::string> devices;        // "cpu", then "cuda:N <name>" for each visible GPU
  int cpu_threads = 1;                     // threads the CPU kernels use per rank
  int cpu_cores = 1;                       // hardware threads of this machine
};

BuildInfo build_info();

/// Threads the CPU kernels use in this process (OpenMP); at least 1.
void set_cpu_threads(int threads);
int cpu_threads();

}  // namespace spattn
