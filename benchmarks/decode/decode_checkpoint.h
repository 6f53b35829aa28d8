// The decode benchmark's models: a LLaMA-1B-class and a small LLaMA config,
// written as a Hugging Face checkpoint directory (config.json and
// model.safetensors, bf16 or f32, seeded random weights) so that grove and
// benchmarks/decode/compare_hf.py load the same files.
#pragma once

#include <string>

#include "serving/llm/decoder_config.h"

namespace grove::benchmarks {

// "1b": hidden 2048, 16 layers, 32 heads, 8 kv heads, intermediate 8192,
// vocab 32000; "small": hidden 256, 4 layers, 4 heads, 2 kv heads,
// intermediate 1024, vocab 32000. Throws for another name.
serving::llm::DecoderConfig decode_benchmark_config(const std::string& name, runtime::DType dtype,
                                                    int64_t max_position_embeddings);

// Writes config.json and model.safetensors of `config` into `dir` (created),
// weights uniform in [-0.02, 0.02) from `seed` and norm weights 1, unless the
// directory already holds a checkpoint with the same config.json. Returns
// whether it wrote.
bool write_decode_checkpoint(const std::string& dir, const serving::llm::DecoderConfig& config,
                             uint64_t seed);

}  // namespace grove::benchmarks
