// USP (unified sequence parallelism): Ulysses inside groups of N1 consecutive ranks and a
// single-level rotation (ring, zigzag or hamilton) across the N2 = N / N1 groups. The all-to-all
// runs within a group, whose "whole sequence" is its S / N2 tokens of the rotation's layout over
// the groups, and the rotation over the ranks of one member index attends the head shards.

#include <string>
#include <utility>
#include <vector>

#include "schedule/strategy_rules.hpp"
#include "schedule/ulysses_degree.hpp"
#include "strategies/call_validation.hpp"
#include "strategies/strategy.hpp"
#include "strategies/ulysses_strategy.hpp"

namespace spattn {

std::unique_ptr<Strategy> make_usp_strategy(Communicator& communicator, int inner, Algorithm across_algorithm,
                                            const AttentionShape& shape, const AttentionOptions& options,
                                            const std::string& caller_error) {
  const int ranks = communicator.size();
  const int ranks_per_group = resolved_ulysses_degree(ranks, inner, shape);
  const int groups = ranks_per_group >= 1 && ranks % ranks_per_group == 0 ? ranks / ranks_per_group : 1;
  const bool packed = !options.document_lengths.empty();
  StrategyOptions strategy;  // the degree resolved, for the documents' layout
  strategy.inner = ranks_per_group;
  strategy.across = across_algorithm;
  // The scheme across the groups is checked here, on every rank, so that it never refuses
  // inside one group's communicator alone.
  std::string error = first_error({caller_error, shape_and_options_error(shape, options, communicator.device()),
                                   documents_unsupported(Algorithm::usp, options.document_lengths,
                                                         options.document_split)});
  if (error.empty()) {
    // With documents the rotation's layout is theirs (documents_error checks the rotation and the
    // padded length); the degree's rule on the heads holds either way.
    error = packed ? first_error({ulysses_degree_error(ranks, ranks_per_group, shape),
                                  documents_error(Algorithm::usp, shape.seq, ranks, strategy, options)})
                   : usp_error(shape, ranks, inner, across_algorithm, options.causal);
  }
  // The degree and the scheme join the signature, so ranks given different ones refuse together.
  std::vector<CallField> signature = call_signature(Algorithm::usp, shape, options);
  signature.push_back({"inner", ranks_per_group});
  signature.push_back({"across", static_cast<int64_t>(across_algorithm), show_algorithm});
  agree_on_call(communicator, error, signature);

  // Group g is ranks [g N1, (g + 1) N1), meant to be the ranks of fast links.
  const int group = communicator.rank() / ranks_per_group;
  const int member = communicator.rank() % ranks_per_group;
  AcrossGroups across;
  across.group = communicator.split(group, member);
  across.across_groups = communicator.split(member, group);
  // After the all-to-all a member holds its group's tokens of H/N1 heads: the group's shard of the
  // layout over the groups, which the rotation across the groups attends.
  const AttentionShape head_shard_shape{shape.batch,
                                        shape.seq,
                                        shape.heads / ranks_per_group,
                                        shape.kv_heads / ranks_per_group,
                                        shape.head_dim,
                                        shape.dtype};
  if (packed) {
    // Every document split over the groups by the rotation, each group's part over its ranks.
    const DocumentLayout documents = strategy_document_layout(Algorithm::usp, ranks, strategy, options);
    across.inner = make_rotation_strategy_over(across_algorithm, *across.across_groups, head_shard_shape, options,
                                               documents.over_groups());
    return make_agreed_ulysses_strategy(communicator, std::move(across), documents.sequence_layout(), std::nullopt,
                                        std::move(signature), shape, options);
  }
  across.inner = make_rotation_strategy(across_algorithm, *across.across_groups, head_shard_shape, options, "");
  SequenceLayout layout = SequenceLayout::grouped(
      SequenceLayout(rotation_form(across_algorithm, groups, options.causal, 1).layout, shape.seq, groups),
      ranks_per_group);
  return make_agreed_ulysses_strategy(communicator, std::move(across), std::move(layout), std::nullopt,
                                      std::move(signature), shape, options);
}

}  // namespace spattn
