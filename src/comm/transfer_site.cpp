#include <string>

#include "spattn/communicator.hpp"

namespace spattn {

namespace {

constexpr const char* kSiteOpening = " (at step ";

}  // namespace

std::string describe_site(const TransferSite& site) {
  if (site.call == nullptr) return "";
  return kSiteOpening + std::to_string(site.step) + " of the " + site.call + "'s steps 0-" +
         std::to_string(site.steps - 1) + ")";
}

bool names_a_site(const std::string& message) { return message.find(kSiteOpening) != std::string::npos; }

}  // namespace spattn
