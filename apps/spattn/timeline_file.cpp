#include "timeline_file.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <iomanip>
#include <vector>

namespace spattn::app {
namespace {

// A span as it travels to rank 0: pass (0 forward, 1 backward), step, kind, start, end, bytes.
constexpr std::size_t kFields = 6;

void append_spans(std::vector<double>& values, double pass, const Profile& profile) {
  for (const ProfileSpan& span : profile.spans) {
    const double bytes = span.step >= 0 && span.step < static_cast<int>(profile.steps.size())
                             ? profile.steps[static_cast<std::size_t>(span.step)].bytes_sent
                             : 0.0;
    values.insert(values.end(),
                  {pass, static_cast<double>(span.step), span.kind == ProfileSpan::Kind::comm_wait ? 1.0 : 0.0,
                   span.start_ms, span.end_ms, bytes});
  }
}

}  // namespace

std::ofstream open_timeline(Communicator& world, const std::string& path) {
  std::ofstream file;
  std::string error;
  if (world.rank() == 0) {
    file.open(path);
    if (!file) error = "--timeline " + path + ": cannot open the file for writing";
  }
  agree_on_call(world, error, {});
  return file;
}

std::string write_timeline(Communicator& world, std::ofstream& file, const StrategyRun& run) {
  std::vector<double> mine;
  append_spans(mine, 0, run.forward);
  append_spans(mine, 1, run.backward);
  // Every rank sends as many values as the rank with the most, padded with NaN rows.
  const int count = static_cast<int>(mine.size() / kFields);
  std::vector<int> counts(static_cast<std::size_t>(world.size()));
  world.host_all_gather(&count, counts.data(), sizeof count);
  const std::size_t most = static_cast<std::size_t>(*std::max_element(counts.begin(), counts.end())) * kFields;
  if (most == 0) return {};
  mine.resize(most, std::nan(""));
  std::vector<double> everyone(most * static_cast<std::size_t>(world.size()));
  world.host_all_gather(mine.data(), everyone.data(), most * sizeof(double));
  if (world.rank() != 0) return {};
  file << "rank,pass,step,kind,start_ms,end_ms,step_bytes_sent\n" << std::setprecision(9);
  for (int rank = 0; rank < world.size(); ++rank) {
    const double* row = everyone.data() + static_cast<std::size_t>(rank) * most;
    for (int span = 0; span < counts[static_cast<std::size_t>(rank)]; ++span, row += kFields)
      file << rank << ',' << (row[0] == 0 ? "forward" : "backward") << ',' << static_cast<int>(row[1]) << ','
           << (row[2] == 0 ? "compute" : "comm_wait") << ',' << row[3] << ',' << row[4] << ','
           << static_cast<long long>(row[5]) << '\n';
  }
  file.flush();
  return file.good() ? std::string() : "--timeline: writing the file failed";
}

}  // namespace spattn::app
