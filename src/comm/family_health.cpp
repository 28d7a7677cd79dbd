#include "comm/family_health.hpp"

#include <atomic>

namespace spattn {

namespace {

std::atomic<bool> gave_up_on_a_peer{false};

}  // namespace

void FamilyHealth::record(const std::string& failure, FailureKind kind) {
  gave_up_on_a_peer = true;
  std::lock_guard<std::mutex> lock(mutex_);
  if (!failure_.empty()) return;
  failure_ = failure;
  kind_ = kind;
}

std::string FamilyHealth::failure() const {
  FailureKind kind;
  return failure_and_kind(kind);
}

std::string FamilyHealth::failure_and_kind(FailureKind& kind) const {
  std::lock_guard<std::mutex> lock(mutex_);
  kind = kind_;
  return failure_;
}

bool process_gave_up_on_a_peer() { return gave_up_on_a_peer; }

}  // namespace spattn
