#pragma once
// Checks of a call's arguments that every strategy shares. Each returns an empty string when the
// argument is valid, or the message of the first problem, so that a plan can gather its verdict
// and agree on it with the other ranks before any transfer (agree_on_call).

#include <cstdint>
#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

#include "spattn/attention_options.hpp"
#include "spattn/attention_shape.hpp"
#include "spattn/communicator.hpp"
#include "spattn/algorithm.hpp"
#include "spattn/tensor.hpp"

namespace spattn {

/// Sizes, head counts, head dim, window, scale, and whether the chosen block kernels run such a
/// call on `device` (block_kernels_unsupported).
std::string shape_and_options_error(const AttentionShape& shape, const AttentionOptions& options,
                                    const Device& device);

/// One tensor argument against its expected shape, dtype and device.
std::string tensor_error(const char* name, const TensorView& tensor, std::initializer_list<int64_t> expected_shape,
                         DType expected_dtype, const Device& expected_device);

/// The arguments of a forward call on this rank's shard of `local_seq` tokens: q, out
/// (B, S_local, H, D) and k, v (B, S_local, HK, D) in shape.dtype, lse (B, H, S_local) fp32.
std::string forward_arguments_error(const AttentionShape& shape, int64_t local_seq, const Device& device,
                                    const TensorView& q, const TensorView& k, const TensorView& v,
                                    const TensorView& out, const TensorView& lse);

/// The arguments of a backward call: those of forward plus dout, dq (like q) and dk, dv (like k).
std::string backward_arguments_error(const AttentionShape& shape, int64_t local_seq, const Device& device,
                                     const TensorView& q, const TensorView& k, const TensorView& v,
                                     const TensorView& out, const TensorView& lse, const TensorView& dout,
                                     const TensorView& dq, const TensorView& dk, const TensorView& dv);

/// The global shape implied by this rank's q (B, S_local, H, D) and k (B, S_local, HK, D) with
/// S = S_local x ranks, and why it cannot be read when they are not 4-d (to be agreed on like
/// any other invalid argument).
std::pair<AttentionShape, std::string> global_shape_of(const TensorView& q, const TensorView& k, int ranks);

/// The first non-empty message of `errors`.
std::string first_error(std::initializer_list<std::string> errors);

/// The fields that every rank of one call must agree on: the algorithm, the global shape, dtype
/// and options (strategies with degrees add theirs).
std::vector<CallField> call_signature(Algorithm algorithm, const AttentionShape& shape, const AttentionOptions& options);

/// A degree's field, shown as an algorithm's name (usp's scheme across its groups).
std::string show_algorithm(int64_t algorithm);

/// The softmax scale of the call: the option, or 1/sqrt(head_dim).
float resolved_scale(const AttentionShape& shape, const AttentionOptions& options);

}  // namespace spattn
