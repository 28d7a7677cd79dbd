#pragma once
/// \file profile.hpp
/// Where the time of one distributed attention call went.

#include <vector>

namespace spattn {

/// Time of one strategy step, on the device's clock (GPU events; the host clock on the CPU).
struct StepTiming {
  double compute_ms = 0;    // block kernels and merges of this step
  double comm_wait_ms = 0;  // exposed transfer time: the device stood waiting for this step's transfers
  double bytes_sent = 0;    // payload this rank sent in the transfers started at this step
  int messages_sent = 0;    // point-to-point messages (a collective counts one per peer)
};

/// One stretch of a profiled call's timeline: a compute section or a wait on transfers.
struct ProfileSpan {
  enum class Kind { compute, comm_wait };
  int step = 0;
  Kind kind = Kind::compute;
  double start_ms = 0;  // since the call began, on the device's clock
  double end_ms = 0;
};

/// Filled by a call that is given one: total wall time, the part spent waiting on
/// communication, the part spent computing, what this rank sent, and per step when `per_step`
/// is set. A profiled call synchronizes with its device at its start and end only, so that it
/// keeps the overlap of transfers and compute that it measures.
struct Profile {
  bool per_step = false;  // in: record `steps` and `spans`
  double total_ms = 0;
  double comm_wait_ms = 0;
  double compute_ms = 0;
  double bytes_sent = 0;
  int messages_sent = 0;
  std::vector<StepTiming> steps;
  std::vector<ProfileSpan> spans;  // with per_step: the call's timeline, in the order it ran
};

}  // namespace spattn
