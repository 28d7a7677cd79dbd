#pragma once
/// \file profile.hpp
/// Where the time of one distributed attention call went.

#include <vector>

namespace spattn {

/// Time of one strategy step.
struct StepTiming {
  double compute_ms = 0;    // block kernels and merges of this step
  double comm_wait_ms = 0;  // time blocked waiting for this step's transfers
  double bytes_sent = 0;    // payload this rank sent in the transfers started at this step
  int messages_sent = 0;    // point-to-point messages (a collective counts one per peer)
};

/// Filled by a call that is given one: total wall time, the part spent waiting on
/// communication, the part spent computing, what this rank sent, and per step when `per_step`
/// is set.
struct Profile {
  bool per_step = false;  // in: record `steps`
  double total_ms = 0;
  double comm_wait_ms = 0;
  double compute_ms = 0;
  double bytes_sent = 0;
  int messages_sent = 0;
  std::vector<StepTiming> steps;
};

}  // namespace spattn
