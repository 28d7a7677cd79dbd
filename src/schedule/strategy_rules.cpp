#include "schedule/strategy_rules.hpp"

#include <algorithm>

#include "schedule/rotation_schedule.hpp"
#include "schedule/ulysses_degree.hpp"
#include "spattn/error.hpp"

namespace spattn {

bool is_single_level_rotation(Algorithm algorithm) {
  return algorithm == Algorithm::ring || algorithm == Algorithm::zigzag || algorithm == Algorithm::hamilton;
}

RotationForm rotation_form(Algorithm algorithm, int ranks, bool causal, int nodes) {
  // The Hamiltonian schemes balance causal work over the zigzag layout; without a causal mask
  // every placement does the same work, and contiguous shards are the simplest.
  const LayoutKind hamilton_layout = causal ? LayoutKind::zigzag : LayoutKind::contiguous;
  switch (algorithm) {
    case Algorithm::ring: return {LayoutKind::contiguous, 1, ""};
    case Algorithm::zigzag: return {LayoutKind::zigzag, 1, ""};
    case Algorithm::stripe: return {LayoutKind::stripe, 1, ""};
    case Algorithm::hamilton:
      // One rank has no arcs to decompose: it keeps its single slot, as the ring does.
      return {hamilton_layout, std::max(1, ranks - 1), hamiltonian_decomposition_error(ranks)};
    case Algorithm::hamilton2:
      if (nodes < 1 || ranks % nodes != 0) {
        return {hamilton_layout, 1,
                "hamilton2 needs the ranks (" + std::to_string(ranks) + ") to be a multiple of the nodes (" +
                    std::to_string(nodes) + "); ranks per node = ranks / nodes"};
      }
      return {hamilton_layout, ranks / nodes, two_level_error(ranks / nodes, nodes)};
    default: break;
  }
  SPATTN_FAIL("'" << algorithm_name(algorithm) << "' does not rotate along cycles; the rotations: ring, zigzag, "
                                                   "stripe, hamilton, hamilton2");
}

RankCycles rotation_cycles(Algorithm algorithm, int ranks, int nodes) {
  const RotationForm form = rotation_form(algorithm, ranks, false, nodes);
  SPATTN_CHECK(form.cycles_error.empty(), form.cycles_error);
  if (algorithm == Algorithm::hamilton && ranks > 1) return hamiltonian_decomposition(ranks);
  if (algorithm == Algorithm::hamilton2) return two_level_cycles(ranks / nodes, nodes);
  return ring_cycles(ranks);
}

std::string rotation_error(Algorithm algorithm, int64_t seq, int ranks, bool causal, int nodes) {
  const RotationForm form = rotation_form(algorithm, ranks, causal, nodes);
  if (!form.cycles_error.empty()) return form.cycles_error;
  return slot_split_error(form.layout, seq, ranks, form.slots);
}

namespace {

// The layout that `algorithm` splits each packed document in (it takes documents); usp's is the
// layout its rotation splits each document over the groups in.
LayoutKind document_layout_kind(Algorithm algorithm, int ranks, bool causal, const StrategyOptions& strategy) {
  if (algorithm == Algorithm::allgather) return LayoutKind::zigzag;
  // Every rank attends the whole sequence of its heads: any split balances.
  if (algorithm == Algorithm::ulysses) return LayoutKind::contiguous;
  if (algorithm == Algorithm::usp) return rotation_form(strategy.across, ranks / strategy.inner, causal, 1).layout;
  return rotation_form(algorithm, ranks, causal, strategy.nodes).layout;
}

// "" when usp can rotate `across` its groups at all, else why.
std::string usp_rotation_error(Algorithm across) {
  if (is_single_level_rotation(across)) return "";
  return "usp runs ring, zigzag or hamilton across its groups, not '" + algorithm_name(across) + "'";
}

// `error` of usp's rotation `across` over its `groups`, said as such ("" stays "").
std::string across_groups_error(int groups, Algorithm across, const std::string& error) {
  if (error.empty()) return "";
  return "across the " + std::to_string(groups) + " groups of usp, " + algorithm_name(across) + ": " + error;
}

// usp's degree and rotation as the documents' layout needs them: a given degree that divides the
// ranks (0 chooses by the head counts, which the documents' layout is not given) and its rotation.
std::string usp_documents_error(int ranks, const StrategyOptions& strategy, bool causal) {
  if (strategy.inner < 1 || ranks % strategy.inner != 0)
    return "usp with packed documents needs its Ulysses degree given (inner " + std::to_string(strategy.inner) +
           "): a divisor of the ranks (" + std::to_string(ranks) + "); 0 chooses it from the head counts, which "
           "plan_document_layout is not given";
  const std::string rotation = usp_rotation_error(strategy.across);
  if (!rotation.empty()) return rotation;
  const int groups = ranks / strategy.inner;
  return across_groups_error(groups, strategy.across, rotation_form(strategy.across, groups, causal, 1).cycles_error);
}

// documents_error without the seq.
std::string layout_error(Algorithm algorithm, int ranks, const StrategyOptions& strategy,
                         const AttentionOptions& options) {
  const std::string unsupported = documents_unsupported(algorithm, options.document_lengths, options.document_split);
  if (!unsupported.empty()) return unsupported;
  if (algorithm == Algorithm::usp) {
    const std::string usp = usp_documents_error(ranks, strategy, options.causal);
    if (!usp.empty()) return usp;
  } else if (algorithm != Algorithm::allgather && algorithm != Algorithm::ulysses) {
    const std::string cycles = rotation_form(algorithm, ranks, options.causal, strategy.nodes).cycles_error;
    if (!cycles.empty()) return cycles;
  }
  return document_lengths_error(options.document_lengths);
}

// The documents' layout, once layout_error has found nothing.
DocumentLayout checked_document_layout(Algorithm algorithm, int ranks, const StrategyOptions& strategy,
                                       const AttentionOptions& options) {
  if (options.document_split == DocumentSplit::whole_sequence)
    return DocumentLayout::whole_sequence(options.document_lengths, ranks);
  const LayoutKind kind = document_layout_kind(algorithm, ranks, options.causal, strategy);
  if (algorithm == Algorithm::usp)
    return DocumentLayout::grouped(kind, options.document_lengths, ranks / strategy.inner, strategy.inner);
  return DocumentLayout(kind, options.document_lengths, ranks);
}

}  // namespace

DocumentLayout strategy_document_layout(Algorithm algorithm, int ranks, const StrategyOptions& strategy,
                                        const AttentionOptions& options) {
  const std::string error = layout_error(algorithm, ranks, strategy, options);
  SPATTN_CHECK(error.empty(), error);
  return checked_document_layout(algorithm, ranks, strategy, options);
}

std::string padded_length_error(int64_t seq, const DocumentLayout& documents) {
  const int64_t padded = documents.sequence_layout().global_length();
  if (seq == padded) return "";
  return "seq " + std::to_string(seq) + " does not match the packed documents: " + documents.describe() +
         "; seq must be their padded length " + std::to_string(padded) + " (plan_document_layout)";
}

std::string documents_error(Algorithm algorithm, int64_t seq, int ranks, const StrategyOptions& strategy,
                            const AttentionOptions& options) {
  const std::string error = layout_error(algorithm, ranks, strategy, options);
  if (!error.empty()) return error;
  return padded_length_error(seq, checked_document_layout(algorithm, ranks, strategy, options));
}

std::string ulysses_error(const AttentionShape& shape, int ranks) {
  const std::string split = SequenceLayout::split_error(LayoutKind::contiguous, shape.seq, ranks);
  if (!split.empty()) return split;
  if (shape.heads % ranks == 0) return "";
  return "ulysses splits query heads over ranks: heads (" + std::to_string(shape.heads) +
         ") must be divisible by ranks (" + std::to_string(ranks) + "); use zigzag, ring or usp for this head count";
}

std::string allgather_error(const AttentionShape& shape, int ranks) {
  return SequenceLayout::split_error(LayoutKind::zigzag, shape.seq, ranks);
}

std::string usp_error(const AttentionShape& shape, int ranks, int inner, Algorithm across, bool causal) {
  const int ranks_per_group = resolved_ulysses_degree(ranks, inner, shape);
  const std::string degree = ulysses_degree_error(ranks, ranks_per_group, shape);
  if (!degree.empty()) return degree;
  const std::string rotation = usp_rotation_error(across);
  if (!rotation.empty()) return rotation;
  const int groups = ranks / ranks_per_group;
  const LayoutKind group_layout = rotation_form(across, groups, causal, 1).layout;
  const std::string split = SequenceLayout::grouped_split_error(group_layout, shape.seq, groups, ranks_per_group);
  if (!split.empty()) return split;
  return across_groups_error(groups, across, rotation_error(across, shape.seq, groups, causal, 1));
}

std::string strategy_error(Algorithm algorithm, const AttentionShape& shape, int ranks, bool causal,
                           const StrategyOptions& options) {
  switch (algorithm) {
    case Algorithm::ring:
    case Algorithm::zigzag:
    case Algorithm::stripe:
    case Algorithm::hamilton:
    case Algorithm::hamilton2:
      return rotation_error(algorithm, shape.seq, ranks, causal, options.nodes);
    case Algorithm::ulysses: return ulysses_error(shape, ranks);
    case Algorithm::allgather: return allgather_error(shape, ranks);
    case Algorithm::usp: return usp_error(shape, ranks, options.inner, options.across, causal);
  }
  SPATTN_FAIL("unknown strategy " << static_cast<int>(algorithm));
}

}  // namespace spattn
