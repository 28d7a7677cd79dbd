#include <algorithm>
#include <sstream>

#include "spattn/attention_options.hpp"

namespace spattn {
namespace {

// A window side this long hides nothing in any sequence that fits in memory. Kept as unbounded,
// it never enters position arithmetic, where position + side could overflow int64 (a window of
// INT64_MAX, say, would hide every key instead of none).
constexpr int64_t kLongestWindowSide = int64_t{1} << 62;

int64_t mask_bound(int64_t window_side) { return window_side >= kLongestWindowSide ? -1 : window_side; }

// Pairs (i, j) of [q_begin, q_end) x [k_begin, k_end) with j - i <= distance. Query i has
// clamp(i + distance - k_begin + 1, 0, keys) of them, a ramp over i: with
// below(t) = sum over x = 1..t of clamp(x, 0, keys), the sum over the queries is
// below(highest) - below(lowest - 1).
int64_t pairs_within(int64_t q_begin, int64_t q_end, int64_t k_begin, int64_t k_end, int64_t distance) {
  const int64_t queries = q_end - q_begin, keys = k_end - k_begin;
  if (distance >= k_end - 1 - q_begin) return queries * keys;  // every pair; also keeps what follows small
  if (distance < k_begin - (q_end - 1)) return 0;
  const auto below = [keys](int64_t t) -> int64_t {
    if (t <= 0) return 0;
    return t <= keys ? t * (t + 1) / 2 : keys * (keys + 1) / 2 + (t - keys) * keys;
  };
  const int64_t lowest = q_begin + distance - k_begin + 1;
  return below(lowest + queries - 1) - below(lowest - 1);
}

}  // namespace

std::string document_lengths_error(const std::vector<int64_t>& lengths) {
  for (std::size_t document = 0; document < lengths.size(); ++document)
    if (lengths[document] < 1) {
      std::ostringstream error;
      error << "document " << document << " has length " << lengths[document]
            << "; every document needs at least 1 token";
      return error.str();
    }
  return "";
}

std::string packed_documents_error(const std::vector<int64_t>& lengths, int64_t tokens) {
  const std::string error = document_lengths_error(lengths);
  if (!error.empty() || lengths.empty()) return error;
  int64_t sum = 0;
  for (int64_t length : lengths) sum += length;
  if (sum == tokens) return "";
  std::ostringstream mismatch;
  mismatch << "the " << lengths.size() << " documents have " << sum << " tokens; the sequence has " << tokens;
  return mismatch.str();
}

std::string window_error(int64_t left, int64_t right) {
  if (left >= -1 && right >= -1) return "";
  std::ostringstream error;
  error << "window (" << left << ", " << right << ") is not allowed; each side is >= 0, or -1 for unbounded";
  return error.str();
}

AttentionMask AttentionMask::from_options(const AttentionOptions& options) {
  AttentionMask mask{mask_bound(options.window_left), mask_bound(options.window_right)};
  if (options.causal) mask.right = mask.right < 0 ? 0 : std::min<int64_t>(mask.right, 0);
  return mask;
}

bool AttentionMask::any_visible(int64_t q_begin, int64_t q_end, int64_t k_begin, int64_t k_end) const {
  if (q_begin >= q_end || k_begin >= k_end) return false;
  // The visible keys of query i form the interval [i - left, i + right]; both ends grow with i,
  // so the union over the query range is [q_begin - left, q_end - 1 + right].
  const int64_t lowest = first_visible_key(q_begin);
  const int64_t highest = last_visible_key(q_end - 1);
  if (highest < k_begin || lowest > k_end - 1) return false;
  // Intervals of consecutive queries overlap or touch only if left + right >= 0, which holds
  // for every allowed window (both bounds >= 0 or unbounded); so the union has no gaps.
  return true;
}

int64_t AttentionMask::visible_pairs(int64_t q_begin, int64_t q_end, int64_t k_begin, int64_t k_end) const {
  if (q_begin >= q_end || k_begin >= k_end) return 0;
  // Visible: -left <= j - i <= right, so the pairs within right less those within -left - 1.
  const int64_t up_to_right =
      right < 0 ? (q_end - q_begin) * (k_end - k_begin) : pairs_within(q_begin, q_end, k_begin, k_end, right);
  const int64_t before_left = left < 0 ? 0 : pairs_within(q_begin, q_end, k_begin, k_end, -left - 1);
  return up_to_right - before_left;
}

bool AttentionMask::all_visible(int64_t q_begin, int64_t q_end, int64_t k_begin, int64_t k_end) const {
  if (q_begin >= q_end || k_begin >= k_end) return true;
  // The most restrictive queries: the last for the left bound, the first for the right bound.
  return first_visible_key(q_end - 1) <= k_begin && last_visible_key(q_begin) >= k_end - 1;
}

}  // namespace spattn
