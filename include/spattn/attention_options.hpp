#pragma once
/// \file attention_options.hpp
/// What attention computes: the mask in global token positions and the softmax scale; and which
/// block kernels compute it.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "spattn/device.hpp"
#include "spattn/dtype.hpp"

namespace spattn {

/// Which block kernels compute attention on a CUDA device. The result means the same with each;
/// accuracy and speed differ.
enum class KernelChoice {
  automatic,  ///< spattn's own Hopper kernels where they support the call (sm_90), cuDNN elsewhere
  own,        ///< spattn's own Hopper kernels; an error (before any transfer) where they do not support the call
  cudnn,      ///< cuDNN's fused attention for every block
};

/// "auto", "own" or "cudnn": the name the program, Python and error messages use.
std::string kernel_choice_name(KernelChoice kernel);

/// The KernelChoice of kernel_choice_name's `name`; throws Error naming `name` and the allowed
/// names otherwise.
KernelChoice parse_kernel_choice(const std::string& name);

/// "" when the block kernels of devices of `kind` take q, k, v of `dtype`; otherwise why not:
/// the CUDA kernels (cuDNN's fused attention and spattn's own) have no fp32 path. Needs no device,
/// so that a command line can be refused before any starts.
std::string input_dtype_unsupported(DeviceKind kind, DType dtype);

/// "" when `kernel` can compute attention on `device` for inputs of `dtype` and `head_dim`;
/// otherwise why not, naming the choice and what is allowed: own and cudnn are CUDA kernels (the
/// CPU takes only automatic), the dtype rule above, and own runs only where spattn's own Hopper
/// forward does. Plans ask this on every rank before their first transfer.
std::string block_kernels_unsupported(const Device& device, KernelChoice kernel, DType dtype, int64_t head_dim);

/// How a plan splits packed documents over its ranks.
enum class DocumentSplit {
  /// Each document on its own, in the strategy's layout: every rank holds an equal part of every
  /// document (zigzag parts where that balances causal work). Each document is padded to split.
  per_document,
  /// The packed sequence as one, contiguously: rank r holds tokens [r T/N, (r+1) T/N), documents
  /// cut wherever the ranks' boundaries fall (Llama 3's context parallelism; ring-flash-attn's
  /// llama3 functions). The sequence is padded at its end to split. All-gather only.
  whole_sequence,
};

/// "per_document" or "whole_sequence".
std::string document_split_name(DocumentSplit split);

/// The DocumentSplit of document_split_name's `name`; throws Error naming `name` and the allowed
/// names otherwise.
DocumentSplit parse_document_split(const std::string& name);

/// Options shared by every strategy. Positions are global (in the full sequence), so a mask
/// means the same on every rank and at every step.
struct AttentionOptions {
  /// Query i sees only keys j <= i.
  bool causal = false;
  /// Sliding window as flash-attn defines it: query i sees keys j with
  /// i - window_left <= j <= i + window_right; -1 means unbounded on that side, and so does any
  /// side of 2^62 or more. causal caps window_right at 0.
  int64_t window_left = -1;
  int64_t window_right = -1;
  /// Softmax scale; 1/sqrt(head_dim) when unset.
  std::optional<float> softmax_scale;
  /// The block kernels on a CUDA device. On the CPU there is one set of kernels and only
  /// automatic is allowed: plans refuse any other choice on every rank before their first
  /// transfer, as they do `own` where spattn's own kernels cannot run the call.
  KernelChoice kernel = KernelChoice::automatic;
  /// The same bits from every run of the same call on the same ranks and devices (flash-attn's
  /// `deterministic`). On CUDA the backward's dq then gathers its key tiles in one order: the own
  /// backward adds each query tile's dQ key tile after key tile (a CTA waits for the one before
  /// it), cuDNN's backward runs its deterministic algorithm; both cost backward speed (the own
  /// backward's: 0-3% at D 128 and 3-12% at D 64 on an H100, README's "Determinism"). The
  /// forward and the CPU kernels are deterministic either way.
  bool deterministic = false;
  /// Packed documents (flash-attn's varlen cu_seqlens, as lengths): the sequence holds documents
  /// of these lengths one after another, and a query sees only keys of its own document (the mask
  /// above applies within it). Empty: the whole sequence is one document. A plan pads each
  /// document so that it splits over the ranks (DocumentLayout, plan_document_layout): its shape's
  /// seq is the padded length, and padding is never attended (its rows get out 0, lse -inf, no
  /// gradient).
  std::vector<int64_t> document_lengths = {};
  /// How the plan splits the documents over its ranks (with document_lengths only).
  DocumentSplit document_split = DocumentSplit::per_document;
};

/// "" when `lengths` are document lengths spattn takes: each at least 1 token (none: one
/// document); otherwise why not, naming the first bad one.
std::string document_lengths_error(const std::vector<int64_t>& lengths);

/// Like document_lengths_error, and the documents, packed without padding, fill a sequence of
/// `tokens`: what one device (local attention, the fp64 reference) takes.
std::string packed_documents_error(const std::vector<int64_t>& lengths, int64_t tokens);

/// "" when (left, right) is a sliding window spattn takes: each side >= 0, or -1 for unbounded;
/// otherwise why not, naming both sides. Plans, the cost model and the program's --window ask it.
std::string window_error(int64_t left, int64_t right);

/// The visibility rule of AttentionOptions as two bounds: query i sees key j when
/// i - left <= j <= i + right, where a negative bound is unbounded. Bounds and positions are
/// below 2^62, so that their sums stay within int64.
struct AttentionMask {
  int64_t left = -1;
  int64_t right = -1;

  static AttentionMask from_options(const AttentionOptions& options);

  bool visible(int64_t query, int64_t key) const {
    return (left < 0 || key >= query - left) && (right < 0 || key <= query + right);
  }
  /// Lowest visible key of `query` (may be below 0: clamp to the segment).
  int64_t first_visible_key(int64_t query) const { return left < 0 ? INT64_MIN / 2 : query - left; }
  /// Highest visible key of `query` (may be past the end: clamp to the segment).
  int64_t last_visible_key(int64_t query) const { return right < 0 ? INT64_MAX / 2 : query + right; }
  /// Whether any query in [q_begin, q_end) sees any key in [k_begin, k_end).
  bool any_visible(int64_t q_begin, int64_t q_end, int64_t k_begin, int64_t k_end) const;
  /// Whether every query in [q_begin, q_end) sees every key in [k_begin, k_end).
  bool all_visible(int64_t q_begin, int64_t q_end, int64_t k_begin, int64_t k_end) const;
  /// How many (query, key) pairs of [q_begin, q_end) x [k_begin, k_end) are visible, in O(1):
  /// the attention work of a block (ranges below 2^31 tokens, so that the count fits int64).
  int64_t visible_pairs(int64_t q_begin, int64_t q_end, int64_t k_begin, int64_t k_end) const;
};

}  // namespace spattn
