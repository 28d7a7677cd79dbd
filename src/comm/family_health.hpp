#pragma once
// Why a communicator, and every one split from the same one, cannot be used again: they serve
// the same plans, so one giving up on a peer retires them all. Shared by the MPI and NCCL
// communicators; NCCL's watchdog thread writes it while calls read it.

#include <mutex>
#include <string>

#include "spattn/error.hpp"

namespace spattn {

/// What retired a family: this rank gave up waiting for a peer (thrown as TimeoutError), or a
/// transfer failed otherwise (thrown as Error).
enum class FailureKind { timeout, transfer_error };

class FamilyHealth {
 public:
  /// Keeps the first failure (the later ones follow from it) and marks the process as one that
  /// gave up on a peer.
  void record(const std::string& failure, FailureKind kind);

  /// The first failure recorded, "" while there is none.
  std::string failure() const;

  /// Throws the first failure, if any, as the kind it was recorded as (TimeoutError or Error),
  /// with the message `describe(failure)`.
  template <class Describe>
  void check(Describe describe) const {
    FailureKind kind = FailureKind::transfer_error;
    const std::string first = failure_and_kind(kind);
    if (first.empty()) return;
    if (kind == FailureKind::timeout) detail::throw_timeout_error(describe(first));
    SPATTN_FAIL(describe(first));
  }
  void check() const {
    check([](const std::string& failure) { return failure; });
  }

 private:
  std::string failure_and_kind(FailureKind& kind) const;

  mutable std::mutex mutex_;
  std::string failure_;
  FailureKind kind_ = FailureKind::transfer_error;
};

/// Whether any communicator of this process gave up on a peer. Then the process must not call
/// MPI_Finalize: Open MPI's finalize waits for every process of the job, the lost peer too.
bool process_gave_up_on_a_peer();

}  // namespace spattn
