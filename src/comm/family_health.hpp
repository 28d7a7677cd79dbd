#pragma once
// Why a communicator, and every one split from the same one, cannot be used again: they serve
// the same plans, so one giving up on a peer retires them all. Shared by the MPI and NCCL
// communicators; NCCL's watchdog thread writes it while calls read it.

#include <mutex>
#include <string>

namespace spattn {

class FamilyHealth {
 public:
  /// Keeps the first failure (the later ones follow from it) and marks the process as one that
  /// gave up on a peer.
  void record(const std::string& failure);

  /// The first failure recorded, "" while there is none.
  std::string failure() const;

  /// Throws the first failure, if any.
  void check() const;

 private:
  mutable std::mutex mutex_;
  std::string failure_;
};

/// Whether any communicator of this process gave up on a peer. Then the process must not call
/// MPI_Finalize: Open MPI's finalize waits for every process of the job, the lost peer too.
bool process_gave_up_on_a_peer();

}  // namespace spattn
