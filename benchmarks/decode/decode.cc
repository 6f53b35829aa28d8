// decode: autoregressive decode throughput of grove's LLaMA decoder (issue 38).
// For each config (--configs: a LLaMA-1B-class "1b" and a "small" one, random
// bf16 weights written as a Hugging Face checkpoint under --model-dir) and
// each batch (--batches), B requests are prefilled and then decoded for
// --steps steps by DecodeLoop (Note [Decode loop on the device]) in four
// modes on the same recorded step: "server", one DecodeLoop::run per step
// with the rows set again before it (what the Generator pays per step when
// requests join or leave every step: row uploads, the launch, the tokens,
// positions and row state read back); "kept", the same with the rows as they
// stand (what a server that steps on the host pays where no request joins or
// leaves: a run per step, its tokens, positions and row state read back);
// "per-step", one graph launch per step within a run (the host spins on the
// mapped step counter, reads the step's tokens and stop flag from mapped
// memory, then replays: DecodeLoop::run; so every token reaches the host, as
// streaming and EOS need, before the next step is launched, while the next
// step's input ids and positions never leave the device); and --steps steps in
// one conditional WHILE graph launch. Reports tokens/s, step time, and model bandwidth utilisation:
// the bytes a step must read (weights less the input embedding table, plus the KV cache of the
// bucket's rows over all max_seq_len positions, which the masked attention reads) / step time /
// the HBM peak (--hbm-tbs, else from the device name). Each mode's runs give the same tokens
// (checked).
//
// What the loops pay per step beyond the step's kernels: "per-step" costs
// what WHILE does (H200, session 19 round 1: small 81.0 against 82.0 us, 1B
// 868.7 against 871.2): the host sees a step's counter as its last kernel
// runs and its next launch is queued before the GPU idles, and a WHILE
// iteration costs about its 1.5 us condition kernel, so several steps per
// iteration buy nothing either (Note [Steps per WHILE iteration]). WHILE's
// gain is over the loops a server runs when it keeps its books on the host
// each step: 1.43x over "kept" and 1.66x over "server" on the small config
// (117.1 and 135.9 against 82.0 us).
//
//   decode [--device auto|cuda|sim] [--configs 1b,small] [--batches 1,8,32,64]
//          [--steps 64] [--prompt 16] [--max-seq-len 128] [--repeats 5]
//          [--hbm-tbs 3.35] [--attention fused|unfused] [--norms fused|unfused]
//          [--model-dir DIR]
//          [--json FILE]
//   decode load ...   (an open-loop serving load: decode_load.cc, `decode load --help`)
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "benchmarks/common/flags.h"
#include "benchmarks/common/json_report.h"
#include "benchmarks/common/table.h"
#include "benchmarks/decode/decode_checkpoint.h"
#include "benchmarks/decode/decode_load.h"
#include "benchmarks/decode/env_variants.h"
#include "runtime/device_context.h"
#include "serving/llm/decode_loop.h"
#include "serving/llm/decoder.h"

namespace grove::benchmarks {
namespace {

using serving::llm::DecodeLoop;
using serving::llm::DecodeMode;
using serving::llm::Decoder;

constexpr const char* kName = "decode";

const std::vector<FlagSpec> kFlags = {
    kDeviceFlag,
    {"--configs", "LIST", "model configs, of 1b and small (default 1b,small)"},
    {"--batches", "LIST", "concurrent requests per run (default 1,8,32,64)"},
    {"--steps", "N", "decode steps per timed run (default 64)"},
    {"--prompt", "N", "prompt tokens per request (default 16)"},
    {"--max-seq-len", "T", "KV-cache positions per request (default 128)"},
    {"--repeats", "R", "timed runs per mode (default 5; the median is reported)"},
    {"--hbm-tbs", "TB/s",
     "HBM bandwidth for utilisation (default: from the device name, H100 SXM 3.35, H200 4.8, "
     "else 3.35)"},
    {"--dtype", "bf16|f32", "model dtype (default bf16)"},
    {"--attention", "fused|unfused",
     "decode attention as one kernel per layer (default) or the unfused ops"},
    {"--norms", "fused|unfused",
     "with fused attention, each norm inside the projection after it (default) or apart"},
    {"--model-dir", "DIR", "checkpoint directories go here (default /tmp/grove_decode_models)"},
    {"--while-steps", "LIST",
     "steps per WHILE iteration (Note [Steps per WHILE iteration]); the first is the table's, "
     "each other one is timed too, on a loop of its own (default 1)"},
    {"--variants", "LIST",
     "environment settings to time against the defaults in this process, at each batch: "
     "variants split by ';', a variant's NAME=VALUE pairs by ',' (e.g. "
     "'GROVE_GEMV_A_SHARED=1;GROVE_ATTENTION_WARM=1,GROVE_GEMV_A_SHARED=1'); each records a loop "
     "of its own with its settings, then the defaults are timed again (Note [Decode switches in "
     "one process])"},
    kJsonFlag,
};

struct ModeResult {
  double step_us = 0;  // median over repeats
  double spread = 0;
  std::vector<std::vector<int64_t>> tokens;  // of the last repeat
};

// Prefills `batch` seeded prompts into slots 0..batch-1 and starts their rows
// (greedy); returns each row's start.
// The seeded prompts of rows 0..batch-1 (the same in every run and mode).
std::vector<std::vector<int64_t>> seeded_prompts(int64_t vocab_size, int64_t batch,
                                                 int64_t prompt) {
  std::mt19937 rng(7);
  std::uniform_int_distribution<int64_t> token(3, vocab_size - 1);
  std::vector<std::vector<int64_t>> prompts;
  for (int64_t row = 0; row < batch; ++row) {
    std::vector<int64_t>& ids = prompts.emplace_back(static_cast<size_t>(prompt));
    for (int64_t& id : ids) id = token(rng);
  }
  return prompts;
}

std::vector<serving::llm::DecodeRowStart> start_requests(Decoder& decoder, DecodeLoop& loop,
                                                         int64_t batch, int64_t prompt,
                                                         int64_t steps) {
  const std::vector<std::vector<int64_t>> prompts =
      seeded_prompts(decoder.config().vocab_size, batch, prompt);
  std::vector<serving::llm::DecodeRowStart> starts;
  for (int64_t row = 0; row < batch; ++row) {
    const std::vector<int64_t>& ids = prompts[static_cast<size_t>(row)];
    std::vector<float> logits = decoder.prefill(row, ids);
    int64_t first = serving::llm::sample_token(logits, {}, 0);
    starts.push_back(
        {.token = first, .position = prompt, .generated = 1, .max_new_tokens = steps + 1});
    loop.set_row(row, starts.back());
  }
  return starts;
}

// The HBM peak of a known GPU by its name in TB/s, or 0.
double hbm_peak_tbs(const std::string& name) {
  if (name.find("H200") != std::string::npos) return 4.8;
  if (name.find("H100") != std::string::npos) {
    return name.find("PCIe") != std::string::npos ? 2.0 : 3.35;
  }
  return 0;
}

// Row `row`'s token at each step (for comparing runs, e.g. --attention fused and unfused).
std::vector<int64_t> row_tokens(const std::vector<std::vector<int64_t>>& tokens, size_t row) {
  std::vector<int64_t> column;
  for (const std::vector<int64_t>& step : tokens) column.push_back(step.at(row));
  return column;
}

ModeResult time_mode(Decoder& decoder, DecodeLoop& loop, DecodeMode mode, int64_t batch,
                     int64_t prompt, int64_t steps, int64_t repeats) {
  ModeResult result;
  std::vector<double> samples;
  for (int64_t repeat = 0; repeat <= repeats; ++repeat) {  // repeat 0 warms up
    start_requests(decoder, loop, batch, prompt, steps);
    Stopwatch watch;
    serving::llm::DecodeRun run = loop.run(steps, mode);
    const double elapsed = watch.elapsed_us();
    GROVE_CHECK(run.steps == steps, kName, ": a run took ", run.steps, " steps, expected ", steps);
    if (repeat > 0) samples.push_back(elapsed / static_cast<double>(steps));
    result.tokens = run.tokens;
  }
  LatencySummary summary = summarize(samples);
  result.step_us = summary.median_us;
  result.spread = summary.spread();
  return result;
}

// What the server pays per step where it cannot loop on the device (a
// request joins or leaves every step: Generator::decode_on_device with one
// step): the rows set again from the last tokens, then DecodeLoop::run of
// one step, which uploads them, replays the step graph, waits for its
// tokens and reads positions and row state back.
// With set_rows false, the rows are set once and each step is DecodeLoop::run
// of one step as they stand: what the Generator pays per step where no
// request joins or leaves but it steps on the host (no WHILE launch).
ModeResult time_server_steps(Decoder& decoder, DecodeLoop& loop, int64_t batch, int64_t prompt,
                             int64_t steps, int64_t repeats, bool set_rows = true) {
  ModeResult result;
  std::vector<double> samples;
  for (int64_t repeat = 0; repeat <= repeats; ++repeat) {  // repeat 0 warms up
    std::vector<serving::llm::DecodeRowStart> rows =
        start_requests(decoder, loop, batch, prompt, steps);
    result.tokens.clear();
    Stopwatch watch;
    for (int64_t step = 0; step < steps; ++step) {
      if (set_rows) {
        for (int64_t row = 0; row < batch; ++row) {
          loop.set_row(row, rows[static_cast<size_t>(row)]);
        }
      }
      serving::llm::DecodeRun run = loop.run(1, DecodeMode::kPerStepGraphs);
      GROVE_CHECK(run.steps == 1, kName, ": a server step ran ", run.steps, " steps");
      for (int64_t row = 0; row < batch; ++row) {
        serving::llm::DecodeRowStart& start = rows[static_cast<size_t>(row)];
        start.token = run.tokens[0][static_cast<size_t>(row)];
        ++start.position;
        ++start.generated;
      }
      result.tokens.push_back(run.tokens[0]);
    }
    const double elapsed = watch.elapsed_us();
    if (repeat > 0) samples.push_back(elapsed / static_cast<double>(steps));
  }
  LatencySummary summary = summarize(samples);
  result.step_us = summary.median_us;
  result.spread = summary.spread();
  return result;
}

// Note [Decode switches in one process]
// A kernel switch (GROVE_GEMV_A_SHARED, GROVE_ATTENTION_WARM, ...) is read when
// a launch is captured or the decode program is compiled, so a DecodeLoop
// recorded while it is set replays that choice. --variants records one loop
// per variant with its settings (then restores them) on the same decoder,
// checkpoint and prompts, times its per-step and WHILE modes like the table's,
// checks its tokens against the table's per-step tokens, and then times a fresh
// loop of the defaults again, so that each ratio compares runs minutes apart at
// most on one GPU (separate processes paid ~10 s each for the checkpoint and
// the prefills, and a different host state). Test: decode_smoke_test.sh (sim).
nlohmann::json time_variants(Decoder& decoder, const std::vector<EnvVariant>& variants,
                             int64_t batch, int64_t prompt, int64_t steps, int64_t repeats,
                             int64_t steps_per_iteration, const ModeResult& reference,
                             const std::string& config_name) {
  nlohmann::json rows = nlohmann::json::array();
  std::vector<EnvVariant> order = variants;
  order.emplace_back();  // the defaults again, last
  for (const EnvVariant& variant : order) {
    const std::string name = variant_name(variant);
    ModeResult per_step;
    ModeResult looped;
    bool looped_ran = false;
    std::vector<std::string> kernels;
    {
      VariantEnvironment environment(variant);
      DecodeLoop loop(
          decoder,
          {.bucket = batch, .max_steps = steps, .steps_per_iteration = steps_per_iteration});
      loop.warm_up();
      kernels = loop.step_kernels();
      per_step =
          time_mode(decoder, loop, DecodeMode::kPerStepGraphs, batch, prompt, steps, repeats);
      looped_ran = loop.while_available();
      if (looped_ran) {
        looped = time_mode(decoder, loop, DecodeMode::kWhileLoop, batch, prompt, steps, repeats);
      }
    }
    const bool same_tokens =
        per_step.tokens == reference.tokens && (!looped_ran || looped.tokens == reference.tokens);
    std::printf("%s batch %lld variant %s: per-step %.1f us, WHILE %s us, tokens %s\n",
                config_name.c_str(), static_cast<long long>(batch), name.c_str(), per_step.step_us,
                looped_ran ? format_fixed(looped.step_us, 1).c_str() : "refused",
                same_tokens ? "identical" : "DIFFER");
    std::fflush(stdout);  // a run cut short keeps the variants it finished
    nlohmann::json row = {{"variant", name},
                          {"per_step_us", per_step.step_us},
                          {"per_step_spread", per_step.spread},
                          {"tokens_identical", same_tokens},
                          {"step_kernels", kernels}};
    if (looped_ran) {
      row["while_us"] = looped.step_us;
      row["while_spread"] = looped.spread;
    }
    rows.push_back(std::move(row));
  }
  return rows;
}

int run(int argc, char** argv) {
  std::optional<FlagValues> parsed = parse_flags_or_help(
      kName, "Decode tokens/s: per-step graphs vs one WHILE graph.", argc, argv, kFlags);
  if (!parsed) return 0;
  const FlagValues& flags = *parsed;
  runtime::Device device = resolve_device(flags.text("--device", "auto"));
  const std::vector<std::string> configs = flags.list("--configs", {"1b", "small"});
  std::vector<int64_t> batches;
  for (const std::string& item : flags.list("--batches", {"1", "8", "32", "64"})) {
    batches.push_back(cli::parse_integer("--batches", item, 1, 4096));
  }
  const int64_t steps = flags.integer("--steps", 64, 1, 4096);
  const int64_t prompt = flags.integer("--prompt", 16, 1, 4096);
  const int64_t max_seq_len = flags.integer("--max-seq-len", 128, 2, 1 << 16);
  const int64_t repeats = flags.integer("--repeats", 5, 1, 1000);
  const bool hbm_given = flags.has("--hbm-tbs");
  double hbm_tbs = hbm_given ? flags.positive_number("--hbm-tbs", 3.35) : 3.35;
  const std::string dtype_name = flags.text("--dtype", "bf16");
  if (dtype_name != "bf16" && dtype_name != "f32") {
    throw UsageError("--dtype must be bf16 or f32; got " + dtype_name);
  }
  const runtime::DType dtype = dtype_name == "bf16" ? runtime::DType::kBF16 : runtime::DType::kF32;
  if (prompt + steps > max_seq_len) {
    throw UsageError(str_cat("--prompt ", prompt, " plus --steps ", steps, " exceed --max-seq-len ",
                             max_seq_len));
  }
  const std::string attention = flags.text("--attention", "fused");
  if (attention != "fused" && attention != "unfused") {
    throw UsageError("--attention must be fused or unfused; got " + attention);
  }
  const std::string norms = flags.text("--norms", "fused");
  if (norms != "fused" && norms != "unfused") {
    throw UsageError("--norms must be fused or unfused; got " + norms);
  }
  const std::string model_root = flags.text("--model-dir", "/tmp/grove_decode_models");
  const std::string json_path = flags.text("--json", "");
  if (!json_path.empty()) cli::check_output_path("--json", json_path);
  const std::vector<EnvVariant> variants = parse_variants(flags.text("--variants", ""));
  std::vector<int64_t> while_steps;
  for (const std::string& item : flags.list("--while-steps", {"1"})) {
    while_steps.push_back(cli::parse_integer("--while-steps", item, 1, 64));
  }

  nlohmann::json report = report_header(kName, device);
  // The peak the MBU divides by follows the device unless --hbm-tbs names one.
  std::string hbm_source = "--hbm-tbs";
  if (!hbm_given) {
    const std::string name = report["device_name"].get<std::string>();
    const double known = hbm_peak_tbs(name);
    hbm_source = known > 0 ? "from the device name " + name : "an unknown device: H100 SXM's";
    hbm_tbs = known > 0 ? known : 3.35;
  }
  std::printf("HBM peak for MBU: %.2f TB/s (%s)\n", hbm_tbs, hbm_source.c_str());
  report["hbm_tbs_source"] = hbm_source;
  report["steps"] = steps;
  report["prompt"] = prompt;
  report["max_seq_len"] = max_seq_len;
  report["hbm_tbs"] = hbm_tbs;
  report["repeats"] = repeats;
  report["dtype"] = dtype_name;
  report["attention"] = attention;
  report["norms"] = norms;
  std::printf(
      "%s on %s (%s): %lld decode steps per run after a %lld-token prompt, "
      "max_seq_len %lld, %s, %s attention, %s norms, median of %lld runs\n",
      kName, device.str().c_str(), report["device_name"].get<std::string>().c_str(),
      static_cast<long long>(steps), static_cast<long long>(prompt),
      static_cast<long long>(max_seq_len), dtype_name.c_str(), attention.c_str(), norms.c_str(),
      static_cast<long long>(repeats));
  Table table({{"config"},
               {"batch", Align::kRight},
               {"server us", Align::kRight},
               {"kept us", Align::kRight},
               {"per-step us", Align::kRight},
               {"while us", Align::kRight},
               {"while/per-step", Align::kRight},
               {"while/server", Align::kRight},
               {"while/kept", Align::kRight},
               {"tokens/s", Align::kRight},
               {"MBU", Align::kRight}});
  for (const std::string& config_name : configs) {
    serving::llm::DecoderConfig config =
        decode_benchmark_config(config_name, dtype, std::max<int64_t>(max_seq_len, 2048));
    const std::string dir = model_root + "/" + config_name + "_" + dtype_name;
    Stopwatch write_watch;
    const bool wrote = write_decode_checkpoint(dir, config, 2026);
    std::printf("%s: checkpoint %s %s (%.1f s)\n", config_name.c_str(), dir.c_str(),
                wrote ? "written" : "reused", write_watch.elapsed_s());
    serving::llm::DecoderOptions options;
    options.device = device;
    options.max_seq_len = max_seq_len;
    options.batch_buckets = batches;
    options.prompt_buckets = {prompt};
    options.fused_attention = attention == "fused";
    options.fused_norms = norms == "fused";
    Stopwatch load_watch;
    std::unique_ptr<Decoder> decoder = Decoder::load(dir, options);
    const double load_s = load_watch.elapsed_s();
    const size_t element = runtime::dtype_size(dtype);
    const double embed_bytes =
        static_cast<double>(config.vocab_size * config.hidden_size) * static_cast<double>(element);
    const double weights_read = static_cast<double>(decoder->state().weight_bytes()) - embed_bytes;
    nlohmann::json config_json = {{"config", config_name},
                                  {"hidden_size", config.hidden_size},
                                  {"layers", config.num_layers},
                                  {"heads", config.num_heads},
                                  {"kv_heads", config.num_kv_heads},
                                  {"intermediate_size", config.intermediate_size},
                                  {"vocab_size", config.vocab_size},
                                  {"weights_bytes", decoder->state().weight_bytes()},
                                  {"weights_read_per_step_bytes", weights_read},
                                  {"load_s", load_s}};
    for (int64_t batch : batches) {
      DecodeLoop loop(
          *decoder,
          {.bucket = batch, .max_steps = steps, .steps_per_iteration = while_steps.front()});
      Stopwatch record_watch;
      loop.warm_up();
      const double record_s = record_watch.elapsed_s();
      ModeResult per_step =
          time_mode(*decoder, loop, DecodeMode::kPerStepGraphs, batch, prompt, steps, repeats);
      ModeResult server = time_server_steps(*decoder, loop, batch, prompt, steps, repeats);
      ModeResult kept = time_server_steps(*decoder, loop, batch, prompt, steps, repeats, false);
      GROVE_CHECK(kept.tokens == per_step.tokens, kName, ": config ", config_name, " batch ", batch,
                  ": one-step runs with the rows kept give other tokens than the per-step graphs");
      // Row 0's prompt and greedy tokens, for compare_hf.py --grove-json (tokens against
      // transformers'): its first token is the prefill's, then one per step.
      const std::vector<int64_t> row0_prompt = seeded_prompts(config.vocab_size, 1, prompt).front();
      std::vector<int64_t> row0_greedy = {
          serving::llm::sample_token(decoder->prefill(0, row0_prompt), {}, 0)};
      for (int64_t token : row_tokens(per_step.tokens, 0)) row0_greedy.push_back(token);
      GROVE_CHECK(server.tokens == per_step.tokens, kName, ": config ", config_name, " batch ",
                  batch, ": one-step runs give other tokens than the per-step graphs");
      // Note [Refused WHILE bodies]: without a WHILE graph the per-step
      // numbers are still reported, and the WHILE columns say it was refused.
      const bool looped_ran = loop.while_available();
      ModeResult looped;
      if (looped_ran) {
        looped = time_mode(*decoder, loop, DecodeMode::kWhileLoop, batch, prompt, steps, repeats);
        GROVE_CHECK(per_step.tokens == looped.tokens, kName, ": config ", config_name, " batch ",
                    batch, ": the WHILE loop's tokens differ from the per-step graphs'");
      } else {
        std::printf("%s batch %lld: WHILE graph refused, per-step only: %s\n", config_name.c_str(),
                    static_cast<long long>(batch), loop.while_refusal().c_str());
      }
      // The other steps per WHILE iteration, each on a loop of its own.
      nlohmann::json by_steps = nlohmann::json::object();
      for (size_t i = 1; looped_ran && i < while_steps.size(); ++i) {
        DecodeLoop other(
            *decoder, {.bucket = batch, .max_steps = steps, .steps_per_iteration = while_steps[i]});
        other.warm_up();
        if (!other.while_available()) continue;
        ModeResult timed =
            time_mode(*decoder, other, DecodeMode::kWhileLoop, batch, prompt, steps, repeats);
        GROVE_CHECK(timed.tokens == per_step.tokens, kName, ": config ", config_name, " batch ",
                    batch, ": the WHILE loop with ", while_steps[i],
                    " steps per iteration gives other tokens than the per-step graphs");
        std::printf(
            "%s batch %lld: WHILE with %lld steps per iteration: %.1f us per step, %.2fx per-step "
            "graphs, %.2fx the server loop (tokens identical)\n",
            config_name.c_str(), static_cast<long long>(batch),
            static_cast<long long>(while_steps[i]), timed.step_us, per_step.step_us / timed.step_us,
            server.step_us / timed.step_us);
        by_steps[std::to_string(while_steps[i])] = {
            {"step_us", timed.step_us},
            {"spread", timed.spread},
            {"over_per_step", per_step.step_us / timed.step_us},
            {"over_server", server.step_us / timed.step_us}};
      }
      // The best mode that ran, for tokens/s and MBU.
      const double best_us = looped_ran ? looped.step_us : per_step.step_us;
      const double kv_read =
          2.0 * static_cast<double>(config.num_layers * batch * config.num_kv_heads * max_seq_len *
                                    config.head_dim() * element);
      const double bytes = weights_read + kv_read;
      auto mbu = [&](double step_us) { return bytes / (step_us * 1e-6) / (hbm_tbs * 1e12); };
      auto tokens_per_s = [&](double step_us) { return batch / (step_us * 1e-6); };
      table.add_row({config_name, std::to_string(batch), format_fixed(server.step_us, 1),
                     format_fixed(kept.step_us, 1), format_fixed(per_step.step_us, 1),
                     looped_ran ? format_fixed(looped.step_us, 1) : "refused",
                     looped_ran ? format_ratio(per_step.step_us / looped.step_us) : "-",
                     looped_ran ? format_ratio(server.step_us / looped.step_us) : "-",
                     looped_ran ? format_ratio(kept.step_us / looped.step_us) : "-",
                     format_fixed(tokens_per_s(best_us), 0) + (looped_ran ? "" : " (per-step)"),
                     format_fixed(100 * mbu(best_us), 1) + "%"});
      nlohmann::json result = {{"batch", batch},
                               {"record_s", record_s},
                               {"body_nodes", loop.body_nodes()},
                               {"step_kernels", loop.step_kernels()},
                               {"bytes_read_per_step", bytes},
                               {"row0_tokens", row_tokens(per_step.tokens, 0)},
                               {"row0_prompt", row0_prompt},
                               {"row0_greedy", row0_greedy},
                               {"kv_bytes_read_per_step", kv_read},
                               {"server_step_rows_kept",
                                {{"step_us", kept.step_us},
                                 {"spread", kept.spread},
                                 {"tokens_per_s", tokens_per_s(kept.step_us)}}},
                               {"server_step",
                                {{"step_us", server.step_us},
                                 {"spread", server.spread},
                                 {"tokens_per_s", tokens_per_s(server.step_us)}}},
                               {"per_step",
                                {{"step_us", per_step.step_us},
                                 {"spread", per_step.spread},
                                 {"tokens_per_s", tokens_per_s(per_step.step_us)},
                                 {"mbu", mbu(per_step.step_us)}}}};
      if (looped_ran) {
        result["while"] = {{"step_us", looped.step_us},
                           {"spread", looped.spread},
                           {"tokens_per_s", tokens_per_s(looped.step_us)},
                           {"mbu", mbu(looped.step_us)}};
        result["while_speedup"] = per_step.step_us / looped.step_us;
        result["while_over_server"] = server.step_us / looped.step_us;
        result["while_over_server_rows_kept"] = kept.step_us / looped.step_us;
        result["tokens_identical"] = true;
        result["while_steps_per_iteration"] = while_steps.front();
        result["while_other_steps_per_iteration"] = by_steps;
      } else {
        result["while"] = {{"refused", loop.while_refusal()}};
      }
      if (!variants.empty()) {
        // The table's own figures first, so that a cut run still has its reference.
        std::printf("%s batch %lld defaults (the table's): per-step %.1f us, WHILE %s us\n",
                    config_name.c_str(), static_cast<long long>(batch), per_step.step_us,
                    looped_ran ? format_fixed(looped.step_us, 1).c_str() : "refused");
        std::fflush(stdout);
        result["variants"] = time_variants(*decoder, variants, batch, prompt, steps, repeats,
                                           while_steps.front(), per_step, config_name);
      }
      config_json["results"].push_back(std::move(result));
    }
    report["configs"].push_back(config_json);
  }
  std::fputs(table.render().c_str(), stdout);
  std::printf("tokens/s and MBU: of the WHILE loop, or of per-step graphs where it was refused\n");
  std::printf(
      "server: one DecodeLoop::run per step with the rows set again (uploads, launch, tokens, "
      "positions and row state read back), as the Generator steps when a request joins or "
      "leaves every step; kept: the same with the rows as they stand (no request joins or "
      "leaves, but the host steps)\n");
  std::printf(
      "MBU: (weights less the embedding table + KV cache of the batch over max_seq_len) "
      "per step / step time / %.2f TB/s\n",
      hbm_tbs);
  if (!json_path.empty()) write_json_file(json_path, report);
  return 0;
}

}  // namespace
}  // namespace grove::benchmarks

// The benchmark's entry point, also exported by libgrove_decode.so so that a
// profiler in another runtime (probes/profile_decode.py: torch.profiler) can run it in-process.
extern "C" int grove_decode_main(int argc, char** argv) {
  if (argc > 1 && std::string(argv[1]) == "load") {
    return grove::benchmarks::benchmark_main("decode load", grove::benchmarks::run_decode_load,
                                             argc - 1, argv + 1);
  }
  return grove::benchmarks::benchmark_main(grove::benchmarks::kName, grove::benchmarks::run, argc,
                                           argv);
}
