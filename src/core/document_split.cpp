#include "core/name_table.hpp"
#include "spattn/attention_options.hpp"

namespace spattn {
namespace {

const NameTable<DocumentSplit>& document_split_names() {
  static const NameTable<DocumentSplit> table(
      "document split",
      {{DocumentSplit::per_document, "per_document"}, {DocumentSplit::whole_sequence, "whole_sequence"}});
  return table;
}

}  // namespace

std::string document_split_name(DocumentSplit split) { return document_split_names().name(split); }

DocumentSplit parse_document_split(const std::string& name) { return document_split_names().parse(name); }

}  // namespace spattn
