#include "comm/family_health.hpp"

#include <atomic>

#include "spattn/error.hpp"

namespace spattn {

namespace {

std::atomic<bool> gave_up_on_a_peer{false};

}  // namespace

void FamilyHealth::record(const std::string& failure) {
  gave_up_on_a_peer = true;
  std::lock_guard<std::mutex> lock(mutex_);
  if (failure_.empty()) failure_ = failure;
}

std::string FamilyHealth::failure() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return failure_;
}

void FamilyHealth::check() const {
  const std::string first = failure();
  SPATTN_CHECK(first.empty(), first);
}

bool process_gave_up_on_a_peer() { return gave_up_on_a_peer; }

}  // namespace spattn
