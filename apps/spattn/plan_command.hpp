#pragma once

#include <string>

#include "cli_options.hpp"

namespace spattn::app {

/// `spattn plan`: the rotation schedule of one algorithm (its cycles, the out and in mappings,
/// the source of every slot at every step, bytes per link), or with --compare the modelled cost
/// of every strategy (src/schedule/cost_model.hpp); a readable text or one JSON object. Throws
/// Error when the schedule does not exist (hamilton on 4 or 6 ranks) or the ranks do not fit on
/// the preset's cluster.
std::string plan_text(const PlanOptions& options);

/// Why `spattn run` would refuse the one strategy of a plan without --compare (its message,
/// schedule/strategy_rules.hpp), or "": `spattn plan` prints the plan and then exits 1 with it.
std::string plan_refusal(const PlanOptions& options);

}  // namespace spattn::app
