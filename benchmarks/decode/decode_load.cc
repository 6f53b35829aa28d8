// `decode load`: grove's LLaMA decoder serving an open-loop load (issue 38).
// Requests arrive at Poisson times (--rate per second, --requests of them,
// seeded) whatever the server's progress, each with a prompt length and an
// output length drawn from the mixes --prompt-lengths and --output-lengths
// (random token ids; EOS ignored so each runs to its length), and go through
// the real LlmService: continuous batching into the decoder's batch buckets,
// prefills between decode steps, runs of up to --loop-steps decode steps as
// one WHILE graph launch while no request joins or leaves (Note [Decode runs
// on the device]). Each token is timed where a client gets it (the service's
// on_token callback): time to first token from the request's arrival,
// inter-token latency between a request's consecutive tokens. Reports their
// p50 and p99, p99/p50 of the inter-token latency (the goal: <= 2), answered
// tokens/s over the run's wall time, and the batch sizes the steps ran.
//
//   decode load [--device auto|cuda|sim] [--config small|1b] [--dtype bf16|f32]
//               [--requests 200] [--rate 20] [--prompt-lengths 8,32,96]
//               [--output-lengths 16,64,128] [--buckets 1,2,4,8,16,32,64]
//               [--max-seq-len 256] [--loop-steps 8] [--prefills-per-step 0[,P...]]
//               [--prefill-chunk 0] [--compact-slots 0[,1]] [--variants LIST] [--seed 1]
//               [--model-dir DIR] [--json FILE]
//
// A run that fits a short GPU call: --config 1b --requests 256 --rate 400
// --buckets 16,32,64 --prefills-per-step 2,1 --prefill-chunk 32 (H100,
// session 19 round 2, one process: warm-up 20.3 s, each load about 2 s):
//   2 prefills a step: all 64 slots ran (99 steps at 64 rows), ITL p50 5.921
//     ms, p99 6.880 (1.16x), TTFT p50 394 ms, p99 850, 10459 tokens/s;
//   1 prefill a step: at most 49 rows (arrivals outran admission, requests
//     queued), ITL p50 4.055, p99 4.461 (1.10x), TTFT p50 532, p99 1124, 9108
//     tokens/s.
// Each prefill in a turn delays every stream's next token (Note [Prefills
// between decode steps]), so the second one costs ~1.9 ms of ITL, evenly.
#include "benchmarks/decode/decode_load.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "benchmarks/common/flags.h"
#include "benchmarks/common/json_report.h"
#include "benchmarks/common/latency.h"
#include "benchmarks/common/table.h"
#include "benchmarks/decode/decode_checkpoint.h"
#include "benchmarks/decode/env_variants.h"
#include "serving/llm/decoder.h"
#include "serving/llm/llm_service.h"

namespace grove::benchmarks {
namespace {

using Clock = std::chrono::steady_clock;
using serving::llm::CompletionRequest;
using serving::llm::CompletionSummary;
using serving::llm::Decoder;
using serving::llm::LlmService;

constexpr const char* kName = "decode load";

const std::vector<FlagSpec> kFlags = {
    {"--device", "auto|cuda|sim", "where to run (auto: cuda when present, else sim)"},
    {"--config", "small|1b", "model config (default small)"},
    {"--dtype", "bf16|f32", "model dtype (default bf16)"},
    {"--requests", "N", "requests in the run (default 200)"},
    {"--rate", "R", "mean arrivals per second, Poisson (default 20)"},
    {"--prompt-lengths", "LIST", "prompt lengths drawn uniformly (default 8,32,96)"},
    {"--output-lengths", "LIST", "output lengths drawn uniformly (default 16,64,128)"},
    {"--buckets", "LIST",
     "decode batch buckets; the largest is the slot count "
     "(default 1,2,4,8,16,32,64)"},
    {"--max-seq-len", "T", "KV-cache positions per request (default 256)"},
    {"--loop-steps", "K", "decode steps per WHILE launch; 0: host-stepped (default 8)"},
    {"--prefills-per-step", "LIST",
     "prefill calls before each decode step; 0: all that fit (default 0); a list runs the "
     "load once per value on the same warmed decoder, one row each"},
    {"--prefill-chunk", "C",
     "prompt tokens per prefill call (chunked prefill); 0: whole prompts (default 0)"},
    {"--compact-slots", "LIST",
     "1: requests move to low slots when that makes the batch bucket smaller (Note [Running "
     "requests move to low slots]), 0: never; a list runs the load once per value (each "
     "after the --prefills-per-step list's values) on the same warmed decoder (default 0)"},
    {"--variants", "LIST",
     "environment settings, one load each (after the --compact-slots and --prefills-per-step "
     "lists' values), on the same warmed decoder, its decode loops recorded under them: "
     "variants split by ';', a variant's GROVE_NAME=VALUE settings by ','"},
    {"--while-steps", "K",
     "decode steps per WHILE iteration (Note [Steps per WHILE iteration]; default 1)"},
    {"--prefill-small-m-gemm", "off|on|auto",
     "grove's small-M GEMMs in the prefill programs (DecoderOptions; default: GROVE_SMALL_M_GEMM)"},
    {"--decode-small-m-gemm", "off|on|auto",
     "grove's small-M GEMMs in the decode programs (DecoderOptions; default: GROVE_SMALL_M_GEMM)"},
    {"--seed", "S", "arrival times, lengths and prompts (default 1)"},
    {"--model-dir", "DIR", "checkpoint directories go here (default /tmp/grove_decode_models)"},
    {"--json", "FILE", "write the results as JSON"},
};

// What the client of one request saw: arrival and token times, how it ended.
struct ClientRecord {
  Clock::time_point arrival;
  std::vector<Clock::time_point> tokens;
  std::string end;
  int64_t prompt = 0;
  int64_t output = 0;
};

double ms(Clock::duration duration) {
  return std::chrono::duration<double, std::milli>(duration).count();
}

std::vector<int64_t> integer_list(const FlagValues& flags, const std::string& flag,
                                  const std::vector<std::string>& fallback) {
  std::vector<int64_t> values;
  for (const std::string& item : flags.list(flag, fallback)) {
    values.push_back(cli::parse_integer(flag, item, 1, 1 << 20));
  }
  return values;
}

}  // namespace

int run_decode_load(int argc, char** argv) {
  FlagValues flags = parse_flags(kName, argc, argv, kFlags);
  if (flags.help_requested()) {
    std::fputs(usage_text(kName,
                          "Open-loop serving load through LlmService: TTFT and inter-token "
                          "latency p50/p99, answered tokens/s.",
                          kFlags)
                   .c_str(),
               stdout);
    return 0;
  }
  runtime::Device device = resolve_device(flags.text("--device", "auto"));
  const std::string config_name = flags.text("--config", "small");
  const std::string dtype_name = flags.text("--dtype", "bf16");
  if (dtype_name != "bf16" && dtype_name != "f32") {
    throw UsageError("--dtype must be bf16 or f32; got " + dtype_name);
  }
  const runtime::DType dtype = dtype_name == "bf16" ? runtime::DType::kBF16 : runtime::DType::kF32;
  const int64_t requests = flags.integer("--requests", 200, 1, 1 << 20);
  const double rate = flags.positive_number("--rate", 20);
  const std::vector<int64_t> prompt_lengths =
      integer_list(flags, "--prompt-lengths", {"8", "32", "96"});
  const std::vector<int64_t> output_lengths =
      integer_list(flags, "--output-lengths", {"16", "64", "128"});
  const std::vector<int64_t> buckets =
      integer_list(flags, "--buckets", {"1", "2", "4", "8", "16", "32", "64"});
  const int64_t max_seq_len = flags.integer("--max-seq-len", 256, 2, 1 << 16);
  const int64_t loop_steps = flags.integer("--loop-steps", 8, 0, 4096);
  std::vector<int64_t> prefill_limits;
  for (const std::string& item : flags.list("--prefills-per-step", {"0"})) {
    prefill_limits.push_back(cli::parse_integer("--prefills-per-step", item, 0, 1 << 20));
  }
  const int64_t prefill_chunk = flags.integer("--prefill-chunk", 0, 0, 1 << 20);
  struct LoadRun {
    int64_t prefills_per_step;
    bool compact_slots;
    EnvVariant variant;
  };
  std::vector<EnvVariant> variants = parse_variants(flags.text("--variants", ""));
  if (variants.empty()) variants.emplace_back();
  std::vector<LoadRun> runs_to_do;
  for (const EnvVariant& variant : variants) {
    for (const std::string& item : flags.list("--compact-slots", {"0"})) {
      const bool compact = cli::parse_integer("--compact-slots", item, 0, 1) == 1;
      for (int64_t limit : prefill_limits) runs_to_do.push_back({limit, compact, variant});
    }
  }
  const int64_t seed = flags.integer("--seed", 1, 0, int64_t{1} << 62);
  const int64_t while_steps = flags.integer("--while-steps", 1, 1, 64);
  const std::string model_root = flags.text("--model-dir", "/tmp/grove_decode_models");
  const std::string json_path = flags.text("--json", "");
  if (!json_path.empty()) cli::check_output_path("--json", json_path);
  const int64_t longest_prompt = *std::max_element(prompt_lengths.begin(), prompt_lengths.end());
  const int64_t longest_output = *std::max_element(output_lengths.begin(), output_lengths.end());
  if (longest_prompt + longest_output - 1 > max_seq_len) {
    throw UsageError(str_cat("the longest prompt ", longest_prompt, " and output ", longest_output,
                             " need ", longest_prompt + longest_output - 1,
                             " positions; --max-seq-len is ", max_seq_len));
  }

  serving::llm::DecoderConfig config =
      decode_benchmark_config(config_name, dtype, std::max<int64_t>(max_seq_len, 2048));
  const std::string dir = model_root + "/" + config_name + "_" + dtype_name;
  const bool wrote = write_decode_checkpoint(dir, config, 2026);
  serving::llm::DecoderOptions options;
  options.device = device;
  options.max_seq_len = max_seq_len;
  options.batch_buckets = buckets;
  std::vector<int64_t> prompt_buckets = prompt_lengths;
  std::sort(prompt_buckets.begin(), prompt_buckets.end());
  prompt_buckets.erase(std::unique(prompt_buckets.begin(), prompt_buckets.end()),
                       prompt_buckets.end());
  options.prompt_buckets = prompt_buckets;
  options.chunked_prefill = prefill_chunk > 0;
  options.prefill_small_m_gemm = flags.text("--prefill-small-m-gemm", "");
  options.decode_small_m_gemm = flags.text("--decode-small-m-gemm", "");
  Stopwatch warm_watch;
  std::unique_ptr<Decoder> decoder = Decoder::load(dir, options);
  decoder->warm_up();
  const double warm_s = warm_watch.elapsed_s();
  std::string limits_text;
  for (int64_t limit : prefill_limits) {
    limits_text += str_cat(limits_text.empty() ? "" : ",", limit);
  }
  std::printf(
      "%s on %s: %s %s (checkpoint %s), %lld requests at %.1f/s, loop steps %lld, prefills per "
      "step %s, prefill chunk %lld, small-M GEMMs prefill '%s' decode '%s'; warm-up %.1f s\n",
      kName, device.str().c_str(), config_name.c_str(), dtype_name.c_str(),
      wrote ? "written" : "reused", static_cast<long long>(requests), rate,
      static_cast<long long>(loop_steps), limits_text.c_str(),
      static_cast<long long>(prefill_chunk), options.prefill_small_m_gemm.c_str(),
      options.decode_small_m_gemm.c_str(), warm_s);
  std::fflush(stdout);

  Table table({{"variant", Align::kLeft},
               {"prefills/step", Align::kRight},
               {"compact", Align::kRight},
               {"rate/s", Align::kRight},
               {"TTFT p50 ms", Align::kRight},
               {"TTFT p99 ms", Align::kRight},
               {"ITL p50 ms", Align::kRight},
               {"ITL p99 ms", Align::kRight},
               {"ITL p99/p50", Align::kRight},
               {"tokens/s", Align::kRight},
               {"max rows", Align::kRight},
               {"wall s", Align::kRight}});
  nlohmann::json runs = nlohmann::json::array();
  for (const auto& [prefills_per_step, compact_slots, variant] : runs_to_do) {
    // The service records its decode loops under the variant's settings.
    VariantEnvironment environment(variant);
    Stopwatch setup_watch;
    LlmService service(*decoder, nullptr,
                       {.max_new_tokens = longest_output,
                        .max_waiting = static_cast<size_t>(requests),
                        .decode_loop_steps = loop_steps,
                        .max_prefills_per_step = prefills_per_step,
                        .prefill_chunk = prefill_chunk,
                        .while_steps_per_iteration = while_steps,
                        .compact_slots = compact_slots});
    const double setup_s = setup_watch.elapsed_s();

    // The schedule: arrival offsets, lengths and prompts, all from the seed
    // (the same in every run).
    std::mt19937_64 rng(static_cast<uint64_t>(seed));
    std::exponential_distribution<double> gap(rate);
    std::uniform_int_distribution<size_t> pick_prompt(0, prompt_lengths.size() - 1);
    std::uniform_int_distribution<size_t> pick_output(0, output_lengths.size() - 1);
    std::uniform_int_distribution<int64_t> token(3, config.vocab_size - 1);
    std::vector<double> offsets_s;
    std::vector<CompletionRequest> schedule;
    double at = 0;
    for (int64_t i = 0; i < requests; ++i) {
      at += gap(rng);
      offsets_s.push_back(at);
      CompletionRequest request;
      request.prompt.resize(static_cast<size_t>(prompt_lengths[pick_prompt(rng)]));
      for (int64_t& id : request.prompt) id = token(rng);
      request.max_tokens = output_lengths[pick_output(rng)];
      request.ignore_eos = true;
      schedule.push_back(std::move(request));
    }

    // Callbacks run on the service's thread; the records are read after every request ended.
    std::vector<ClientRecord> records(static_cast<size_t>(requests));
    std::mutex mutex;
    std::condition_variable all_ended;
    int64_t ended = 0;
    const Clock::time_point start = Clock::now();
    for (int64_t i = 0; i < requests; ++i) {
      std::this_thread::sleep_until(
          start + std::chrono::duration_cast<Clock::duration>(
                      std::chrono::duration<double>(offsets_s[static_cast<size_t>(i)])));
      ClientRecord& record = records[static_cast<size_t>(i)];
      record.arrival = Clock::now();
      record.prompt = static_cast<int64_t>(schedule[static_cast<size_t>(i)].prompt.size());
      record.output = schedule[static_cast<size_t>(i)].max_tokens;
      record.tokens.reserve(static_cast<size_t>(record.output));
      service.submit(
          std::move(schedule[static_cast<size_t>(i)]),
          {.on_token = [&record](int64_t,
                                 const std::string&) { record.tokens.push_back(Clock::now()); },
           .on_end =
               [&, i](const CompletionSummary& summary) {
                 std::lock_guard<std::mutex> lock(mutex);
                 records[static_cast<size_t>(i)].end =
                     serving::llm::completion_end_name(summary.end);
                 if (++ended == requests) all_ended.notify_all();
               }});
    }
    {
      std::unique_lock<std::mutex> lock(mutex);
      all_ended.wait(lock, [&] { return ended == requests; });
    }
    const Clock::time_point finish = Clock::now();
    const serving::llm::LlmStats stats = service.stats();
    service.shutdown();

    std::vector<double> ttft_ms;
    std::vector<double> itl_ms;
    int64_t tokens = 0;
    int64_t complete = 0;
    for (const ClientRecord& record : records) {
      tokens += static_cast<int64_t>(record.tokens.size());
      if (record.end == "length" && static_cast<int64_t>(record.tokens.size()) == record.output) {
        ++complete;
      }
      if (record.tokens.empty()) continue;
      ttft_ms.push_back(ms(record.tokens.front() - record.arrival));
      for (size_t t = 1; t < record.tokens.size(); ++t) {
        itl_ms.push_back(ms(record.tokens[t] - record.tokens[t - 1]));
      }
    }
    GROVE_CHECK(complete == requests, kName, ": ", requests - complete, " of ", requests,
                " requests did not end with all their tokens (see the service's log)");
    const double wall_s = std::chrono::duration<double>(finish - start).count();
    const double ttft_p50 = percentile(ttft_ms, 0.5);
    const double ttft_p99 = percentile(ttft_ms, 0.99);
    const double itl_p50 = percentile(itl_ms, 0.5);
    const double itl_p99 = percentile(itl_ms, 0.99);
    const double tokens_per_s = static_cast<double>(tokens) / wall_s;
    int64_t max_rows = 0;
    std::string batches;
    for (const auto& [rows, steps] : stats.rows_per_step) {
      batches += str_cat(batches.empty() ? "" : ", ", rows, ":", steps);
      max_rows = std::max<int64_t>(max_rows, rows);
    }
    table.add_row({variant_name(variant), std::to_string(prefills_per_step),
                   compact_slots ? "1" : "0", format_fixed(rate, 1), format_fixed(ttft_p50, 2),
                   format_fixed(ttft_p99, 2), format_fixed(itl_p50, 3), format_fixed(itl_p99, 3),
                   format_ratio(itl_p99 / itl_p50), format_fixed(tokens_per_s, 0),
                   std::to_string(max_rows), format_fixed(wall_s, 2)});
    std::printf(
        "variant %s, prefills per step %lld, compact slots %d (service set up in %.1f s): decode "
        "steps %lld "
        "(%lld in %lld WHILE launches), prefills %lld, slot moves %lld; running rows:steps %s\n",
        variant_name(variant).c_str(), static_cast<long long>(prefills_per_step),
        compact_slots ? 1 : 0, setup_s, static_cast<long long>(stats.decode_steps),
        static_cast<long long>(stats.loop_steps), static_cast<long long>(stats.loop_launches),
        static_cast<long long>(stats.prefills), static_cast<long long>(stats.slot_moves),
        batches.c_str());
    // Note [Where a turn's time goes]: the host time of each kind of call.
    std::string calls_text;
    nlohmann::json call_times = nlohmann::json::object();
    double busy_s = 0;
    for (const auto& [key, time] : stats.call_times) {
      busy_s += time.seconds;
      const double per_call_ms = 1000.0 * time.seconds / static_cast<double>(time.calls);
      calls_text +=
          str_cat("\n  ", key, ": ", time.calls, " calls, ", format_fixed(1000.0 * time.seconds, 1),
                  " ms, ", format_fixed(per_call_ms, 3), " ms a call");
      if (time.steps > 0) {
        calls_text += str_cat(
            ", ", time.steps, " steps, ",
            format_fixed(1000.0 * time.seconds / static_cast<double>(time.steps), 3), " ms a step");
      }
      call_times[key] = {{"calls", time.calls}, {"steps", time.steps}, {"seconds", time.seconds}};
    }
    std::printf("host time in device calls: %.3f of %.3f s wall%s\n", busy_s, wall_s,
                calls_text.c_str());
    nlohmann::json run = {
        {"variant", variant_name(variant)},
        {"prefills_per_step", prefills_per_step},
        {"compact_slots", compact_slots},
        {"slot_moves", stats.slot_moves},
        {"ttft_ms", {{"p50", ttft_p50}, {"p99", ttft_p99}}},
        {"itl_ms", {{"p50", itl_p50}, {"p99", itl_p99}, {"p99_over_p50", itl_p99 / itl_p50}}},
        {"tokens", tokens},
        {"tokens_per_s", tokens_per_s},
        {"wall_s", wall_s},
        {"max_running_rows", max_rows},
        {"decode_steps", stats.decode_steps},
        {"loop_launches", stats.loop_launches},
        {"loop_steps_run", stats.loop_steps},
        {"prefills", stats.prefills}};
    nlohmann::json rows = nlohmann::json::object();
    for (const auto& [count, steps] : stats.rows_per_step) rows[std::to_string(count)] = steps;
    run["rows_per_step"] = rows;
    run["call_times"] = call_times;
    runs.push_back(std::move(run));
    // The table so far after each run, flushed: a run cut short keeps the rows before it.
    std::fputs(table.render().c_str(), stdout);
    std::fflush(stdout);
  }

  if (!json_path.empty()) {
    nlohmann::json report = report_header(kName, device);
    report["config"] = config_name;
    report["dtype"] = dtype_name;
    report["requests"] = requests;
    report["rate_per_s"] = rate;
    report["prompt_lengths"] = prompt_lengths;
    report["output_lengths"] = output_lengths;
    report["buckets"] = buckets;
    report["max_seq_len"] = max_seq_len;
    report["loop_steps"] = loop_steps;
    report["prefill_chunk"] = prefill_chunk;
    report["while_steps_per_iteration"] = while_steps;
    report["prefill_small_m_gemm"] = options.prefill_small_m_gemm;
    report["decode_small_m_gemm"] = options.decode_small_m_gemm;
    report["seed"] = seed;
    // The first run's figures at the top level (as before lists were taken), every run in "runs".
    for (const auto& [key, value] : runs.front().items()) report[key] = value;
    report["runs"] = runs;
    write_json_file(json_path, report);
  }
  return 0;
}

}  // namespace grove::benchmarks
