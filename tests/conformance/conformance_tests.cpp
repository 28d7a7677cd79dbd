#include "conformance_tests.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "kernel_targets.hpp"
#include "prepared_case.hpp"

namespace spattn::test {
namespace {

/// after - before, element by element, of an accumulated fp32 output.
HostTensor change_of(const HostTensor& before, const HostTensor& after) {
  HostTensor change = after;
  for (int64_t i = 0; i < change.numel(); ++i) change.set(i, after.at(i) - before.at(i));
  return change;
}

/// Holds `actual` to `output`, counting each kind of miss: NaN (an element never written), an
/// infinity where the reference has none or the reverse, an element held to an exact value that
/// differs from it, and an error over bound x (output.magnitude + |expected|).
void expect_matches(const CheckedOutput& output, const HostTensor& actual, double bound) {
  ASSERT_EQ(static_cast<std::size_t>(actual.numel()), output.expected.size()) << output.name;
  int64_t unwritten = 0, misplaced_infinities = 0, inexact = 0, over = 0, first_inexact = -1, worst = -1;
  double worst_share = 0;  // of the allowed error
  for (std::size_t i = 0; i < output.expected.size(); ++i) {
    const double value = actual.at(static_cast<int64_t>(i)), expected = output.expected[i];
    if (std::isnan(value)) {
      ++unwritten;
    } else if (!output.exact.empty() && output.exact[i]) {
      if (value != expected && inexact++ == 0) first_inexact = static_cast<int64_t>(i);
    } else if (std::isinf(value) || std::isinf(expected)) {
      misplaced_infinities += value != expected;
    } else {
      const double error = std::abs(value - expected), allowed = bound * (output.magnitude + std::abs(expected));
      over += error > allowed;
      const double share = error == 0 ? 0 : error / allowed;  // inf where nothing is allowed
      if (share > worst_share) worst_share = share, worst = static_cast<int64_t>(i);
    }
  }
  const auto element = [&](int64_t i) {
    return "element " + std::to_string(i) + (output.accumulated ? " changed by " : " is ") +
           std::to_string(actual.at(i)) + ", expected " + std::to_string(output.expected[static_cast<std::size_t>(i)]);
  };
  EXPECT_EQ(unwritten, 0) << output.name << ": elements are NaN (never written?)";
  EXPECT_EQ(misplaced_infinities, 0) << output.name
                                     << ": infinities (-inf: rows that see no key) elsewhere than in the reference";
  EXPECT_EQ(inexact, 0) << output.name << ": elements that must be exact (rows that see no key, keys no row sees, "
                                          "exact operations) are not; the first: "
                        << (first_inexact < 0 ? "" : element(first_inexact));
  EXPECT_EQ(over, 0) << output.name << ": elements over " << bound << " x (" << output.magnitude
                     << " + |expected|); the worst, " << worst_share << " times its allowed error: "
                     << (worst < 0 ? "" : element(worst));
}

class ConformanceTest : public ::testing::Test {
 public:
  ConformanceTest(KernelTarget target, BlockKernelCase c) : target_(std::move(target)), case_(std::move(c)) {}

  void TestBody() override {
    const std::string unavailable = target_unavailable(target_);
    if (!unavailable.empty()) GTEST_SKIP() << target_.name << " unavailable: " << unavailable;
    const std::string unsupported = case_unsupported(target_, case_);
    if (!unsupported.empty()) GTEST_SKIP() << unsupported;

    BlockKernels& kernels = kernels_of(target_);
    const PreparedCase prepared = prepare_case(case_, /*with_expectations=*/true);
    const std::vector<DeviceTensor> on_device = place_on(prepared.tensors, kernels.device());
    prepared.run(kernels, on_device);
    for (const CheckedOutput& output : prepared.outputs) {
      const double bound = allowed_error(target_, case_.dtype, output.kind, prepared.tensors[output.tensor].dtype());
      SCOPED_TRACE(output.name + " of " + case_.shape() + " on " + target_.name);
      const HostTensor& before = prepared.tensors[output.tensor];
      const HostTensor after = on_device[output.tensor].to_host();
      const HostTensor actual = output.accumulated ? change_of(before, after) : after;
      expect_matches(output, actual, bound);
    }
  }

 private:
  KernelTarget target_;
  BlockKernelCase case_;
};

}  // namespace

void register_conformance_tests() {
  const std::vector<BlockKernelCase> cases = block_kernel_cases();
  for (const KernelTarget& target : kernel_targets())
    for (const BlockKernelCase& c : cases)
      ::testing::RegisterTest(target.name.c_str(), c.name().c_str(), nullptr, c.shape().c_str(), __FILE__, __LINE__,
                              [target, c]() -> ::testing::Test* { return new ConformanceTest(target, c); });
}

}  // namespace spattn::test
