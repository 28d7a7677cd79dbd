#include "strategies/call_validation.hpp"

#include <cmath>
#include <cstring>
#include <sstream>


namespace spattn {

std::string shape_and_options_error(const AttentionShape& shape, const AttentionOptions& options,
                                    const Device& device) {
  std::string error = first_error({shape_error(shape), window_error(options.window_left, options.window_right),
                                   document_lengths_error(options.document_lengths)});
  if (!error.empty()) return error;
  if (options.softmax_scale && !(std::isfinite(*options.softmax_scale) && *options.softmax_scale > 0)) {
    std::ostringstream scale_error;
    scale_error << "softmax scale " << *options.softmax_scale << " is not allowed; it must be finite and > 0";
    return scale_error.str();
  }
  return block_kernels_unsupported(device, options.kernel, shape.dtype, shape.head_dim);
}

std::string tensor_error(const char* name, const TensorView& tensor, std::initializer_list<int64_t> expected_shape,
                         DType expected_dtype, const Device& expected_device) {
  std::ostringstream expected;
  expected << "(";
  int dim = 0;
  bool shape_matches = tensor.ndim == static_cast<int>(expected_shape.size());
  for (int64_t extent : expected_shape) {
    expected << (dim ? ", " : "") << extent;
    if (shape_matches && tensor.size(dim) != extent) shape_matches = false;
    ++dim;
  }
  expected << ")";
  std::ostringstream error;
  if (tensor.data == nullptr && tensor.numel() > 0) error << name << " has no data (null pointer)";
  else if (!shape_matches) error << name << " has shape " << tensor.describe() << "; expected " << expected.str();
  else if (tensor.dtype != expected_dtype)
    error << name << " is " << dtype_name(tensor.dtype) << "; expected " << dtype_name(expected_dtype);
  else if (tensor.device != expected_device)
    error << name << " is on " << device_name(tensor.device) << "; expected " << device_name(expected_device);
  return error.str();
}

namespace {

using NamedTensors = std::initializer_list<std::pair<const char*, const TensorView*>>;

// The first problem among query-like, key-like tensors and lse of a shard.
std::string arguments_error(const AttentionShape& shape, int64_t local_seq, const Device& device, NamedTensors query_like,
                            NamedTensors key_like, const TensorView& lse) {
  for (const auto& [name, tensor] : query_like) {
    std::string error =
        tensor_error(name, *tensor, {shape.batch, local_seq, shape.heads, shape.head_dim}, shape.dtype, device);
    if (!error.empty()) return error;
  }
  for (const auto& [name, tensor] : key_like) {
    std::string error =
        tensor_error(name, *tensor, {shape.batch, local_seq, shape.kv_heads, shape.head_dim}, shape.dtype, device);
    if (!error.empty()) return error;
  }
  return tensor_error("lse", lse, {shape.batch, shape.heads, local_seq}, DType::f32, device);
}

}  // namespace

std::string forward_arguments_error(const AttentionShape& shape, int64_t local_seq, const Device& device,
                                    const TensorView& q, const TensorView& k, const TensorView& v,
                                    const TensorView& out, const TensorView& lse) {
  return arguments_error(shape, local_seq, device, {{"q", &q}, {"out", &out}}, {{"k", &k}, {"v", &v}}, lse);
}

std::string backward_arguments_error(const AttentionShape& shape, int64_t local_seq, const Device& device,
                                     const TensorView& q, const TensorView& k, const TensorView& v,
                                     const TensorView& out, const TensorView& lse, const TensorView& dout,
                                     const TensorView& dq, const TensorView& dk, const TensorView& dv) {
  return arguments_error(shape, local_seq, device, {{"q", &q}, {"out", &out}, {"dout", &dout}, {"dq", &dq}},
                         {{"k", &k}, {"v", &v}, {"dk", &dk}, {"dv", &dv}}, lse);
}

std::pair<AttentionShape, std::string> global_shape_of(const TensorView& q, const TensorView& k, int ranks) {
  if (q.ndim != 4) return {AttentionShape{}, "q has shape " + q.describe() + "; expected 4 dimensions (B, S, H, D)"};
  if (k.ndim != 4) return {AttentionShape{}, "k has shape " + k.describe() + "; expected 4 dimensions (B, S, HK, D)"};
  return {AttentionShape{q.size(0), q.size(1) * ranks, q.size(2), k.size(2), q.size(3), q.dtype}, ""};
}

std::string first_error(std::initializer_list<std::string> errors) {
  for (const std::string& error : errors)
    if (!error.empty()) return error;
  return "";
}

std::string show_algorithm(int64_t algorithm) { return algorithm_name(static_cast<Algorithm>(algorithm)); }

namespace {

std::string show_dtype(int64_t dtype) { return dtype_name(static_cast<DType>(dtype)); }
std::string show_kernel(int64_t kernel) { return kernel_choice_name(static_cast<KernelChoice>(kernel)); }
std::string show_flag(int64_t flag) { return flag ? "true" : "false"; }
std::string show_document_split(int64_t split) { return document_split_name(static_cast<DocumentSplit>(split)); }
// A given scale travels as its float's bits (exact), none as -1.
std::string show_scale(int64_t bits) {
  if (bits < 0) return "none (1/sqrt(head_dim))";
  const uint32_t pattern = static_cast<uint32_t>(bits);
  float scale = 0.0f;
  std::memcpy(&scale, &pattern, sizeof scale);
  std::ostringstream text;
  text << scale;
  return text.str();
}

// The 64-bit FNV-1a hash of `values`' bytes: ranks given different document lengths differ in it.
int64_t fingerprint(const std::vector<int64_t>& values) {
  uint64_t hash = 14695981039346656037ull;
  for (int64_t value : values)
    for (int byte = 0; byte < 8; ++byte) {
      hash ^= (static_cast<uint64_t>(value) >> (8 * byte)) & 0xffu;
      hash *= 1099511628211ull;
    }
  int64_t signed_hash = 0;
  std::memcpy(&signed_hash, &hash, sizeof hash);
  return signed_hash;
}

}  // namespace

std::vector<CallField> call_signature(Algorithm algorithm, const AttentionShape& shape, const AttentionOptions& options) {
  int64_t scale = -1;
  if (options.softmax_scale) {
    uint32_t bits = 0;
    std::memcpy(&bits, &*options.softmax_scale, sizeof bits);
    scale = bits;
  }
  return {{"algorithm", static_cast<int64_t>(algorithm), show_algorithm},
          {"batch", shape.batch},
          {"seq", shape.seq},
          {"heads", shape.heads},
          {"kv_heads", shape.kv_heads},
          {"head_dim", shape.head_dim},
          {"dtype", static_cast<int64_t>(shape.dtype), show_dtype},
          {"causal", options.causal ? 1 : 0, show_flag},
          {"window_left", options.window_left},
          {"window_right", options.window_right},
          {"softmax_scale", scale, show_scale},
          {"kernel", static_cast<int64_t>(options.kernel), show_kernel},
          {"deterministic", options.deterministic ? 1 : 0, show_flag},
          {"documents", static_cast<int64_t>(options.document_lengths.size())},
          {"document_lengths (FNV-1a of them)", fingerprint(options.document_lengths)},
          {"document_split", static_cast<int64_t>(options.document_split), show_document_split}};
}

float resolved_scale(const AttentionShape& shape, const AttentionOptions& options) {
  return options.softmax_scale ? *options.softmax_scale : 1.0f / std::sqrt(static_cast<float>(shape.head_dim));
}

}  // namespace spattn
