// spattn: run distributed exact attention under mpirun (or torchrun, over oneCCL) and check it; see
// `spattn help`.
// Exit status: 0 success, 1 a runtime error or a failed --check, 2 a usage error.

#include <algorithm>
#include <chrono>
#include <iostream>
#include <string>
#include <thread>

#include "cli_options.hpp"
#include "info_command.hpp"
#include "plan_command.hpp"
#include "run_command.hpp"
#include "spattn/communication_timeout.hpp"
#include "spattn/error.hpp"
#include "spattn/launch_environment.hpp"

namespace {

// Messages are identical on every rank (the library agrees on them), so only the first rank
// prints them; the launcher's environment tells which rank this is before any communicator exists.
bool is_first_rank() { return spattn::launcher_rank() == 0; }

// The first rank to end makes the launcher end the job, and with it the ranks still waiting out
// their own timeout, which began up to a few steps later: give them that long to report too.
void wait_for_the_others_to_report() {
  constexpr double kLongestGraceSeconds = 5.0;
  double timeout = kLongestGraceSeconds;
  try {
    timeout = spattn::communication_timeout_seconds();
  } catch (const spattn::Error&) {  // a bad SPATTN_TIMEOUT was reported already
  }
  std::this_thread::sleep_for(std::chrono::duration<double>(std::min(timeout, kLongestGraceSeconds)));
}

}  // namespace

int main(int argc, char** argv) {
  using spattn::app::CliCommand;
  try {
    const CliCommand command = spattn::app::parse_command_line(argc, argv);
    switch (command.kind) {
      case CliCommand::Kind::help:
        if (is_first_rank()) std::cout << spattn::app::usage_text();
        return 0;
      case CliCommand::Kind::info:
        if (is_first_rank()) std::cout << spattn::app::info_text(command.json) << std::endl;
        return 0;
      case CliCommand::Kind::run:
        return spattn::app::run_command(command.run);
      case CliCommand::Kind::plan: {
        if (is_first_rank()) std::cout << spattn::app::plan_text(command.plan) << std::endl;
        const std::string refusal = spattn::app::plan_refusal(command.plan);
        if (refusal.empty()) return 0;
        if (is_first_rank()) std::cerr << spattn::kErrorPrefix << refusal << std::endl;
        return 1;
      }
    }
  } catch (const spattn::app::UsageError& error) {
    if (is_first_rank()) std::cerr << error.what() << "\n";
    return 2;
  } catch (const spattn::app::LaunchError& error) {
    std::cerr << error.what() << std::endl;
    return 1;
  } catch (const spattn::TimeoutError& error) {
    // Except a rank's own error, which no agreement could carry (the first rank may be the peer
    // it gave up on): every rank prints its own.
    std::cerr << error.what() << std::endl;
    wait_for_the_others_to_report();
    return 1;
  } catch (const spattn::Error& error) {
    if (is_first_rank()) std::cerr << error.what() << std::endl;
    return 1;
  } catch (const std::exception& error) {
    std::cerr << "spattn: unexpected failure: " << error.what() << "\n";
    return 1;
  }
  return 0;
}
