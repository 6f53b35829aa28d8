// The decoder flags `grove generate` and `grove serve MODEL_DIR` share, worded
// and parsed once: the device, the execution backend, the cache positions,
// the batch and prompt buckets, and the tokenizer.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "cli/common/flags.h"
#include "serving/llm/decoder.h"

namespace grove::cli {

// `flags` followed by the decoder's flags, for a command's table.
std::vector<FlagSpec> with_decoder_flags(std::vector<FlagSpec> flags);
// DecoderOptions from --device, --backend, --max-seq-len, --batch-buckets,
// --prompt-buckets and --dtype; UsageError naming a malformed one.
serving::llm::DecoderOptions parse_decoder_options(const ParsedFlags& parsed);
// --tokenizer, else MODEL_DIR/tokenizer.model when it exists.
std::optional<std::string> tokenizer_path(const ParsedFlags& parsed, const std::string& model_dir);

}  // namespace grove::cli
