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

}  // namespace spattn::app
