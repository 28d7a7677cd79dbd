#pragma once
// Checks of a call's arguments that every strategy shares. Each returns an empty string when the
// argument is valid, or the message of the first problem, so that a plan can gather its verdict
// and agree on it with the other ranks before any transfer (agree_on_call).

#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include "spattn/attention_options.hpp"
#include "spattn/attention_shape.hpp"
#include "spattn/tensor.hpp"

namespace spattn {

/// Sizes, head counts, head dim, window and scale.
std::string shape_and_options_error(const AttentionShape& shape, const AttentionOptions& options);

/// One tensor argument against its expected shape, dtype and device.
std::string tensor_error(const char* name, const TensorView& tensor, std::initializer_list<int64_t> expected_shape,
                         DType expected_dtype, const Device& expected_device);

/// The first non-empty message of `errors`.
std::string first_error(std::initializer_list<std::string> errors);

/// The numbers that every rank of one call must agree on.
std::vector<int64_t> call_signature(int64_t strategy_id, const AttentionShape& shape, const AttentionOptions& options);

/// The softmax scale of the call: the option, or 1/sqrt(head_dim).
float resolved_scale(const AttentionShape& shape, const AttentionOptions& options);

}  // namespace spattn
