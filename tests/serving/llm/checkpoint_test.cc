// config.json parsing and Hugging Face checkpoints into a DecoderState: the
// names, the shapes, dtype conversion, GPT-2's prefix-less names, and refusals
// that name the tensor or key (serving/llm/decoder_config.h, decoder_state.h).
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>

#include "runtime/device.h"
#include "serving/llm/checkpoint_files.h"
#include "serving/llm/decoder_state.h"
#include "tests/serving/llm/llm_test_util.h"
#include "weights/safetensors.h"

namespace grove::serving::llm {
namespace {

using runtime::DType;
using weights::SafetensorsFile;
using weights::TensorToWrite;

constexpr const char* kLlamaJson = R"({
  "model_type": "llama", "vocab_size": 97, "hidden_size": 32, "intermediate_size": 48,
  "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
  "max_position_embeddings": 64, "rms_norm_eps": 1e-6, "torch_dtype": "bfloat16",
  "eos_token_id": 2, "hidden_act": "silu", "rope_scaling": null})";

// The state's weights as a checkpoint: names mapped by `rename`, dtype `dtype`.
std::vector<TensorToWrite> checkpoint_of(const DecoderState& state, DType dtype,
                                         const std::string& strip_prefix = "") {
  std::vector<TensorToWrite> tensors;
  for (const std::string& name : state.weight_names()) {
    const runtime::Tensor& tensor = state.tensor(name);
    TensorToWrite out;
    out.name = name.starts_with(strip_prefix) ? name.substr(strip_prefix.size()) : name;
    out.dtype = dtype;
    out.shape.assign(tensor.shape().begin(), tensor.shape().end());
    std::vector<double> values = tensor.to_doubles();
    out.bytes.resize(values.size() * runtime::dtype_size(dtype));
    for (size_t i = 0; i < values.size(); ++i) {
      runtime::store_element(out.bytes.data() + i * runtime::dtype_size(dtype), dtype, values[i]);
    }
    tensors.push_back(std::move(out));
  }
  return tensors;
}

SafetensorsFile file_of(const std::vector<TensorToWrite>& tensors) {
  return SafetensorsFile::from_bytes(weights::encode_safetensors(tensors), "test");
}

CacheShape small_cache() { return {.slots = 2, .max_seq_len = 16}; }

TEST(DecoderConfig, ParsesLlamaConfigJson) {
  DecoderConfig config = DecoderConfig::parse(kLlamaJson, "config.json");
  EXPECT_EQ(config.architecture, Architecture::kLlama);
  EXPECT_EQ(config.head_dim(), 8);
  EXPECT_EQ(config.query_groups(), 2);
  EXPECT_EQ(config.dtype, DType::kBF16);
  EXPECT_EQ(config.eos_token_ids, std::vector<int64_t>{2});
  EXPECT_FALSE(config.tie_word_embeddings);
}

TEST(DecoderConfig, RefusesWhatItDoesNotImplementByName) {
  auto message = [](const std::string& json) {
    try {
      DecoderConfig::parse(json, "config.json");
    } catch (const Error& error) {
      return std::string(error.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message(R"({"model_type": "gemma"})").find("\"gemma\""), std::string::npos);
  EXPECT_NE(message(R"({"model_type": "llama", "vocab_size": 10})").find("hidden_size"),
            std::string::npos);
  std::string scaled = kLlamaJson;
  scaled.replace(scaled.find("\"rope_scaling\": null"), 20,
                 "\"rope_scaling\": {\"rope_type\": \"yarn\", \"factor\": 2}");
  EXPECT_NE(message(scaled).find("rope_scaling"), std::string::npos);
  std::string many_eos = kLlamaJson;
  many_eos.replace(many_eos.find("\"eos_token_id\": 2"), 17,
                   "\"eos_token_id\": [1, 2, 3, 4, 5, 6, 7, 8, 9]");
  EXPECT_NE(message(many_eos).find("eos_token_id"), std::string::npos);
}

// Note [Every EOS token stops a row]: config.json's list, and
// generation_config.json's where the directory has one.
TEST(DecoderConfig, EosTokensAreAllKeptFromEitherFile) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("grove_eos_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::string listed = kLlamaJson;
  listed.replace(listed.find("\"eos_token_id\": 2"), 17, "\"eos_token_id\": [2, 9, 4]");
  std::ofstream(dir / "config.json") << listed;
  EXPECT_EQ(DecoderConfig::load(dir.string()).eos_token_ids, (std::vector<int64_t>{2, 9, 4}));
  std::ofstream(dir / "generation_config.json")
      << R"({"eos_token_id": [7, 8], "do_sample": false})";
  EXPECT_EQ(DecoderConfig::load(dir.string()).eos_token_ids, (std::vector<int64_t>{7, 8}));
  std::ofstream(dir / "generation_config.json") << R"({"eos_token_id": 5})";
  EXPECT_EQ(DecoderConfig::load(dir.string()).eos_token_ids, (std::vector<int64_t>{5}));
  // A generation config that names none leaves config.json's.
  std::ofstream(dir / "generation_config.json") << R"({"max_new_tokens": 5})";
  EXPECT_EQ(DecoderConfig::load(dir.string()).eos_token_ids, (std::vector<int64_t>{2, 9, 4}));
  std::ofstream(dir / "generation_config.json") << R"({"eos_token_id": "two"})";
  EXPECT_THROW(DecoderConfig::load(dir.string()), Error);
  std::ofstream(dir / "generation_config.json") << "{not json";
  EXPECT_THROW(DecoderConfig::load(dir.string()), Error);
  std::filesystem::remove_all(dir);
}

// Note [LLaMA's family]
TEST(DecoderConfig, TheFamilyIsReadFromConfigJson) {
  auto as = [](const std::string& model_type, const std::string& extra) {
    std::string json = kLlamaJson;
    json.replace(json.find("\"llama\""), 7, "\"" + model_type + "\"");
    json.replace(json.find("\"rope_scaling\": null"), 20, extra.empty() ? "\"x\": 0" : extra);
    return DecoderConfig::parse(json, "config.json");
  };
  const DecoderConfig mistral = as("mistral", "");
  EXPECT_EQ(mistral.architecture, Architecture::kLlama);
  EXPECT_FALSE(mistral.sliding_window.has_value());
  EXPECT_FALSE(mistral.qkv_bias || mistral.qk_norm);
  const DecoderConfig windowed = as("mistral", "\"sliding_window\": 16");
  EXPECT_EQ(windowed.sliding_window, 16);
  EXPECT_NO_THROW(DecoderState(windowed, {.slots = 1, .max_seq_len = 16}, runtime::kSimDevice));
  try {
    DecoderState(windowed, {.slots = 1, .max_seq_len = 17}, runtime::kSimDevice);
    ADD_FAILURE() << "no error";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("sliding_window"), std::string::npos);
  }
  // Qwen2: biases on q, k, v; its window only where use_sliding_window says so.
  const DecoderConfig qwen2 =
      as("qwen2", "\"sliding_window\": 8, \"use_sliding_window\": false, \"attention_bias\": true");
  EXPECT_TRUE(qwen2.qkv_bias);
  EXPECT_FALSE(qwen2.sliding_window.has_value());
  EXPECT_EQ(as("qwen2", "\"sliding_window\": 8, \"use_sliding_window\": true").sliding_window, 8);
  EXPECT_EQ(as("qwen2",
               "\"sliding_window\": 8, \"layer_types\": [\"full_attention\", "
               "\"sliding_attention\"]")
                .sliding_window,
            8);
  EXPECT_THROW(as("qwen2", "\"layer_types\": [\"linear_attention\"]"), Error);
  const DecoderConfig qwen3 = as("qwen3", "\"head_dim\": 16");
  EXPECT_TRUE(qwen3.qk_norm);
  EXPECT_FALSE(qwen3.qkv_bias);
  EXPECT_EQ(qwen3.head_dim(), 16);
  EXPECT_EQ(as("qwen3", "").head_dim(), 128);  // Qwen3Config's default where the file has none
  // Qwen3's attention_bias also biases o_proj, and nobody's MLP has a bias here.
  EXPECT_THROW(as("qwen3", "\"attention_bias\": true"), Error);
  EXPECT_THROW(as("llama", "\"attention_bias\": true"), Error);
  EXPECT_THROW(as("qwen2", "\"mlp_bias\": true"), Error);
  // The checkpoint names Qwen2's biases and Qwen3's norms.
  std::vector<std::string> names;
  for (const auto& [name, shape] : checkpoint_weights(qwen2)) names.push_back(name);
  EXPECT_NE(std::find(names.begin(), names.end(), "model.layers.1.self_attn.k_proj.bias"),
            names.end());
  names.clear();
  for (const auto& [name, shape] : checkpoint_weights(qwen3)) {
    names.push_back(name);
    if (name == "model.layers.0.self_attn.q_norm.weight") EXPECT_EQ(shape, runtime::Shape{16});
  }
  EXPECT_NE(std::find(names.begin(), names.end(), "model.layers.0.self_attn.q_norm.weight"),
            names.end());
}

TEST(Checkpoint, LoadsConvertingF32IntoABf16Model) {
  DecoderConfig config = testing::tiny_config(Architecture::kLlama, DType::kBF16);
  DecoderState source(config, small_cache(), runtime::kSimDevice);
  testing::fill_random_weights(source, 5);
  DecoderState target(config, small_cache(), runtime::kSimDevice);
  load_checkpoint(target, file_of(checkpoint_of(source, DType::kF32)));
  for (const std::string& name : source.weight_names()) {
    EXPECT_EQ(target.tensor(name).to_doubles(), source.tensor(name).to_doubles()) << name;
  }
}

// Note [Fused projection weights]: the checkpoint's q, k, v, gate and up
// tensors load into rows of the fused weights the programs read.
TEST(DecoderState, FusedProjectionsAreViewsOfTheCheckpointWeights) {
  DecoderConfig config = testing::tiny_config(Architecture::kLlama, DType::kF32);
  DecoderState source(config, small_cache(), runtime::kSimDevice);
  testing::fill_random_weights(source, 8);
  DecoderState target(config, small_cache(), runtime::kSimDevice);
  load_checkpoint(target, file_of(checkpoint_of(source, DType::kF32)));
  auto rows_of = [&](const std::vector<std::string>& names) {
    std::vector<double> values;
    for (const std::string& name : names) {
      std::vector<double> part = source.tensor(name).to_doubles();
      values.insert(values.end(), part.begin(), part.end());
    }
    return values;
  };
  for (int64_t layer = 0; layer < config.num_layers; ++layer) {
    const std::string prefix = str_cat("model.layers.", layer, ".");
    EXPECT_EQ(target.tensor(qkv_weight_name(layer)).to_doubles(),
              rows_of({prefix + "self_attn.q_proj.weight", prefix + "self_attn.k_proj.weight",
                       prefix + "self_attn.v_proj.weight"}));
    EXPECT_EQ(target.tensor(gate_up_weight_name(layer)).to_doubles(),
              rows_of({prefix + "mlp.gate_proj.weight", prefix + "mlp.up_proj.weight"}));
  }
  // The fused tensors are not extra weights: the bytes are the checkpoint's.
  uint64_t checkpoint_bytes = 0;
  for (const std::string& name : target.weight_names()) {
    EXPECT_FALSE(is_grove_state_name(name)) << name;
    checkpoint_bytes += target.tensor(name).nbytes();
  }
  EXPECT_EQ(target.weight_bytes(), checkpoint_bytes);
  // checkpoint_weights (what benchmark checkpoints are written from) names the same tensors.
  std::vector<std::string> names;
  for (const auto& [name, shape] : checkpoint_weights(config)) {
    names.push_back(name);
    EXPECT_EQ(shape, target.tensor(name).shape()) << name;
  }
  EXPECT_EQ(names, target.weight_names());
}

// Note [Rotate-half as a GEMM]: x R^T is [-x2, x1] for every head dimension.
TEST(DecoderState, RopeRotationIsRotateHalf) {
  DecoderConfig config = testing::tiny_config(Architecture::kLlama, DType::kBF16);
  DecoderState state(config, small_cache(), runtime::kSimDevice);
  const int64_t d = config.head_dim();
  const runtime::Tensor& rotation = state.tensor(kRopeRotation);
  ASSERT_EQ(rotation.shape(), (runtime::Shape{d, d}));
  std::vector<double> r = rotation.to_doubles();
  std::vector<double> x(static_cast<size_t>(d));
  for (int64_t i = 0; i < d; ++i) x[static_cast<size_t>(i)] = 1.0 + static_cast<double>(i);
  for (int64_t j = 0; j < d; ++j) {
    double sum = 0;
    for (int64_t i = 0; i < d; ++i)
      sum += x[static_cast<size_t>(i)] * r[static_cast<size_t>(j * d + i)];
    const double expected =
        j < d / 2 ? -x[static_cast<size_t>(j + d / 2)] : x[static_cast<size_t>(j - d / 2)];
    EXPECT_EQ(sum, expected) << "element " << j;
  }
}

TEST(Checkpoint, Gpt2NamesWithoutTheTransformerPrefixLoad) {
  DecoderConfig config = testing::tiny_config(Architecture::kGpt2, DType::kF32);
  DecoderState source(config, small_cache(), runtime::kSimDevice);
  testing::fill_random_weights(source, 6);
  DecoderState target(config, small_cache(), runtime::kSimDevice);
  std::vector<TensorToWrite> tensors = checkpoint_of(source, DType::kF32, "transformer.");
  // HF GPT-2 files may carry the causal-mask buffer; it is not a weight.
  tensors.push_back({.name = "h.0.attn.bias",
                     .dtype = DType::kF32,
                     .shape = {1},
                     .bytes = std::vector<uint8_t>(4)});
  load_checkpoint(target, file_of(tensors));
  EXPECT_EQ(target.tensor("transformer.wte.weight").to_doubles(),
            source.tensor("transformer.wte.weight").to_doubles());
}

TEST(Checkpoint, MismatchesAreNamedAndNothingIsCopied) {
  DecoderConfig config = testing::tiny_config(Architecture::kLlama, DType::kF32);
  DecoderState source(config, small_cache(), runtime::kSimDevice);
  testing::fill_random_weights(source, 7);
  DecoderState target(config, small_cache(), runtime::kSimDevice);
  auto refusal = [&](std::vector<TensorToWrite> tensors) {
    try {
      load_checkpoint(target, file_of(tensors));
    } catch (const weights::WeightsFormatError& error) {
      return std::string(error.what());
    }
    return std::string("no error");
  };
  std::vector<TensorToWrite> missing = checkpoint_of(source, DType::kF32);
  std::erase_if(missing, [](const TensorToWrite& t) { return t.name == "model.norm.weight"; });
  EXPECT_NE(refusal(missing).find("lacks tensor 'model.norm.weight'"), std::string::npos);
  std::vector<TensorToWrite> extra = checkpoint_of(source, DType::kF32);
  extra.push_back({.name = "model.layers.9.mlp.up_proj.weight",
                   .dtype = DType::kF32,
                   .shape = {1},
                   .bytes = std::vector<uint8_t>(4)});
  EXPECT_NE(refusal(extra).find("model.layers.9.mlp.up_proj.weight"), std::string::npos);
  std::vector<TensorToWrite> reshaped = checkpoint_of(source, DType::kF32);
  for (TensorToWrite& t : reshaped) {
    if (t.name == "lm_head.weight") t.shape = {t.shape[1], t.shape[0]};
  }
  EXPECT_NE(refusal(reshaped).find("'lm_head.weight' is [32, 97]"), std::string::npos);
  for (float value : target.tensor("model.embed_tokens.weight").to_vector<float>()) {
    ASSERT_EQ(value, 0.0f);
  }
}

// Note [Sharded checkpoints]: a directory whose weights are split over shards
// named by model.safetensors.index.json, as save_pretrained writes it.
class CheckpointFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("grove_shards_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    testing::fill_random_weights(source_, 8);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // The source's weights in three shards, every third tensor in each, and
  // the index; `edit` may change the weight map before it is written.
  void write_shards(const std::function<void(nlohmann::json&)>& edit = {}) {
    std::vector<TensorToWrite> all = checkpoint_of(source_, DType::kF32);
    std::vector<std::vector<TensorToWrite>> shards(3);
    nlohmann::json index = {{"metadata", {{"total_size", 0}}},
                            {"weight_map", nlohmann::json::object()}};
    for (size_t i = 0; i < all.size(); ++i) {
      const std::string shard = "model-0000" + std::to_string(i % 3 + 1) + "-of-00003.safetensors";
      index["weight_map"][all[i].name] = shard;
      shards[i % 3].push_back(std::move(all[i]));
    }
    for (size_t k = 0; k < shards.size(); ++k) {
      const std::vector<uint8_t> bytes = weights::encode_safetensors(shards[k]);
      std::ofstream(dir_ / ("model-0000" + std::to_string(k + 1) + "-of-00003.safetensors"),
                    std::ios::binary)
          .write(reinterpret_cast<const char*>(bytes.data()),
                 static_cast<std::streamsize>(bytes.size()));
    }
    if (edit) edit(index);
    std::ofstream(dir_ / "model.safetensors.index.json") << index.dump();
  }

  std::string refusal() {
    try {
      std::vector<SafetensorsFile> files = open_checkpoint_files(dir_.string());
      DecoderState target(config_, small_cache(), runtime::kSimDevice);
      load_checkpoint(target, files);
    } catch (const weights::WeightsFormatError& error) {
      return error.what();
    }
    return "no error";
  }

  DecoderConfig config_ = testing::tiny_config(Architecture::kLlama, DType::kF32);
  DecoderState source_{config_, small_cache(), runtime::kSimDevice};
  std::filesystem::path dir_;
};

TEST_F(CheckpointFiles, ShardsLoadAsTheOneFileWould) {
  write_shards();
  std::vector<SafetensorsFile> files = open_checkpoint_files(dir_.string());
  EXPECT_EQ(files.size(), 3u);
  DecoderState target(config_, small_cache(), runtime::kSimDevice);
  load_checkpoint(target, files);
  for (const std::string& name : source_.weight_names()) {
    EXPECT_EQ(target.tensor(name).to_doubles(), source_.tensor(name).to_doubles()) << name;
  }
  // model.safetensors, where present, is the checkpoint (save_pretrained writes one or the other).
  const std::vector<uint8_t> bytes =
      weights::encode_safetensors(checkpoint_of(source_, DType::kF32));
  std::ofstream(dir_ / "model.safetensors", std::ios::binary)
      .write(reinterpret_cast<const char*>(bytes.data()),
             static_cast<std::streamsize>(bytes.size()));
  EXPECT_EQ(open_checkpoint_files(dir_.string()).size(), 1u);
}

TEST_F(CheckpointFiles, AnInconsistentDirectoryIsRefusedByName) {
  EXPECT_NE(refusal().find("model.safetensors.index.json"), std::string::npos);  // neither file
  write_shards([](nlohmann::json& index) {
    index["weight_map"]["model.norm.weight"] = "../model-00001-of-00003.safetensors";
  });
  EXPECT_NE(refusal().find("../model-00001"), std::string::npos);
  write_shards(
      [](nlohmann::json& index) { index["weight_map"]["model.norm.weight"] = "/etc/passwd"; });
  EXPECT_NE(refusal().find("/etc/passwd"), std::string::npos);
  // The index puts a tensor in a shard that does not hold it.
  write_shards([](nlohmann::json& index) {
    const std::string shard = index["weight_map"]["model.norm.weight"];
    index["weight_map"]["model.norm.weight"] = shard == "model-00001-of-00003.safetensors"
                                                   ? "model-00002-of-00003.safetensors"
                                                   : "model-00001-of-00003.safetensors";
  });
  EXPECT_NE(refusal().find("'model.norm.weight'"), std::string::npos);
  // A shard holds a tensor the index leaves out.
  write_shards([](nlohmann::json& index) { index["weight_map"].erase("model.norm.weight"); });
  EXPECT_NE(refusal().find("'model.norm.weight'"), std::string::npos);
  write_shards([](nlohmann::json& index) { index["weight_map"] = "model.safetensors"; });
  EXPECT_NE(refusal().find("weight_map"), std::string::npos);
  // A missing shard names its path.
  write_shards();
  std::filesystem::remove(dir_ / "model-00002-of-00003.safetensors");
  EXPECT_NE(refusal().find("model-00002-of-00003.safetensors"), std::string::npos);
}

TEST(Checkpoint, ATensorInTwoFilesIsRefused) {
  DecoderConfig config = testing::tiny_config(Architecture::kLlama, DType::kF32);
  DecoderState source(config, small_cache(), runtime::kSimDevice);
  testing::fill_random_weights(source, 9);
  std::vector<SafetensorsFile> files;
  files.push_back(file_of(checkpoint_of(source, DType::kF32)));
  std::vector<TensorToWrite> again = checkpoint_of(source, DType::kF32);
  std::erase_if(again, [](const TensorToWrite& t) { return t.name != "model.norm.weight"; });
  files.push_back(file_of(again));
  DecoderState target(config, small_cache(), runtime::kSimDevice);
  try {
    load_checkpoint(target, files);
    ADD_FAILURE() << "no error";
  } catch (const weights::WeightsFormatError& error) {
    EXPECT_NE(std::string(error.what()).find("'model.norm.weight' is in both"), std::string::npos)
        << error.what();
  }
}

}  // namespace
}  // namespace grove::serving::llm
