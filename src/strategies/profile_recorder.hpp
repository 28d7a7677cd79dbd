#pragma once
// Fills a Profile (when the caller asked for one) with the call's time split into compute and
// waiting on communication, per step and as a timeline on request. Each section is timed by two
// marks of the kernels (StreamMark: GPU events on a device that runs asynchronously), read when
// the call ends; the call synchronizes the host with the kernels' stream at its start and end
// only, so that a profiled call keeps the overlap of transfers and compute. A call without a
// Profile never synchronizes.

#include <chrono>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "kernels/block_kernels.hpp"
#include "kernels/stream_mark.hpp"
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
    *profile_ = Profile{profile_->per_step, 0, 0, 0, 0, 0, {}, {}};
    if (profile_->per_step) profile_->steps.assign(static_cast<std::size_t>(steps), StepTiming{});
    start_mark_ = kernels_.mark();
  }

  /// Runs `work`, counting its time as compute of `step`.
  template <typename Work>
  void compute(int step, Work&& work) {
    timed(step, ProfileSpan::Kind::compute, std::forward<Work>(work));
  }

  /// Waits on `transfer` through `communicator`, counting the time as waiting on communication in
  /// `step`. An Error from the wait (a peer that never came) gets the step it happened at, which
  /// says how far the call got, unless it names a step already: a device communicator may report
  /// here a transfer of an earlier step that failed while the host went on.
  void wait(int step, Communicator& communicator, PendingTransfer& transfer) {
    transfer.site = TransferSite{call_, step, steps_};
    try {
      timed(step, ProfileSpan::Kind::comm_wait, [&] { communicator.wait(transfer); });
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
    nested_waits_.emplace_back(step, nested.comm_wait_ms);
    sent(step, nested.bytes_sent, nested.messages_sent);
  }

  /// Waits for the call's work, then reads the marks into the profile and sets its total time.
  void finish() {
    if (!profile_) return;
    kernels_.synchronize();
    profile_->total_ms = milliseconds_since(call_start_);
    for (const Section& section : sections_) {
      const double start = section.begin->milliseconds_since(*start_mark_);
      const double end = section.end->milliseconds_since(*start_mark_);
      const bool waiting = section.kind == ProfileSpan::Kind::comm_wait;
      add(section.step, waiting ? &StepTiming::comm_wait_ms : &StepTiming::compute_ms,
          waiting ? &Profile::comm_wait_ms : &Profile::compute_ms, end - start);
      if (profile_->per_step) profile_->spans.push_back(ProfileSpan{section.step, section.kind, start, end});
    }
    for (const auto& [step, waiting] : nested_waits_) {
      add(step, &StepTiming::compute_ms, &Profile::compute_ms, -waiting);
      add(step, &StepTiming::comm_wait_ms, &Profile::comm_wait_ms, waiting);
    }
  }

 private:
  static double milliseconds_since(Clock::time_point start) {
    return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
  }

  // One timed section: the marks before and after its work.
  struct Section {
    int step;
    ProfileSpan::Kind kind;
    std::unique_ptr<StreamMark> begin, end;
  };

  template <typename Work>
  void timed(int step, ProfileSpan::Kind kind, Work&& work) {
    if (!profile_) {
      work();
      return;
    }
    std::unique_ptr<StreamMark> begin = kernels_.mark();
    work();
    sections_.push_back(Section{step, kind, std::move(begin), kernels_.mark()});
  }

  // Adds `milliseconds` to the call's `total_field` and, per step, to `step`'s `step_field`.
  void add(int step, double StepTiming::*step_field, double Profile::*total_field, double milliseconds) {
    profile_->*total_field += milliseconds;
    if (profile_->per_step && step >= 0 && step < static_cast<int>(profile_->steps.size()))
      profile_->steps[static_cast<std::size_t>(step)].*step_field += milliseconds;
  }

  Profile* profile_;
  BlockKernels& kernels_;
  int steps_;
  const char* call_;
  Clock::time_point call_start_;
  std::unique_ptr<StreamMark> start_mark_;
  std::vector<Section> sections_;
  std::vector<std::pair<int, double>> nested_waits_;  // (step, the nested call's waiting)
};

}  // namespace spattn
