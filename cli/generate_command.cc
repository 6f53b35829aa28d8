// `grove generate MODEL_DIR --prompt-ids 1,2,3 --max-tokens N`: greedy or
// sampled generation from a Hugging Face LLaMA or GPT-2 checkpoint directory
// (config.json, model.safetensors or its shards) through serving/llm's Decoder; prints the
// generated token ids, one line per prompt (the text where --tokenizer FILE
// names a tokenizer). `--prompt TEXT` instead encodes the text with the
// directory's SentencePiece tokenizer (tokenizer.model, or --tokenizer FILE)
// and prints the generated text.
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cli/commands.h"
#include "cli/decoder_options.h"
#include "cli/terminal_text.h"
#include "compiler/backends/backend_stats_json.h"
#include "runtime/error.h"
#include "serving/llm/generator.h"
#include "serving/llm/text_stream.h"
#include "serving/llm/tokenizer.h"
#include "weights/safetensors.h"

namespace grove::cli {

namespace {

std::vector<int64_t> parse_ids(const std::string& flag, const std::string& text) {
  std::vector<int64_t> ids;
  std::stringstream stream(text);
  std::string item;
  while (std::getline(stream, item, ',')) {
    try {
      size_t used = 0;
      long long value = std::stoll(item, &used);
      if (used != item.size() || value < 0) throw std::invalid_argument(item);
      ids.push_back(value);
    } catch (const std::exception&) {
      throw UsageError(str_cat(flag, " expects token ids like 1,2,3; found '", item, "'"));
    }
  }
  if (ids.empty()) throw UsageError(str_cat(flag, " needs at least one token id"));
  return ids;
}

std::string join(const std::vector<int64_t>& ids) {
  std::string text;
  for (size_t i = 0; i < ids.size(); ++i) text += str_cat(i ? "," : "", ids[i]);
  return text;
}

}  // namespace

const CommandSpec& generate_command_spec() {
  static const CommandSpec spec{
      "grove",
      "generate",
      "MODEL_DIR",
      "generate token ids from a LLaMA or GPT-2 checkpoint directory",
      "Loads MODEL_DIR/config.json and MODEL_DIR/model.safetensors, or the shards of\n"
      "model.safetensors.index.json (Hugging Face layout and names, as transformers 4 or 5\n"
      "saves them), records the prefill and decode graphs of every bucket, and generates from\n"
      "each prompt of --prompt-ids (several prompts, 1,2;3,4, are batched continuously).\n"
      "Prints each prompt's generated ids as one comma-separated line (its text with\n"
      "--tokenizer).",
      with_decoder_flags({
          {"--prompt-ids", "IDS", "comma-separated token ids; ';' separates several prompts"},
          {"--prompt", "TEXT", "a text prompt (needs a tokenizer); prints the generated text"},
          {"--max-tokens", "N", "tokens to generate per prompt (default 16)"},
          {"--temperature", "X", "0 (default) is greedy"},
          {"--top-k", "K", "sample among the K most likely tokens (default all)"},
          {"--top-p", "P", "sample within probability mass P (default 1)"},
          {"--seed", "S", "sampling seed (default 0; request i uses S + i)"},
          {"--ignore-eos", "", "do not stop at the model's eos_token_id"},
          {"--logits-out", "FILE", "write every step's f32 logits of prompt 0 (safetensors)"},
          {"--stats", "", "print the decoder's and the graph tree's stats (JSON) to stderr"},
      })};
  return spec;
}

int generate_command(const std::vector<std::string>& args) {
  ParsedFlags parsed = parse_flags(generate_command_spec(), args);
  if (parsed.help_requested()) {
    std::fputs(help_text(generate_command_spec()).c_str(), stdout);
    return 0;
  }
  if (parsed.positional().size() != 1) {
    throw UsageError("generate: expected MODEL_DIR (grove generate MODEL_DIR --prompt-ids 1,2,3)");
  }
  if (parsed.has("--prompt-ids") == parsed.has("--prompt")) {
    throw UsageError("generate: give --prompt-ids or --prompt (text), one of them");
  }
  const std::string model_dir = parsed.positional()[0];
  std::vector<std::vector<int64_t>> prompts;
  std::unique_ptr<serving::llm::Tokenizer> tokenizer;
  if (parsed.has("--prompt")) {
    std::optional<std::string> path = tokenizer_path(parsed, model_dir);
    if (!path) {
      throw UsageError(str_cat("generate: --prompt needs a tokenizer: ", model_dir,
                               "/tokenizer.model is not there; pass --tokenizer FILE"));
    }
    tokenizer = serving::llm::Tokenizer::load(*path);
    std::vector<int64_t> ids;
    if (tokenizer->bos_id()) ids.push_back(*tokenizer->bos_id());
    for (int64_t id : tokenizer->encode(parsed.value("--prompt"))) ids.push_back(id);
    prompts.push_back(std::move(ids));
  } else {
    // Ids in; text out only where a tokenizer is named (a named file that
    // cannot be loaded is an error, never passed over).
    if (parsed.has("--tokenizer")) {
      tokenizer = serving::llm::Tokenizer::load(parsed.value("--tokenizer"));
    }
    std::stringstream prompt_list(parsed.value("--prompt-ids"));
    for (std::string prompt; std::getline(prompt_list, prompt, ';');) {
      prompts.push_back(parse_ids("--prompt-ids", prompt));
    }
  }
  serving::llm::DecoderOptions options = parse_decoder_options(parsed);
  const int64_t max_tokens = parsed.integer("--max-tokens", 16, 1, 1 << 20);
  serving::llm::SamplingParams sampling;
  sampling.temperature = parsed.finite_number("--temperature", 0);
  sampling.top_k = parsed.integer("--top-k", 0, 0);
  sampling.top_p = parsed.finite_number("--top-p", 1);
  const auto seed = static_cast<uint64_t>(parsed.integer("--seed", 0, 0));

  auto decoder = serving::llm::Decoder::load(model_dir, options);
  decoder->warm_up();
  serving::llm::Generator generator(*decoder);
  std::vector<serving::llm::RequestId> ids;
  for (size_t i = 0; i < prompts.size(); ++i) {
    serving::llm::GenerationRequest request;
    request.prompt = prompts[i];
    request.max_new_tokens = max_tokens;
    request.ignore_eos = parsed.has("--ignore-eos");
    request.sampling = sampling;
    request.sampling.seed = seed + i;
    ids.push_back(generator.submit(std::move(request)));
  }
  // --logits-out: prompt 0 runs alone first, recording its logits at every step.
  std::vector<float> logits;
  if (parsed.has("--logits-out")) {
    serving::llm::GenerationRequest request;
    request.prompt = prompts[0];
    request.max_new_tokens = max_tokens;
    request.ignore_eos = true;
    int64_t position = static_cast<int64_t>(request.prompt.size());
    std::vector<float> row = decoder->prefill(0, request.prompt);
    for (int64_t step = 0; step < max_tokens; ++step) {
      logits.insert(logits.end(), row.begin(), row.end());
      if (step + 1 == max_tokens) break;
      int64_t token = serving::llm::sample_token(row, {}, 0);
      row = decoder->decode({{.slot = 0, .token = token, .position = position++}})[0];
    }
    std::vector<uint8_t> bytes(logits.size() * sizeof(float));
    std::memcpy(bytes.data(), logits.data(), bytes.size());
    weights::write_safetensors(parsed.value("--logits-out"),
                               {{.name = "logits",
                                 .dtype = runtime::DType::kF32,
                                 .shape = {max_tokens, decoder->config().vocab_size},
                                 .bytes = std::move(bytes)}},
                               {{"producer", "grove generate"}});
  }
  while (!generator.idle()) generator.step();
  for (size_t i = 0; i < ids.size(); ++i) {
    const std::vector<int64_t>& tokens = generator.result(ids[i]).tokens;
    if (!tokenizer) {
      std::printf("%s\n", join(tokens).c_str());
      continue;
    }
    // The text as a server would send it (Note [Stop strings over detokenized text]).
    const size_t tail = std::min(prompts[i].size(), serving::llm::TextStream::kPromptTail);
    serving::llm::TextStream text(
        [&](std::span<const int64_t> span) { return tokenizer->decode(span); },
        std::vector<int64_t>(prompts[i].end() - static_cast<ptrdiff_t>(tail), prompts[i].end()),
        {});
    for (int64_t token : tokens) text.add(token);
    text.finish();
    std::printf("%s\n", text.released().c_str());
  }
  if (parsed.has("--stats")) {
    nlohmann::json stats{
        {"weights_bytes", decoder->state().weight_bytes()},
        {"cache_bytes", decoder->state().cache_bytes()},
        {"batch_buckets", decoder->batch_buckets()},
        {"prompt_buckets", decoder->prompt_buckets()},
        {"max_seq_len", decoder->state().cache().max_seq_len},
        {"backend", compiler::backends::stats_json(decoder->backend_stats())},
        {"backend_memory", compiler::backends::memory_json(decoder->backend_memory())}};
    stats["decode_steps"] = generator.stats().decode_steps;
    stats["prefills"] = generator.stats().prefills;
    std::fprintf(stderr, "%s\n", stats.dump().c_str());
  }
  return 0;
}

}  // namespace grove::cli
