#include "cli/decoder_options.h"

#include "cli/arguments.h"
#include "serving/llm/tokenizer.h"

namespace grove::cli {
namespace {

std::vector<int64_t> sizes(const ParsedFlags& parsed, const std::string& flag) {
  std::vector<int64_t> out;
  for (const std::string& item : parsed.list(flag, {})) {
    out.push_back(parse_positive_int(flag, item, 1 << 20));
  }
  return out;
}

}  // namespace

std::vector<FlagSpec> with_decoder_flags(std::vector<FlagSpec> flags) {
  flags.insert(
      flags.end(),
      {
          {"--tokenizer", "FILE", "SentencePiece model (default MODEL_DIR/tokenizer.model)"},
          {"--device", "DEVICE", "auto (default), cuda or sim"},
          {"--backend", "NAME", "cudagraphs (default) or eager"},
          {"--max-seq-len", "T", "cache positions per request (default min(model, 256))"},
          {"--batch-buckets", "SIZES", "decode batch buckets; the largest is the slots (1,2,4,8)"},
          {"--prompt-buckets", "SIZES", "prompt-length buckets (default powers of two from 8)"},
          {"--dtype", "NAME", "float32 or bfloat16 (default: the checkpoint's config.json)"},
      });
  return flags;
}

serving::llm::DecoderOptions parse_decoder_options(const ParsedFlags& parsed) {
  serving::llm::DecoderOptions options;
  options.device = parse_device_choice(parsed.value("--device", "auto"));
  options.backend = parsed.value("--backend", "cudagraphs");
  options.max_seq_len = parsed.integer("--max-seq-len", 0, 1, 1 << 20);
  if (parsed.has("--batch-buckets")) options.batch_buckets = sizes(parsed, "--batch-buckets");
  if (parsed.has("--prompt-buckets")) options.prompt_buckets = sizes(parsed, "--prompt-buckets");
  if (parsed.has("--dtype")) {
    const std::string dtype = parsed.value("--dtype");
    if (dtype == "float32") {
      options.dtype = runtime::DType::kF32;
    } else if (dtype == "bfloat16") {
      options.dtype = runtime::DType::kBF16;
    } else {
      throw UsageError(str_cat("--dtype must be float32 or bfloat16, not '", dtype, "'"));
    }
  }
  return options;
}

std::optional<std::string> tokenizer_path(const ParsedFlags& parsed, const std::string& model_dir) {
  if (parsed.has("--tokenizer")) return parsed.value("--tokenizer");
  return serving::llm::find_tokenizer(model_dir);
}

}  // namespace grove::cli
