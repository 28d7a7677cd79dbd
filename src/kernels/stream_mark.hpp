#pragma once
// A point in the order of a BlockKernels' work, read as a time once that work has run. A Profile
// is measured with marks, so that timing a call does not synchronize inside it: synchronizing at
// every section would cost the very overlap of transfers and compute that it measures.

#include <chrono>

namespace spattn {

class StreamMark {
 public:
  virtual ~StreamMark() = default;
  /// Milliseconds from `earlier` (a mark of the same kernels) to this one. Only once the kernels
  /// have run past both (BlockKernels::synchronize).
  virtual double milliseconds_since(const StreamMark& earlier) const = 0;
};

/// The mark of kernels that run on the calling thread: the host clock when it was made.
class HostClockMark final : public StreamMark {
 public:
  HostClockMark() : time_(std::chrono::steady_clock::now()) {}
  double milliseconds_since(const StreamMark& earlier) const override {
    return std::chrono::duration<double, std::milli>(time_ - static_cast<const HostClockMark&>(earlier).time_).count();
  }

 private:
  std::chrono::steady_clock::time_point time_;
};

}  // namespace spattn
