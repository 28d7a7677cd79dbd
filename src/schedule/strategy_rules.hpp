#pragma once
// What each strategy needs of the ranks, the sequence and the heads, and how the rotations lay
// out and cut the sequence: the one place that decides whether a strategy can run a case and
// says why not. Constructing a plan (src/strategies), the cost model and so `spattn plan` and the
// auto selection all decide with these functions, so they refuse exactly the same cases with the
// same words (tests/distributed/planner_agreement_test.cpp holds them to it). The shape's own
// validity (positive sizes, heads divisible by kv heads) is checked before, by whoever takes it.

#include <cstdint>
#include <string>
#include <vector>

#include "schedule/cycle_schedule.hpp"
#include "spattn/attention_shape.hpp"
#include "spattn/algorithm.hpp"
#include "spattn/document_layout.hpp"
#include "spattn/sequence_layout.hpp"

namespace spattn {

/// How a rotation (ring, zigzag, stripe, hamilton, hamilton2) holds the sequence: its layout, the slots
/// every chunk is cut into (one per cycle), and why its cycles do not exist ("" when they do).
struct RotationForm {
  LayoutKind layout = LayoutKind::contiguous;
  int slots = 1;
  std::string cycles_error;
};

/// The form of `algorithm` at `ranks` ranks: ring contiguous, zigzag zigzag, stripe stripe (the
/// ring's cycle, whole chunks: one slot), hamilton (the n-1
/// cycles of K*_n) and hamilton2 (two levels over `nodes` nodes) zigzag under a causal mask,
/// which gives every rank equal work, else contiguous. Throws Error for a strategy that does not
/// rotate.
RotationForm rotation_form(Algorithm algorithm, int ranks, bool causal, int nodes);

/// Ring, zigzag and hamilton: the rotations of one level (what usp runs across its groups).
bool is_single_level_rotation(Algorithm algorithm);

/// The cycles of that form. Throws Error with cycles_error when there are none.
RankCycles rotation_cycles(Algorithm algorithm, int ranks, int nodes);

/// "" when the rotation runs `seq` tokens over `ranks` ranks, else why: no cycles, or a length
/// that its layout does not cut into its slots.
std::string rotation_error(Algorithm algorithm, int64_t seq, int ranks, bool causal, int nodes);

/// The packed documents of options.document_lengths as `algorithm` holds them at `ranks` ranks,
/// by options.document_split: each document split over the ranks in the strategy's layout (a
/// rotation's rotation_form with strategy.nodes, all-gather's zigzag, Ulysses' contiguous; usp's
/// rotation `strategy.across` over its groups of `strategy.inner` ranks, DocumentLayout::grouped),
/// or the whole sequence contiguously (all-gather), padded where it does not split. Throws Error
/// where documents_error finds one (but for the seq).
DocumentLayout strategy_document_layout(Algorithm algorithm, int ranks, const StrategyOptions& strategy,
                                        const AttentionOptions& options);

/// "" when `algorithm` runs the packed documents of `options` with `seq` tokens, else why: a
/// strategy that takes no documents, a split it does not take, a rotation without cycles, usp
/// without a given degree, a bad length, or a seq other than the documents' padded length.
std::string documents_error(Algorithm algorithm, int64_t seq, int ranks, const StrategyOptions& strategy,
                            const AttentionOptions& options);

/// "" when `seq` is the padded length of `documents`, else why, naming both.
std::string padded_length_error(int64_t seq, const DocumentLayout& documents);

/// ulysses: a contiguous layout and whole query heads per rank.
std::string ulysses_error(const AttentionShape& shape, int ranks);

/// all-gather attention: the zigzag layout, causal or not.
std::string allgather_error(const AttentionShape& shape, int ranks);

/// usp: a valid Ulysses degree `inner` (schedule/ulysses_degree.hpp; 0 chooses) and a
/// single-level rotation `across` the groups that runs the groups' layout.
std::string usp_error(const AttentionShape& shape, int ranks, int inner, Algorithm across, bool causal);

/// Any strategy: "" when `algorithm` runs `shape` at `ranks` ranks with `options`, else why.
std::string strategy_error(Algorithm algorithm, const AttentionShape& shape, int ranks, bool causal,
                           const StrategyOptions& options);

}  // namespace spattn
