// The safetensors files of a Hugging Face model directory: model.safetensors,
// or the shards model.safetensors.index.json names.
//
//   std::vector<SafetensorsFile> files = open_checkpoint_files("models/llama-8b");
//   load_checkpoint(state, files);  // decoder_state.h
//
// Note [Sharded checkpoints]
// save_pretrained splits a checkpoint above its max_shard_size into
// model-0000N-of-0000M.safetensors files and writes
// model.safetensors.index.json, whose "weight_map" names the file of each
// tensor; a model directory of any LLaMA above a few billion parameters is
// laid out so. grove read only model.safetensors and refused such a
// directory. Now, where model.safetensors is absent, the index is read: each
// shard it names is opened once (a name with a directory part, "..", or no
// ".safetensors" ending is refused: the index may not reach outside the
// directory), every tensor of the weight map must be in the shard it names,
// and every tensor of a shard must be in the weight map, so a stale index or
// a stray shard is an error, not a silent mix. load_checkpoint then finds
// each weight in whichever file holds it, a tensor held by two files being
// refused. Tests: CheckpointFiles.* and Checkpoint.ATensorInTwoFilesIsRefused
// (tests/serving/llm/checkpoint_test.cc),
// gpu_transformers_test.py's sharded save_pretrained case against transformers.
#pragma once

#include <string>
#include <vector>

#include "weights/safetensors.h"

namespace grove::serving::llm {

// Opens the directory's weights files; WeightsFormatError naming the file and
// the tensor where the directory holds neither layout or an inconsistent one.
std::vector<weights::SafetensorsFile> open_checkpoint_files(const std::string& model_dir);

}  // namespace grove::serving::llm
