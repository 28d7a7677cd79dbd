#pragma once
// One case made ready to run on any target: the host tensors its calls read and write (inputs
// drawn at random, written outputs poisoned with NaN, accumulated ones holding random values),
// its operation's BlockKernels calls, and, for the test mode, what the fp64 reference expects of
// each output. The test and perf modes differ only in what they do around the calls.

#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include "block_cases.hpp"
#include "device_tensor.hpp"
#include "error_bounds.hpp"
#include "host_tensor.hpp"
#include "kernels/block_kernels.hpp"

namespace spattn::test {

/// An output and what it must hold after the calls.
struct CheckedOutput {
  std::string name;              // "out", "dk of segment 1", ...
  std::size_t tensor = 0;        // its index in PreparedCase::tensors
  OutputKind kind = OutputKind::attention;
  std::vector<double> expected;  // row-major; for an accumulated output, the change expected
  // What errors are relative to (error_bounds.hpp): the largest finite |expected|; for a gradient
  // the largest |out|, |dq|, |dk|, |dv| of the reference, since it is a difference of terms that
  // large (dS = P (dP - delta)) and carries their round-off even where it is 0 itself (a row that
  // sees one key), as the accuracy criterion has it (apps/runner/accuracy_report.cpp).
  double magnitude = 0;
  bool accumulated = false;  // held random values before the calls: its change is compared
  // Elements that must come out exactly as expected (empty: none): out 0 in rows that see no key,
  // no change to the gradients of rows and keys outside every visible pair, every element of an
  // exact output.
  std::vector<bool> exact;
};

struct PreparedCase {
  std::vector<HostTensor> tensors;  // everything the calls touch, as it is before them
  /// The operation's calls on `on_device`: copies of `tensors`, in the same order, in the memory
  /// of the kernels' device.
  std::function<void(BlockKernels& kernels, const std::vector<DeviceTensor>& on_device)> run;
  std::vector<CheckedOutput> outputs;  // empty unless prepared with expectations
  double flops = 0;  // of one run of an attention operation (see prepare_attention)
  double bytes = 0;  // read and written by one run of an element-wise operation
};

/// `c` ready to run, its inputs drawn from a generator seeded by its name (the same inputs at
/// every run, under any filter). With the fp64 expectations when `with_expectations`: the test
/// mode's; at the perf mode's sizes the reference would take minutes.
PreparedCase prepare_case(const BlockKernelCase& c, bool with_expectations);

/// Copies of `tensors` in the memory of `device`.
std::vector<DeviceTensor> place_on(const std::vector<HostTensor>& tensors, const Device& device);

}  // namespace spattn::test
