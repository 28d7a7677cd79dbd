#include <string>

#include "spattn/communicator.hpp"

namespace spattn {

std::string describe_site(const TransferSite& site) {
  if (site.call == nullptr) return "";
  return " (at step " + std::to_string(site.step) + " of the " + site.call + "'s steps 0-" +
         std::to_string(site.steps - 1) + ")";
}

}  // namespace spattn
