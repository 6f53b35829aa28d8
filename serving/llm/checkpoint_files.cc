#include "serving/llm/checkpoint_files.h"

#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "runtime/error.h"

namespace grove::serving::llm {

namespace {

using nlohmann::json;
using weights::SafetensorsFile;
using weights::WeightsFormatError;

constexpr const char* kSingleFile = "model.safetensors";
constexpr const char* kIndexFile = "model.safetensors.index.json";

// A shard's name as the index gives it: a plain file name in the directory.
void check_shard_name(const std::string& name, const std::string& index_path) {
  const bool plain = !name.empty() && name.find('/') == std::string::npos &&
                     name.find('\\') == std::string::npos && name != "." && name != ".." &&
                     name.ends_with(".safetensors");
  GROVE_CHECK_AS(WeightsFormatError, plain, index_path, ": weight_map names file \"", name,
                 "\"; a shard is a .safetensors file in the model directory itself");
}

// Note [Sharded checkpoints]
std::vector<SafetensorsFile> open_shards(const std::string& model_dir) {
  const std::string index_path = model_dir + "/" + kIndexFile;
  std::ifstream in(index_path);
  GROVE_CHECK_AS(WeightsFormatError, in.good(), "cannot read ", index_path);
  std::stringstream text;
  text << in.rdbuf();
  json index;
  try {
    index = json::parse(text.str());
  } catch (const json::exception& error) {
    throw WeightsFormatError(str_cat(index_path, ": not valid JSON: ", error.what()));
  }
  GROVE_CHECK_AS(
      WeightsFormatError,
      index.is_object() && index.contains("weight_map") && index["weight_map"].is_object(),
      index_path, ": must hold a \"weight_map\" object of tensor name to file name");
  std::map<std::string, std::set<std::string>> tensors_of;  // shard -> tensors the index gives it
  for (const auto& [tensor, shard] : index["weight_map"].items()) {
    GROVE_CHECK_AS(WeightsFormatError, shard.is_string(), index_path, ": weight_map's \"", tensor,
                   "\" must name a file, found ", shard.dump());
    check_shard_name(shard.get<std::string>(), index_path);
    tensors_of[shard.get<std::string>()].insert(tensor);
  }
  GROVE_CHECK_AS(WeightsFormatError, !tensors_of.empty(), index_path,
                 ": weight_map names no tensor");
  std::vector<SafetensorsFile> files;
  for (const auto& [shard, tensors] : tensors_of) {
    SafetensorsFile file = SafetensorsFile::open(model_dir + "/" + shard);
    for (const std::string& tensor : tensors) {
      GROVE_CHECK_AS(WeightsFormatError, file.find(tensor) != nullptr, index_path,
                     ": weight_map puts tensor '", tensor, "' in ", shard,
                     ", which does not hold it; the index and the shards disagree");
    }
    for (const weights::SafetensorsEntry& entry : file.entries()) {
      GROVE_CHECK_AS(WeightsFormatError, tensors.count(entry.name) != 0, file.path(),
                     ": holds tensor '", entry.name, "' that ", kIndexFile,
                     " does not put there; the index and the shards disagree");
    }
    files.push_back(std::move(file));
  }
  return files;
}

}  // namespace

std::vector<SafetensorsFile> open_checkpoint_files(const std::string& model_dir) {
  const std::string single = model_dir + "/" + kSingleFile;
  std::error_code error;
  if (std::filesystem::exists(single, error)) {
    std::vector<SafetensorsFile> files;
    files.push_back(SafetensorsFile::open(single));
    return files;
  }
  GROVE_CHECK_AS(WeightsFormatError, std::filesystem::exists(model_dir + "/" + kIndexFile, error),
                 model_dir, " holds neither ", kSingleFile, " nor ", kIndexFile,
                 " (a sharded checkpoint's index); a model directory holds config.json and its "
                 "weights in Hugging Face's layout");
  return open_shards(model_dir);
}

}  // namespace grove::serving::llm
