#include "run_report.hpp"

#include <algorithm>
#include <cmath>
#include <iomanip>
#include <sstream>

#include "spattn/attention_options.hpp"

namespace spattn::app {

double forward_flop(const RunOptions& options) {
  const double per_pair = 4.0 * static_cast<double>(options.batch * options.heads * options.head_dim);
  const bool windowed = options.window_left >= 0 || (options.window_right >= 0 && !options.causal);
  AttentionOptions attention;
  attention.causal = options.causal;
  attention.window_left = options.window_left;
  attention.window_right = options.window_right;
  const AttentionMask mask = AttentionMask::from_options(attention);
  const std::vector<int64_t> documents =
      options.document_lengths.empty() ? std::vector<int64_t>{options.seq} : options.document_lengths;
  double pairs = 0;
  for (int64_t length : documents) {
    const double S = static_cast<double>(length);
    pairs += windowed ? static_cast<double>(mask.visible_pairs(0, length, 0, length))
                      : S * S * (options.causal ? 0.5 : 1.0);
  }
  return per_pair * pairs;
}

namespace {

std::string window_text(const RunOptions& options) {
  if (options.window_left < 0 && options.window_right < 0) return "none";
  return std::to_string(options.window_left) + "," + std::to_string(options.window_right);
}

std::string number(double value, int precision = 3) {
  std::ostringstream text;
  text << std::fixed << std::setprecision(precision) << value;
  return text.str();
}

std::string scientific(double value) {
  std::ostringstream text;
  text << std::scientific << std::setprecision(2) << value;
  return text.str();
}

// JSON has no infinity: a failed comparison's error prints as null.
std::string json_number(double value) {
  if (!std::isfinite(value)) return "null";
  std::ostringstream text;
  text << std::setprecision(6) << value;
  return text.str();
}

void table_row(std::ostringstream& text, const std::vector<std::string>& cells, const std::vector<int>& widths) {
  for (std::size_t i = 0; i < cells.size(); ++i) text << std::left << std::setw(widths[i]) << cells[i];
  text << "\n";
}

void timing_rows(std::ostringstream& text, const char* pass, const PassTiming& timing,
                 const std::vector<int>& widths) {
  const Profile& profile = timing.profile;
  table_row(text,
            {pass, number(profile.total_ms), number(profile.compute_ms), number(profile.comm_wait_ms),
             number(timing.tflops, 4), number(profile.bytes_sent / (1 << 20), 2), std::to_string(profile.messages_sent)},
            widths);
}

void step_rows(std::ostringstream& text, const char* pass, const Profile& profile) {
  if (profile.steps.empty()) return;
  text << "\n" << pass << " per step (rank 0)\n";
  const std::vector<int> widths = {8, 14, 14, 12, 10};
  table_row(text, {"step", "compute ms", "comm wait ms", "sent MiB", "messages"}, widths);
  for (std::size_t step = 0; step < profile.steps.size(); ++step) {
    const StepTiming& timing = profile.steps[step];
    table_row(text,
              {std::to_string(step), number(timing.compute_ms), number(timing.comm_wait_ms),
               number(timing.bytes_sent / (1 << 20), 2), std::to_string(timing.messages_sent)},
              widths);
  }
}

}  // namespace

std::string format_table(const RunReport& report) {
  const RunOptions& o = report.options;
  std::ostringstream text;
  text << "spattn run: " << o.algorithm << " on " << report.ranks << " rank" << (report.ranks == 1 ? "" : "s");
  if (report.device.kind == DeviceKind::cpu)
    text << " x " << report.threads_per_rank << " thread" << (report.threads_per_rank == 1 ? "" : "s")
         << " (cpu) over " << report.transport << "\n";
  else
    text << " on " << device_kind_name(report.device.kind) << " over " << report.transport << " ("
         << report.ranks_per_device << " rank" << (report.ranks_per_device == 1 ? "" : "s") << " per GPU), kernel "
         << kernel_choice_name(o.kernel) << "\n";
  if (!report.selection.empty()) text << "  " << report.selection << "\n";
  text
       << "  shape B=" << o.batch << " S=" << o.seq << " H=" << o.heads << " HK=" << o.kv_heads << " D=" << o.head_dim
       << "  " << dtype_name(o.dtype) << "  causal=" << (o.causal ? "yes" : "no") << "  window=" << window_text(o)
       << "  S/rank=" << (o.seq + report.padding) / report.ranks << "\n";
  if (!report.documents.empty()) text << "  documents: " << report.documents << "\n";
  text
       << "  " << (o.inputs_dir.empty() ? "random inputs, seed " + std::to_string(o.seed) : "inputs from " + o.inputs_dir)
       << ", mean of " << o.iters << " timed iteration" << (o.iters == 1 ? "" : "s") << " after " << o.warmup
       << " warm-up; times are the slowest rank's, bytes this rank's\n\n";
  const std::vector<int> widths = {12, 12, 14, 14, 10, 12, 10};
  table_row(text, {"pass", "total ms", "compute ms", "comm wait ms", "TFLOP/s", "sent MiB", "messages"}, widths);
  timing_rows(text, "forward", report.forward, widths);
  if (report.backward) timing_rows(text, "backward", *report.backward, widths);
  step_rows(text, "forward", report.forward.profile);
  if (report.backward) step_rows(text, "backward", report.backward->profile);
  if (report.errors) {
    text << "\ncheck: max |error| against the fp64 reference; pass when distributed <= 2 x single-rank + floor\n";
    const std::vector<int> error_widths = {8, 14, 14, 14, 6};
    table_row(text, {"output", "distributed", "single rank", "bound", "pass"}, error_widths);
    for (const OutputError& error : *report.errors)
      table_row(text,
                {error.name, scientific(error.distributed), scientific(error.single_rank), scientific(error.bound),
                 error.pass ? "yes" : "NO"},
                error_widths);
    text << "check " << (all_pass(*report.errors) ? "PASSED" : "FAILED") << "\n";
  }
  return text.str();
}

// {"lengths": [...], "padding": P, "split": "per_document"}, or null without --doc-lens.
std::string documents_json(const RunOptions& options, int64_t padding) {
  const std::vector<int64_t>& lengths = options.document_lengths;
  if (lengths.empty()) return "null";
  std::ostringstream json;
  json << "{\"lengths\": [";
  for (std::size_t document = 0; document < lengths.size(); ++document) json << (document ? ", " : "") << lengths[document];
  json << "], \"padding\": " << padding << ", \"split\": \"" << document_split_name(options.document_split) << "\"}";
  return json.str();
}

std::string format_json(const RunReport& report) {
  const RunOptions& o = report.options;
  std::ostringstream json;
  auto pass_json = [&](const PassTiming& timing) {
    json << "{\"total\": " << json_number(timing.profile.total_ms) << ", \"comm\": "
         << json_number(timing.profile.comm_wait_ms) << ", \"compute\": " << json_number(timing.profile.compute_ms)
         << ", \"bytes_sent\": " << json_number(timing.profile.bytes_sent)
         << ", \"messages_sent\": " << timing.profile.messages_sent << "}";
  };
  json << "{\"algo\": \"" << o.algorithm << "\", \"ranks\": " << report.ranks
       << ", \"threads_per_rank\": " << report.threads_per_rank << ", \"device\": \""
       << device_kind_name(report.device.kind) << "\", \"transport\": \"" << report.transport
       << "\", \"kernel\": \"" << kernel_choice_name(o.kernel)
       << "\", \"ranks_per_device\": " << report.ranks_per_device
       << ", \"shape\": {\"batch\": " << o.batch << ", \"seq\": " << o.seq << ", \"heads\": " << o.heads
       << ", \"kv_heads\": " << o.kv_heads << ", \"head_dim\": " << o.head_dim << "}"
       << ", \"dtype\": \"" << dtype_name(o.dtype) << "\", \"causal\": " << (o.causal ? "true" : "false")
       << ", \"window\": [" << o.window_left << ", " << o.window_right << "]"
       << ", \"documents\": " << documents_json(o, report.padding)
       << ", \"selection\": " << (report.selection.empty() ? "null" : "\"" + report.selection + "\"")
       << ", \"backward\": " << (report.backward ? "true" : "false") << ", \"iters\": " << o.iters
       << ", \"seed\": " << o.seed << ", \"time_ms\": {\"forward\": ";
  pass_json(report.forward);
  if (report.backward) {
    json << ", \"backward\": ";
    pass_json(*report.backward);
  }
  json << "}, \"tflops\": {\"forward\": " << json_number(report.forward.tflops);
  if (report.backward) json << ", \"backward\": " << json_number(report.backward->tflops);
  json << "}, \"max_errors\": ";
  if (!report.errors) {
    json << "null, \"check\": null";
  } else {
    json << "{";
    bool first = true;
    for (const OutputError& error : *report.errors) {
      json << (first ? "" : ", ") << "\"" << error.name << "\": {\"distributed\": " << json_number(error.distributed)
           << ", \"single_rank\": " << json_number(error.single_rank) << ", \"bound\": " << json_number(error.bound)
           << ", \"pass\": " << (error.pass ? "true" : "false") << "}";
      first = false;
    }
    json << "}, \"check\": \"" << (all_pass(*report.errors) ? "pass" : "fail") << "\"";
  }
  json << "}";
  return json.str();
}

}  // namespace spattn::app
