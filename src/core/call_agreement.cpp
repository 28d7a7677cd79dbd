#include <algorithm>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include "spattn/communicator.hpp"
#include "spattn/error.hpp"

namespace spattn {

namespace {

// Each rank contributes one fixed-size record, so one all-gather carries every verdict.
constexpr std::size_t kMaxSignature = 24;
constexpr std::size_t kMessageBytes = 1024;

struct CallRecord {
  int64_t failed = 0;
  int64_t signature_length = 0;
  int64_t signature[kMaxSignature] = {};
  char message[kMessageBytes] = {};
};

// "seq=4096, heads=8": the fields of `values` that differ from `other`, named and shown as this
// rank's signature says (every rank builds the same fields for the same call).
std::string differing_fields(const std::vector<CallField>& fields, const CallRecord& values, const CallRecord& other) {
  std::ostringstream text;
  const int64_t common = std::min(values.signature_length, other.signature_length);
  bool first = true;
  for (int64_t i = 0; i < common; ++i) {
    if (values.signature[i] == other.signature[i]) continue;
    const CallField* field = i < static_cast<int64_t>(fields.size()) ? &fields[static_cast<std::size_t>(i)] : nullptr;
    text << (first ? "" : ", ") << (field ? field->name : "field") << "=";
    if (field && field->show)
      text << field->show(values.signature[i]);
    else
      text << values.signature[i];
    first = false;
  }
  if (values.signature_length != other.signature_length)
    text << (first ? "" : ", ") << values.signature_length << " fields";
  return text.str();
}

}  // namespace

void agree_on_call(Communicator& communicator, const std::string& local_error,
                   const std::vector<CallField>& call_signature) {
  SPATTN_CHECK(call_signature.size() <= kMaxSignature,
               "a call signature has at most " << kMaxSignature << " fields, got " << call_signature.size());
  CallRecord mine;
  mine.failed = local_error.empty() ? 0 : 1;
  mine.signature_length = static_cast<int64_t>(call_signature.size());
  for (std::size_t i = 0; i < call_signature.size(); ++i) mine.signature[i] = call_signature[i].value;
  std::memcpy(mine.message, local_error.data(), std::min(local_error.size(), kMessageBytes - 1));

  const int ranks = communicator.size();
  std::vector<CallRecord> records(static_cast<std::size_t>(ranks));
  communicator.host_all_gather(&mine, records.data(), sizeof(CallRecord));

  for (int rank = 0; rank < ranks; ++rank) {
    const CallRecord& record = records[static_cast<std::size_t>(rank)];
    if (!record.failed) continue;
    const std::string message =
        without_error_prefix(std::string(record.message, strnlen(record.message, kMessageBytes)));
    if (rank == communicator.rank()) SPATTN_FAIL(message);
    SPATTN_FAIL("rank " << rank << " rejected the call: " << message);
  }
  const CallRecord& first = records.front();
  for (int rank = 1; rank < ranks; ++rank) {
    const CallRecord& record = records[static_cast<std::size_t>(rank)];
    const bool same = record.signature_length == first.signature_length &&
                      std::equal(record.signature, record.signature + record.signature_length, first.signature);
    SPATTN_CHECK(same, "ranks disagree on the call: rank 0 has "
                           << differing_fields(call_signature, first, record) << " but rank " << rank << " has "
                           << differing_fields(call_signature, record, first)
                           << "; every rank must pass the same global shape, dtype and options (mask, scale and "
                              "kernel)");
  }
}

}  // namespace spattn
