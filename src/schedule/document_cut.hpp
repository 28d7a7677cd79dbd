#pragma once
// Where a strategy's blocks meet packed documents: a block pairs queries and keys of one
// document, each cut to the document's real tokens, so that the mask in global positions stays
// right inside it and padding is never attended. Without documents (nullptr) nothing is cut.

#include <cstdint>

#include "spattn/document_layout.hpp"

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

}  // namespace spattn
