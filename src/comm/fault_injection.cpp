#include "comm/fault_injection.hpp"

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "spattn/error.hpp"

namespace spattn {

namespace {

constexpr const char* kAllowedForm =
    "allowed: '<kill|stall>:<rank>:<step>[:<seconds>]', e.g. 'stall:1:3:10' (world rank 1 sleeps 10 s when it "
    "starts its transfer 3, counting from 0) or 'kill:2:0'";

std::vector<std::string> fields_of(const std::string& text) {
  std::vector<std::string> fields;
  std::stringstream stream(text);
  std::string field;
  while (std::getline(stream, field, ':')) fields.push_back(field);
  return fields;
}

// A whole field as a number, or false.
template <typename Number>
bool parse_number(const std::string& field, Number& value) {
  std::istringstream stream(field);
  stream >> value;
  return !field.empty() && stream && stream.eof();
}

}  // namespace

std::shared_ptr<FaultPlan> fault_plan_from_environment() {
  const char* text = std::getenv("SPATTN_FAULT");
  if (text == nullptr || *text == '\0') return nullptr;
  const std::vector<std::string> fields = fields_of(text);
  auto plan = std::make_shared<FaultPlan>();
  bool valid = fields.size() == 3 || fields.size() == 4;
  if (valid) {
    valid = fields[0] == "kill" || fields[0] == "stall";
    plan->action = fields[0] == "kill" ? FaultPlan::Action::kill : FaultPlan::Action::stall;
  }
  valid = valid && parse_number(fields[1], plan->rank) && plan->rank >= 0;
  valid = valid && parse_number(fields[2], plan->step) && plan->step >= 0;
  if (valid && fields.size() == 4) {
    valid = plan->action == FaultPlan::Action::stall && parse_number(fields[3], plan->stall_seconds) &&
            plan->stall_seconds >= 0;
  }
  SPATTN_CHECK(valid, "SPATTN_FAULT='" << text << "' is not a fault to inject; " << kAllowedForm);
  return plan;
}

void before_transfer(FaultPlan* plan, int process_rank) {
  if (plan == nullptr || process_rank != plan->rank) return;
  if (plan->transfers_started.fetch_add(1) != plan->step) return;
  if (plan->action == FaultPlan::Action::kill) std::raise(SIGKILL);
  if (plan->stall_seconds < 0) {
    for (;;) std::this_thread::sleep_for(std::chrono::hours(1));
  }
  std::this_thread::sleep_for(std::chrono::duration<double>(plan->stall_seconds));
  // It ends as a stalled rank's call would, in its own timeout.
  std::ostringstream message;
  message << "world rank " << process_rank << " stalled for " << plan->stall_seconds << " s before its transfer "
          << plan->step << " as SPATTN_FAULT asked, and gives up the call";
  detail::throw_timeout_error(message.str());
}

}  // namespace spattn
