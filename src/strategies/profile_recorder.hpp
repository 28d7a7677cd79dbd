#pragma once
// Fills a Profile (when the caller asked for one) with wall time split into compute and waiting
// on communication, per step on request. On a device that runs asynchronously, a profiled call
// synchronizes the host with the kernels' stream at the end of every timed section, so that each
// time is the device's; a call without a Profile never synchronizes.

#include <chrono>
#include <string>
#include <utility>

#include "kernels/block_kernels.hpp"
#include "spattn/communicator.hpp"
#include "spattn/error.hpp"
#include "spattn/profile.hpp"

namespace spattn {

class ProfileRecorder {
 public:
  using Clock = std::chrono::steady_clock;

  /// Starts the call's clock once the work queued before the call has run; `profile` may be
  /// null (then nothing is recorded). `call` ("forward" or "backward") names the call in errors.
  ProfileRecorder(Profile* profile, int steps, BlockKernels& kernels, const char* call)
      : profile_(profile), kernels_(kernels), steps_(steps), call_(call) {
    if (profile_) kernels_.synchronize();
    call_start_ = Clock::now();
    if (!profile_) return;
    *profile_ = Profile{profile_->per_step, 0, 0, 0, 0, 0, {}};
    if (profile_->per_step) profile_->steps.assign(static_cast<std::size_t>(steps), StepTiming{});
  }

  /// Runs `work`, counting its time as compute of `step`.
  template <typename Work>
  void compute(int step, Work&& work) {
    timed(step, &StepTiming::compute_ms, &Profile::compute_ms, std::forward<Work>(work));
  }

  /// Waits on `transfer` through `communicator`, counting the time as waiting on communication in
  /// `step`. An Error from the wait (a peer that never came) gets the step it happened at, which
  /// says how far the call got, unless it names a step already: a device communicator may report
  /// here a transfer of an earlier step that failed while the host went on.
  void wait(int step, Communicator& communicator, PendingTransfer& transfer) {
    transfer.site = TransferSite{call_, step, steps_};
    try {
      timed(step, &StepTiming::comm_wait_ms, &Profile::comm_wait_ms, [&] { communicator.wait(transfer); });
    } catch (const TimeoutError& error) {
      if (names_a_site(error.what())) throw;
      throw TimeoutError(error.what() + describe_site(transfer.site));
    } catch (const Error& error) {
      if (names_a_site(error.what())) throw;
      throw Error(error.what() + describe_site(transfer.site));
    }
  }

  /// Counts a transfer started at `step`: `bytes` of payload in `messages` messages.
  void sent(int step, double bytes, int messages) {
    if (!profile_) return;
    profile_->bytes_sent += bytes;
    profile_->messages_sent += messages;
    if (profile_->per_step && step >= 0 && step < static_cast<int>(profile_->steps.size())) {
      profile_->steps[static_cast<std::size_t>(step)].bytes_sent += bytes;
      profile_->steps[static_cast<std::size_t>(step)].messages_sent += messages;
    }
  }

  /// Folds the profile of a nested call (a strategy inside this one) into `step`, after the
  /// nested call was timed whole as compute: its waiting becomes communication, and what it
  /// sent counts as sent at `step`.
  void fold_nested(int step, const Profile& nested) {
    if (!profile_) return;
    const double waiting = nested.comm_wait_ms;
    profile_->compute_ms -= waiting;
    profile_->comm_wait_ms += waiting;
    if (profile_->per_step && step >= 0 && step < static_cast<int>(profile_->steps.size())) {
      profile_->steps[static_cast<std::size_t>(step)].compute_ms -= waiting;
      profile_->steps[static_cast<std::size_t>(step)].comm_wait_ms += waiting;
    }
    sent(step, nested.bytes_sent, nested.messages_sent);
  }

  /// Sets the call's total time.
  void finish() {
    if (profile_) profile_->total_ms = milliseconds_since(call_start_);
  }

 private:
  static double milliseconds_since(Clock::time_point start) {
    return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
  }

  template <typename Work>
  void timed(int step, double StepTiming::*step_field, double Profile::*total_field, Work&& work) {
    if (!profile_) {
      work();
      return;
    }
    const Clock::time_point start = Clock::now();
    work();
    kernels_.synchronize();
    const double elapsed = milliseconds_since(start);
    profile_->*total_field += elapsed;
    if (profile_->per_step && step >= 0 && step < static_cast<int>(profile_->steps.size()))
      profile_->steps[static_cast<std::size_t>(step)].*step_field += elapsed;
  }

  Profile* profile_;
  BlockKernels& kernels_;
  int steps_;
  const char* call_;
  Clock::time_point call_start_;
};

}  // namespace spattn
