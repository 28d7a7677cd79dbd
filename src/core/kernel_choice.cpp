#include <array>
#include <utility>

#include "spattn/attention_options.hpp"
#include "spattn/error.hpp"

namespace spattn {
namespace {

constexpr std::array<std::pair<KernelChoice, const char*>, 3> kKernelChoiceNames = {{
    {KernelChoice::automatic, "auto"},
    {KernelChoice::own, "own"},
    {KernelChoice::cudnn, "cudnn"},
}};

std::string allowed_names() {
  std::string names;
  for (const auto& [choice, name] : kKernelChoiceNames) names += (names.empty() ? "" : ", ") + std::string(name);
  return names;
}

}  // namespace

std::string kernel_choice_name(KernelChoice kernel) {
  for (const auto& [choice, name] : kKernelChoiceNames)
    if (choice == kernel) return name;
  SPATTN_FAIL("kernel choice " << static_cast<int>(kernel) << " is none of " << allowed_names());
}

KernelChoice parse_kernel_choice(const std::string& name) {
  for (const auto& [choice, choice_name] : kKernelChoiceNames)
    if (name == choice_name) return choice;
  SPATTN_FAIL("unknown kernel '" << name << "'; allowed: " << allowed_names());
}

}  // namespace spattn
