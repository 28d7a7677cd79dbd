#include "schedule/document_cut.hpp"

namespace spattn {

ChunkPairing pair_chunks(const std::vector<SequenceChunk>& queries, const std::vector<SequenceChunk>& keys,
                         const AttentionMask& mask, const DocumentLayout* documents) {
  ChunkPairing pairing;
  for (const SequenceChunk& chunk : queries) {
    ChunkBlock block{real_part(documents, chunk), {}};
    const SequenceChunk& rows = block.queries;
    for (std::size_t index = 0; index < keys.size() && rows.length > 0; ++index) {
      const SequenceChunk key = real_part(documents, keys[index]);
      if (key.length > 0 && same_document(documents, rows.position, key.position) &&
          mask.any_visible(rows.position, rows.position + rows.length, key.position, key.position + key.length))
        block.keys.push_back({index, key});
    }
    const int64_t seen = block.keys.empty() ? 0 : rows.length;
    if (seen < chunk.length)
      pairing.rows_without_keys.push_back({chunk.position + seen, chunk.length - seen, chunk.local_offset + seen});
    if (!block.keys.empty()) pairing.blocks.push_back(std::move(block));
  }
  return pairing;
}

}  // namespace spattn
