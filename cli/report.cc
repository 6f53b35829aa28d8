#include "cli/report.h"

#include "cli/common/json_report.h"

namespace grove::cli {
namespace {

// Latency in µs below 10 ms, in ms above, with its unit.
std::string format_latency(double us) {
  return us < 10000 ? format_fixed(us, 1) + " us" : format_fixed(us / 1000, 2) + " ms";
}

std::string per_call(uint64_t count, size_t calls) {
  return format_fixed(static_cast<double>(count) / static_cast<double>(calls), 2);
}

std::string loss_text(const Measurement& m) {
  if (m.losses.empty()) return "-";
  return format_fixed(m.losses.front(), 4) + " -> " + format_fixed(m.losses.back(), 4);
}

}  // namespace

std::string dims_text(const compiler::ir::Program& program) {
  std::string text;
  for (const auto& [dim, value] : program.dims()) text += str_cat(", ", dim, " ", value);
  return text;
}

Table measurement_table(const Measurement& m, bool training) {
  Table table({{"metric"}, {"value"}});
  const std::string unit = training ? "step" : "call";
  table.add_row({"latency per " + unit + ", median", format_latency(m.latency.median_us)});
  table.add_row({"latency per " + unit + ", p90", format_latency(m.latency.p90_us)});
  table.add_row({"timed " + unit + "s", std::to_string(m.latency.count)});
  table.add_row({"kernels per " + unit, std::to_string(m.kernels_per_call)});
  table.add_row({"GEMMs per " + unit, std::to_string(m.gemms_per_call)});
  if (m.timed_activity) {
    const TreeActivity& a = *m.timed_activity;
    const size_t calls = m.latency.count;
    table.add_row({"graph launches per " + unit, per_call(a.replays, calls)});
    table.add_row({"eager segment runs per " + unit, per_call(a.eager_calls, calls)});
    table.add_row({"recordings while timed", std::to_string(a.recordings)});
    for (const auto& [reason, count] : a.fallbacks) {
      table.add_row({"fallback while timed: " + reason, std::to_string(count)});
    }
  }
  table.add_row({"compile", format_fixed(m.compile_s, 2) + " s"});
  if (training) {
    table.add_row({"loss (" + m.loss_name + ")", loss_text(m)});
  } else {
    table.add_row({"outputs", m.outputs_text});
  }
  return table;
}

Table tree_table(const nlohmann::json& stats) {
  Table table({{"tree"}, {"value"}});
  for (const auto& [key, value] : stats_summary(stats)) table.add_row({key, value});
  return table;
}

Table comparison_table(const std::vector<Measurement>& measurements, bool training) {
  const std::string unit = training ? "step" : "call";
  Table table(
      {{"backend"},
       {"median", Align::kRight},
       {"p90", Align::kRight},
       {"speedup vs " + (measurements.empty() ? std::string("first") : measurements[0].backend),
        Align::kRight},
       {"kernels", Align::kRight},
       {"GEMMs", Align::kRight},
       {"graph launches/" + unit, Align::kRight},
       {"eager segments/" + unit, Align::kRight},
       {training ? "loss" : "outputs"}});
  for (const Measurement& m : measurements) {
    double ratio =
        m.latency.median_us > 0 ? measurements[0].latency.median_us / m.latency.median_us : 0;
    std::string launches = "-", eager = "-";
    if (m.timed_activity) {
      launches = per_call(m.timed_activity->replays, m.latency.count);
      eager = per_call(m.timed_activity->eager_calls, m.latency.count);
    }
    table.add_row({m.backend, format_latency(m.latency.median_us), format_latency(m.latency.p90_us),
                   format_ratio(ratio), std::to_string(m.kernels_per_call),
                   std::to_string(m.gemms_per_call), launches, eager,
                   training ? loss_text(m) : m.outputs_text});
  }
  return table;
}

nlohmann::json measurement_json(const Measurement& m, bool training) {
  nlohmann::json json{{"backend", m.backend},
                      {"mode", training ? "training" : "inference"},
                      {"latency", latency_json(m.latency)},
                      {"kernels_per_call", m.kernels_per_call},
                      {"gemms_per_call", m.gemms_per_call},
                      {"compile_s", m.compile_s},
                      {"warmup_s", m.warmup_s}};
  if (training) {
    json["loss_name"] = m.loss_name;
    json["losses"] = m.losses;
  } else {
    json["outputs"] = m.outputs_text;
  }
  if (m.timed_activity) {
    const TreeActivity& a = *m.timed_activity;
    json["timed_tree_activity"] = {{"warmups", a.warmups},
                                   {"recordings", a.recordings},
                                   {"replays", a.replays},
                                   {"eager_calls", a.eager_calls},
                                   {"capture_failures", a.capture_failures},
                                   {"fallbacks", a.fallbacks}};
  }
  return json;
}

}  // namespace grove::cli
