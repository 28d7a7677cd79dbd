#include "core/name_table.hpp"
#include "spattn/attention_options.hpp"

namespace spattn {
namespace {

const NameTable<KernelChoice>& kernel_choice_names() {
  static const NameTable<KernelChoice> table(
      "kernel", {{KernelChoice::automatic, "auto"}, {KernelChoice::own, "own"}, {KernelChoice::cudnn, "cudnn"}});
  return table;
}

}  // namespace

std::string kernel_choice_name(KernelChoice kernel) { return kernel_choice_names().name(kernel); }

KernelChoice parse_kernel_choice(const std::string& name) { return kernel_choice_names().parse(name); }

}  // namespace spattn
