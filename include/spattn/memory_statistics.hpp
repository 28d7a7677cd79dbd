#pragma once
/// \file memory_statistics.hpp
/// The memory spattn's plans hold on a device: their workspaces and their block kernels' (cuDNN's
/// workspace included), counted at every allocation and release. Tensors the caller passes are
/// not in it, nor the few bytes of a communicator's control plane, nor what other libraries
/// allocate for themselves (NCCL's channels, cuDNN's handle).

#include <cstdint>

#include "spattn/device.hpp"

namespace spattn {

struct MemoryStatistics {
  int64_t allocations = 0;        ///< allocations made so far (each one is also a chance to synchronize)
  int64_t bytes_in_use = 0;       ///< held now
  int64_t peak_bytes_in_use = 0;  ///< the most held at once since the process started or reset_peak_memory
};

/// What spattn holds on `device` now (cpu: the host workspaces).
MemoryStatistics memory_statistics(const Device& device);

/// Starts a new peak: peak_bytes_in_use becomes bytes_in_use.
void reset_peak_memory(const Device& device);

}  // namespace spattn
