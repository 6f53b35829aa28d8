// `grove serve MODEL_DIR`: a Hugging Face LLaMA or GPT-2 checkpoint directory
// served over HTTP: KServe v2 generate and generate_stream, OpenAI-compatible
// /v1/completions, /metrics (serving/llm/llm_routes.h). The decoder's prefill
// and decode buckets are recorded before listening; SIGTERM or SIGINT drains
// as `grove serve MODEL.json` does (Note [Draining on stop]).
#include <cstdio>
#include <filesystem>
#include <optional>
#include <random>

#include "cli/commands.h"
#include "cli/common/table.h"
#include "cli/decoder_options.h"
#include "cli/serve_support.h"
#include "cli/terminal_text.h"
#include "serving/llm/llm_routes.h"
#include "serving/llm/llm_service.h"
#include "serving/llm/tokenizer.h"

namespace grove::cli {
namespace {

std::string joined(const std::vector<int64_t>& values) {
  std::string text;
  for (int64_t value : values) text += (text.empty() ? "" : ",") + std::to_string(value);
  return text;
}

std::string mib(double bytes) { return format_fixed(bytes / double(1 << 20), 1) + " MiB"; }

}  // namespace

const CommandSpec& serve_llm_command_spec() {
  static const CommandSpec spec{
      "grove",
      "serve",
      "MODEL_DIR",
      "serve a LLaMA or GPT-2 checkpoint directory (generate, completions)",
      "Loads MODEL_DIR/config.json and MODEL_DIR/model.safetensors (or the shards of its\n"
      "model.safetensors.index.json), records the prefill and\n"
      "decode graphs of every bucket, and answers HTTP on --host:--port with continuous\n"
      "batching: POST /v2/models/NAME/generate and /generate_stream (KServe v2, server-sent\n"
      "events), POST /v1/completions (OpenAI), GET /v1/models, /v2/models/NAME, the health\n"
      "routes and /metrics. Text in and out needs a SentencePiece tokenizer: --tokenizer FILE,\n"
      "else MODEL_DIR/tokenizer.model when it exists; token ids work without one.\n"
      "SIGTERM or SIGINT answers every request already read, then exits 0.",
      with_decoder_flags({
          {"--model-name", "NAME", "the served model's name (default: MODEL_DIR's last part)"},
          {"--max-tokens-limit", "N", "the most max_tokens a request may ask (default T)"},
          {"--max-waiting", "N", "completions that may wait for a slot before 503 (1024)"},
          {"--decode-loop-steps", "K",
           "decode steps per device launch (a WHILE graph) while no request joins or leaves; "
           "0: one step at a time (default 8)"},
          {"--prefills-per-step", "P",
           "new requests prefilled before each decode step, bounding the stall running streams "
           "see; 0: all that free slots take (default 0)"},
          {"--prefill-chunk", "C",
           "prompt tokens per prefill call: longer prompts are prefilled in chunks, one call "
           "counting against --prefills-per-step; 0: whole prompts (default 0)"},
          {"--seed", "S", "seeds of requests that name none start at S (default: random)"},
          {"--port", "N", "TCP port (default 8000; 0 picks a free one and prints it)"},
          {"--host", "ADDR", "address to listen on (default 127.0.0.1)"},
          {"--max-body-bytes", "N", "larger request bodies get 413 (default 16777216)"},
          {"--max-header-bytes", "N", "larger request headers get 431 (default 16384)"},
          {"--max-header-fields", "N", "more header fields get 431 (default 64)"},
          {"--idle-timeout-ms", "MS", "an idle keep-alive connection is closed (default 5000)"},
          {"--header-timeout-ms", "MS", "a slower request header gets 408 (default 10000)"},
          {"--body-timeout-ms", "MS", "a slower request body gets 408 (default 30000)"},
          {"--max-connections", "N", "more open connections get 503 (default 32768)"},
          {"--http-threads", "N", "threads that read and answer HTTP (default: the cores)"},
      })};
  return spec;
}

int serve_llm_command(const std::vector<std::string>& args) {
  ParsedFlags parsed = parse_flags(serve_llm_command_spec(), args);
  if (parsed.help_requested()) {
    std::fputs(help_text(serve_llm_command_spec()).c_str(), stdout);
    return 0;
  }
  if (parsed.positional().size() != 1) {
    throw UsageError("serve: expected one MODEL_DIR (grove serve MODEL_DIR [options])");
  }
  const std::string model_dir = parsed.positional()[0];
  serving::llm::DecoderOptions options = parse_decoder_options(parsed);
  if (options.device->is_cpu()) throw UsageError("--device cpu cannot serve; use cuda or sim");
  serving::llm::LlmServiceConfig service_config;
  service_config.max_new_tokens = parsed.integer("--max-tokens-limit", 0, 1, 1 << 20);
  service_config.max_waiting =
      static_cast<size_t>(parsed.integer("--max-waiting", 1024, 1, 1 << 20));
  service_config.decode_loop_steps = parsed.integer("--decode-loop-steps", 8, 0, 4096);
  service_config.max_prefills_per_step = parsed.integer("--prefills-per-step", 0, 0, 1 << 20);
  service_config.prefill_chunk = parsed.integer("--prefill-chunk", 0, 0, 1 << 20);
  options.chunked_prefill = service_config.prefill_chunk > 0;  // Note [Chunked prefill]
  const uint64_t seed = parsed.has("--seed")
                            ? static_cast<uint64_t>(parsed.integer("--seed", 0, 0))
                            : (uint64_t{std::random_device{}()} << 32) | std::random_device{}();
  serving::HttpConfig http_config = parse_http_flags(parsed);
  std::string name = parsed.value("--model-name");
  if (name.empty()) {
    name = std::filesystem::path(model_dir).lexically_normal().filename().string();
    if (name.empty() || name == ".") {
      name = std::filesystem::path(model_dir).lexically_normal().parent_path().filename().string();
    }
    if (name.empty() || name == "." || name == "..") name = "model";
  }
  http_config.model_name = name;

  block_stop_signals();
  std::optional<SignalWatcher> watcher;
  watcher.emplace();  // Note [Signals during start-up]

  std::unique_ptr<serving::llm::Tokenizer> tokenizer;
  if (std::optional<std::string> path = tokenizer_path(parsed, model_dir)) {
    tokenizer = serving::llm::Tokenizer::load(*path);
  }

  auto decoder = serving::llm::Decoder::load(model_dir, options);
  decoder->warm_up();
  const serving::llm::DecoderConfig& config = decoder->config();
  std::printf(
      "grove serve %s: %s %s on %s, backend %s, decode buckets %s, prompt buckets %s, %lld "
      "positions\n",
      printable(model_dir).c_str(), serving::llm::architecture_name(config.architecture),
      runtime::dtype_name(config.dtype), decoder->state().device().str().c_str(),
      decoder->backend_name().c_str(), joined(decoder->batch_buckets()).c_str(),
      joined(decoder->prompt_buckets()).c_str(),
      static_cast<long long>(decoder->state().cache().max_seq_len));
  std::printf("weights %s, KV cache %s", mib(double(decoder->state().weight_bytes())).c_str(),
              mib(double(decoder->state().cache_bytes())).c_str());
  const compiler::backends::BackendMemory memory = decoder->backend_memory();
  if (memory.device) {
    std::printf(", graph pool %s reserved", mib(double(memory.pool.reserved_bytes)).c_str());
  }
  std::printf("\n");
  if (tokenizer) {
    std::printf("tokenizer %s: %lld pieces (text in and out)\n",
                printable(tokenizer->path()).c_str(),
                static_cast<long long>(tokenizer->vocab_size()));
  } else {
    std::printf(
        "tokenizer: none (token ids only; put tokenizer.model in MODEL_DIR or pass "
        "--tokenizer)\n");
  }
  std::fflush(stdout);

  serving::llm::LlmService service(*decoder, tokenizer.get(), service_config);
  serving::llm::LlmRoutes routes(service, name, seed);
  serving::HttpServer http(routes, http_config);
  std::printf(
      "listening on http://%s:%d (POST /v2/models/%s/generate, /generate_stream, "
      "/v1/completions, GET /metrics)\n",
      http_config.host.c_str(), http.port(), printable(name).c_str());
  std::fflush(stdout);
  watcher->serving([&http] { http.stop(); });
  serving::HttpServeReport served;
  try {
    served = http.serve();
  } catch (...) {
    watcher.reset();
    service.shutdown();  // its last events post into `http`'s loop: before it is gone
    throw;
  }
  watcher.reset();
  service.shutdown();
  const serving::llm::LlmStats end = service.stats();
  auto ended = [&](const char* key) {
    auto found = end.ended.find(key);
    return static_cast<long long>(found == end.ended.end() ? 0 : found->second);
  };
  std::printf(
      "http: %llu responses written (%llu after the signal), %llu connections closed by a "
      "deadline\n",
      static_cast<unsigned long long>(served.responses),
      static_cast<unsigned long long>(served.responses_after_stop),
      static_cast<unsigned long long>(served.timed_out));
  std::printf(
      "stopped: completions ended by eos %lld, length %lld, stop %lld, cancelled %lld, failed "
      "%lld; %lld tokens generated in %lld decode steps\n",
      ended("eos"), ended("length"), ended("stop"), ended("cancelled"), ended("failed"),
      static_cast<long long>(end.generated_tokens), static_cast<long long>(end.decode_steps));
  return 0;
}

}  // namespace grove::cli
