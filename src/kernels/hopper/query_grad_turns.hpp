#pragma once
// The device memory of the own backward's deterministic mode: one turn counter per (batch, query
// head, query tile) of a launch. The CTA of key tile t adds its dQ of a query tile when the
// counter says that every key tile before t that adds to the tile has added, then moves the
// counter on: dq gathers its key tiles' contributions in one order, the same bits every run, for
// a wait on the previous key tile per query tile (its cost: bench/kernel-notes.md). Launches
// that share one must run one after another (one stream, or streams ordered by events); whoever
// owns the stream owns its turns (CudaBlockKernels holds one in deterministic mode).

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "spattn/device.hpp"

namespace spattn::cuda::hopper {

class QueryGradTurns {
 public:
  /// Nothing allocated yet: the first launch allocates what it needs on `device`.
  explicit QueryGradTurns(const Device& device) : device_(device) {}
  ~QueryGradTurns();
  QueryGradTurns(const QueryGradTurns&) = delete;
  QueryGradTurns& operator=(const QueryGradTurns&) = delete;

  /// `count` counters, zeroed on `stream` before the work enqueued after this call; the memory
  /// grows when a launch needs more (after the stream's queued work, which may still use it).
  int* zeroed(int64_t count, cudaStream_t stream);

  const Device& device() const { return device_; }

 private:
  Device device_;
  int* turns_ = nullptr;
  std::size_t capacity_ = 0;  // counters
};

}  // namespace spattn::cuda::hopper
