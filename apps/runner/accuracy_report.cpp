#include "accuracy_report.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

namespace spattn {

namespace {

// Relative to the largest reference magnitude: the floor under the 2x criterion, so that two
// runs that both match the reference to fp32 round-off are not told apart by noise. For dq, dk
// and dv the magnitude is the largest of out, dq, dk and dv; for out and the gradients, the
// reference's largest weighted term (ReferenceResult::out_terms, dq_terms, ...) where that is
// larger: a gradient is a difference of terms (dS = P (dP - delta), delta = rowsum(dout * out),
// times k or q), so its round-off scales with them, even where the difference itself is nearly
// zero (a row that sees a single key has dq = 0 exactly), and at scores of 1e4 an ulp of a score
// moves its probability by 1e-3, in an order of rounding that the BLAS picks by the block's shape.
constexpr double kRelativeFloor = 1e-6;

// max |x - reference|; +inf when x has a non-finite element where the reference is finite (an
// unwritten, NaN-poisoned element included). Elements where both are -inf (lse of rows that see
// no key) agree.
double max_error(const HostTensor& x, const std::vector<double>& reference) {
  double worst = 0;
  for (std::size_t i = 0; i < reference.size(); ++i) {
    const double value = x.at(static_cast<int64_t>(i));
    const double expected = reference[i];
    if (std::isinf(expected) && value == expected) continue;
    if (!std::isfinite(value)) return std::numeric_limits<double>::infinity();
    worst = std::max(worst, std::abs(value - expected));
  }
  return worst;
}

}  // namespace

std::vector<OutputError> compare_with_reference(const AttentionOutputs& distributed,
                                                const AttentionOutputs& single_rank,
                                                const ReferenceResult& reference) {
  struct Output {
    const char* name;
    const HostTensor& distributed;
    const HostTensor& single_rank;
    const std::vector<double>& reference;
    double terms;  // ReferenceResult's largest weighted term (0 for lse)
  };
  const Output outputs[] = {{"out", distributed.out, single_rank.out, reference.out, reference.out_terms},
                            {"lse", distributed.lse, single_rank.lse, reference.lse, 0.0},
                            {"dq", distributed.dq, single_rank.dq, reference.dq, reference.dq_terms},
                            {"dk", distributed.dk, single_rank.dk, reference.dk, reference.dk_terms},
                            {"dv", distributed.dv, single_rank.dv, reference.dv, reference.dv_terms}};
  double gradient_magnitude = 0;
  for (const std::vector<double>* values : {&reference.out, &reference.dq, &reference.dk, &reference.dv})
    gradient_magnitude = std::max(gradient_magnitude, max_finite_magnitude(*values));
  std::vector<OutputError> errors;
  for (const Output& output : outputs) {
    if (output.distributed.empty()) continue;
    OutputError error;
    error.name = output.name;
    const bool sizes_match = output.reference.size() == static_cast<std::size_t>(output.distributed.view().numel()) &&
                             output.reference.size() == static_cast<std::size_t>(output.single_rank.view().numel());
    error.distributed = sizes_match ? max_error(output.distributed, output.reference) : std::numeric_limits<double>::infinity();
    error.single_rank = sizes_match ? max_error(output.single_rank, output.reference) : std::numeric_limits<double>::infinity();
    const bool is_gradient = &output.reference != &reference.out && &output.reference != &reference.lse;
    const double magnitude = is_gradient ? gradient_magnitude : max_finite_magnitude(output.reference);
    error.bound = 2 * error.single_rank + kRelativeFloor * std::max(magnitude, output.terms);
    // A non-finite error (an unwritten element, a NaN) fails even when the baseline's does too.
    error.pass = std::isfinite(error.distributed) && std::isfinite(error.bound) && error.distributed <= error.bound;
    errors.push_back(error);
  }
  return errors;
}

double max_finite_magnitude(const std::vector<double>& values) {
  double largest = 0;
  for (double value : values)
    if (std::isfinite(value)) largest = std::max(largest, std::abs(value));
  return largest;
}

bool all_pass(const std::vector<OutputError>& errors) {
  return !errors.empty() && std::all_of(errors.begin(), errors.end(), [](const OutputError& e) { return e.pass; });
}

}  // namespace spattn
