#pragma once
// A switch for testing what the other ranks do when one rank dies or stops: the environment
// variable SPATTN_FAULT="<action>:<rank>:<step>[:<seconds>]" makes the process of world rank
// <rank> act when it starts its <step>-th transfer (0-based), counted over a communicator made
// while the variable was set and the communicators split from it. <action> is kill (the process
// ends at once on SIGKILL, as a crashed or preempted rank does) or stall (it sleeps, as a rank
// stuck elsewhere does: until it is killed, or for <seconds> and then its call fails with an Error
// without starting that transfer, so that it never joins a transfer its peers gave up on).

#include <atomic>
#include <cstdint>
#include <memory>

namespace spattn {

struct FaultPlan {
  enum class Action { kill, stall };
  Action action = Action::stall;
  int rank = 0;
  int64_t step = 0;
  double stall_seconds = -1;  // negative: until killed
  std::atomic<int64_t> transfers_started{0};
};

/// The plan SPATTN_FAULT asks for, or null when it is unset or empty. Throws Error naming the
/// value and the allowed form when it is malformed.
std::shared_ptr<FaultPlan> fault_plan_from_environment();

/// Counts a transfer that the process of world rank `process_rank` starts, and carries out the
/// plan when it is this process's chosen one (a timed stall then throws Error). Does nothing for
/// a null plan.
void before_transfer(FaultPlan* plan, int process_rank);

}  // namespace spattn
