#pragma once
// The counters of the own forward's dynamic schedule (QueryTileSchedule::counter), one pair per
// (device, stream). Launches on one stream run one after another and each leaves its counters at
// 0, so a stream needs one pair; launches on different streams may overlap and get different pairs.

#include <cuda_runtime_api.h>

namespace spattn::cuda::hopper {

/// Two unsigned ints in the current device's memory for launches on `stream`, allocated and
/// zeroed (on `stream`) at the stream's first launch and kept for the life of the process (a
/// stream handle reused after cudaStreamDestroy finds them at 0). nullptr while `stream` is being
/// captured into a CUDA graph: a graph may be replayed on any stream, beside launches that use
/// the stream's pair, so captured launches take the static schedule.
unsigned* query_tile_counter(cudaStream_t stream);

}  // namespace spattn::cuda::hopper
