#pragma once
// Where a strategy's blocks meet packed documents: a block pairs queries and keys of one
// document, each cut to the document's real tokens, so that the mask in global positions stays
// right inside it and padding is never attended. Without documents (nullptr) nothing is cut.

#include <cstddef>
#include <cstdint>
#include <vector>

#include "spattn/attention_options.hpp"
#include "spattn/document_layout.hpp"
#include "spattn/sequence_layout.hpp"

namespace spattn {

/// `range` (anything with a position and a length inside one document: a SequenceChunk, a
/// SlotPiece) cut to its document's real tokens; its length is 0 when it holds only padding.
template <typename Range>
Range real_part(const DocumentLayout* documents, Range range) {
  if (documents != nullptr && range.length > 0) range.length = documents->real_tokens(range.position, range.length);
  return range;
}

/// Whether global positions `a` and `b` lie in one document.
inline bool same_document(const DocumentLayout* documents, int64_t a, int64_t b) {
  return documents == nullptr || documents->document_at(a) == documents->document_at(b);
}

/// A key chunk that a block's queries see: its index among the keys paired, and the chunk cut
/// to its document's real tokens.
struct VisibleKey {
  std::size_t index = 0;
  SequenceChunk chunk;
};

/// A query chunk, cut to its document's real tokens, and the key chunks it sees.
struct ChunkBlock {
  SequenceChunk queries;
  std::vector<VisibleKey> keys;
};

/// Every chunk of `queries` paired with every chunk of `keys` that it sees under `mask` inside
/// its document, both cut to their real tokens: one block per query chunk that sees a key, and
/// the rows that see none (whole chunks, or the padding that ends one), which the caller fills
/// with out 0 and lse -inf. The strategies that attend every key at once (all-gather, Ulysses)
/// make their blocks with it; the rotations pair per step (rotation_schedule.hpp).
struct ChunkPairing {
  std::vector<ChunkBlock> blocks;
  std::vector<SequenceChunk> rows_without_keys;
};
ChunkPairing pair_chunks(const std::vector<SequenceChunk>& queries, const std::vector<SequenceChunk>& keys,
                         const AttentionMask& mask, const DocumentLayout* documents);

}  // namespace spattn
