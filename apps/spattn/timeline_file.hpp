#pragma once
// `spattn run --timeline FILE`: every rank's timeline of its last timed call (Profile::spans), in
// one CSV that rank 0 writes (bench/plot_timeline.py draws it).

#include <fstream>
#include <string>

#include "spattn/communicator.hpp"
#include "strategy_runner.hpp"

namespace spattn::app {

/// Rank 0 opens `path` for writing, before any transfer of the run: a path it cannot write ends
/// every rank with an error that names it. Other ranks get a closed stream.
std::ofstream open_timeline(Communicator& world, const std::string& path);

/// Gathers every rank's spans of `run` to rank 0, which writes them to `file` as rows of
/// rank,pass,step,kind,start_ms,end_ms,step_bytes_sent (kind: compute or comm_wait; the times
/// since the rank's call began, on its device's clock; the bytes the rank sent at that step).
/// Returns rank 0's error in writing (empty: none), for the run's final agreement.
std::string write_timeline(Communicator& world, std::ofstream& file, const StrategyRun& run);

}  // namespace spattn::app
