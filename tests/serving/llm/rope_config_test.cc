// Note [Rotary settings in both layouts] (serving/llm/rope_config.h): the
// rotary settings of transformers 4 and 5 config.json files, the inverse
// frequencies of each type against values worked out here step by step, and
// refusals that name the setting. Against transformers itself:
// gpu_transformers_test.py's saved-by-transformers cases.
#include "serving/llm/rope_config.h"

#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include "runtime/error.h"
#include "serving/llm/decoder_config.h"

namespace grove::serving::llm {
namespace {

using nlohmann::json;

std::string refusal(const json& config) {
  try {
    RopeConfig::parse(config, "config.json");
  } catch (const Error& error) {
    return error.what();
  }
  return "no error";
}

TEST(RopeConfig, ReadsTheThetaOfEitherLayout) {
  EXPECT_EQ(RopeConfig::parse(json::object(), "c").theta, 10000);
  EXPECT_EQ(RopeConfig::parse({{"rope_theta", 500000.0}}, "c").theta, 500000);
  EXPECT_EQ(RopeConfig::parse({{"rope_theta", 500000.0}, {"rope_scaling", nullptr}}, "c").theta,
            500000);
  // transformers 5: one rope_parameters dict, no top-level theta.
  const RopeConfig v5 = RopeConfig::parse(
      {{"rope_parameters", {{"rope_theta", 500000.0}, {"rope_type", "default"}}}}, "c");
  EXPECT_EQ(v5.theta, 500000);
  EXPECT_EQ(v5.type, RopeType::kDefault);
  // Both, agreeing.
  EXPECT_EQ(
      RopeConfig::parse({{"rope_theta", 1e6},
                         {"rope_parameters", {{"rope_theta", 1e6}, {"rope_type", "default"}}}},
                        "c")
          .theta,
      1e6);
}

TEST(RopeConfig, ReadsTheScalingOfEitherLayout) {
  const json llama3 = {{"rope_type", "llama3"},
                       {"factor", 32.0},
                       {"low_freq_factor", 1.0},
                       {"high_freq_factor", 4.0},
                       {"original_max_position_embeddings", 8192}};
  const RopeConfig v4 =
      RopeConfig::parse({{"rope_theta", 500000.0}, {"rope_scaling", llama3}}, "c");
  json parameters = llama3;
  parameters["rope_theta"] = 500000.0;
  const RopeConfig v5 = RopeConfig::parse({{"rope_parameters", parameters}}, "c");
  for (const RopeConfig& rope : {v4, v5}) {
    EXPECT_EQ(rope.type, RopeType::kLlama3);
    EXPECT_EQ(rope.theta, 500000);
    EXPECT_EQ(rope.factor, 32);
    EXPECT_EQ(rope.low_freq_factor, 1);
    EXPECT_EQ(rope.high_freq_factor, 4);
    EXPECT_EQ(rope.original_max_position_embeddings, 8192);
    EXPECT_EQ(rope.inverse_frequencies(64), v4.inverse_frequencies(64));
  }
  // Both layouts in one file, agreeing (an integer factor equals the same float).
  json both = {{"rope_scaling", llama3}, {"rope_parameters", parameters}};
  both["rope_scaling"]["factor"] = 32;
  EXPECT_EQ(RopeConfig::parse(both, "c").inverse_frequencies(64), v4.inverse_frequencies(64));
  both["rope_scaling"]["factor"] = 8.0;
  EXPECT_NE(refusal(both).find("disagrees"), std::string::npos);
  EXPECT_NE(refusal({{"rope_scaling", "llama3"}, {"rope_parameters", parameters}}).find("object"),
            std::string::npos);
  // The older "type" key of transformers 4.
  EXPECT_EQ(RopeConfig::parse({{"rope_scaling", {{"type", "linear"}, {"factor", 2.0}}}}, "c").type,
            RopeType::kLinear);
}

TEST(RopeConfig, DefaultFrequenciesAreThetaToTheMinusTwoIOverD) {
  const RopeConfig rope = RopeConfig::parse({{"rope_theta", 500000.0}}, "c");
  const std::vector<float> inv_freq = rope.inverse_frequencies(8);
  ASSERT_EQ(inv_freq.size(), 4u);
  for (int i = 0; i < 4; ++i) {
    EXPECT_NEAR(inv_freq[static_cast<size_t>(i)], std::pow(500000.0, -2.0 * i / 8), 1e-7)
        << "i " << i;
  }
}

TEST(RopeConfig, LinearDividesEveryFrequencyByTheFactor) {
  const std::vector<float> plain = RopeConfig::parse(json::object(), "c").inverse_frequencies(16);
  const std::vector<float> linear =
      RopeConfig::parse({{"rope_scaling", {{"rope_type", "linear"}, {"factor", 4.0}}}}, "c")
          .inverse_frequencies(16);
  for (size_t i = 0; i < plain.size(); ++i) EXPECT_EQ(linear[i], plain[i] / 4.0f) << "i " << i;
}

// LLaMA 3.1's scaling: wavelengths (2 pi / f) shorter than old / high_freq_factor
// keep their frequency, longer than old / low_freq_factor divide it by the
// factor, and between the two blend with s = (old / wavelength - low) / (high - low):
// f' = (1 - s) f / factor + s f.
TEST(RopeConfig, Llama3KeepsShortWavelengthsScalesLongOnesAndBlendsBetween) {
  // theta 10000, d 32: wavelengths 2 pi 10000^(2i/32) run from 6.3 to about 35,000.
  const double old = 256, low = 1, high = 4, factor = 8;
  const RopeConfig rope = RopeConfig::parse({{"rope_scaling",
                                              {{"rope_type", "llama3"},
                                               {"factor", factor},
                                               {"low_freq_factor", low},
                                               {"high_freq_factor", high},
                                               {"original_max_position_embeddings", old}}}},
                                            "c");
  const std::vector<float> plain = RopeConfig::parse(json::object(), "c").inverse_frequencies(32);
  const std::vector<float> scaled = rope.inverse_frequencies(32);
  int kept = 0, divided = 0, blended = 0;
  for (size_t i = 0; i < plain.size(); ++i) {
    SCOPED_TRACE(::testing::Message() << "i " << i);
    const double f = plain[i];
    const double wavelength = 2 * M_PI / f;
    if (wavelength < old / high) {
      EXPECT_EQ(scaled[i], plain[i]);
      ++kept;
    } else if (wavelength > old / low) {
      EXPECT_EQ(scaled[i], plain[i] / static_cast<float>(factor));
      ++divided;
    } else {
      const double s = (old / wavelength - low) / (high - low);
      EXPECT_NEAR(scaled[i], (1 - s) * f / factor + s * f, 1e-6 * f);
      EXPECT_LT(scaled[i], plain[i]);
      EXPECT_GT(scaled[i], plain[i] / static_cast<float>(factor));
      ++blended;
    }
  }
  // The case covers all three bands.
  EXPECT_GT(kept, 0);
  EXPECT_GT(divided, 0);
  EXPECT_GT(blended, 0);
}

// What transformers 5.17.0's LlamaRotaryEmbedding holds as inv_freq for head_dim
// 16, printed from models it built (benchmarks/session33_logs/call_a/cfg.txt):
// theta 500000; llama3 (theta 500000, factor 8, low 1, high 4, original 64:
// its three bands); linear (theta 10000, factor 2).
TEST(RopeConfig, FrequenciesEqualTransformersOwn) {
  const std::vector<double> theta = {1.0,
                                     0.193922758102417,
                                     0.03760603070259094,
                                     0.00729266507551074,
                                     0.001414213445968926,
                                     0.00027424818836152554,
                                     5.3182957344688475e-05,
                                     1.0313385246263351e-05};
  const std::vector<double> llama3 = {1.0,
                                      0.07940301299095154,
                                      0.004700753837823868,
                                      0.0009115831344388425,
                                      0.00017677668074611574,
                                      3.428102354519069e-05,
                                      6.647869668086059e-06,
                                      1.289173155782919e-06};
  const std::vector<double> linear = {0.5,
                                      0.15811388194561005,
                                      0.05000000074505806,
                                      0.015811389312148094,
                                      0.004999999888241291,
                                      0.0015811389312148094,
                                      0.0005000000237487257,
                                      0.00015811389312148094};
  const json llama3_parameters = {{"rope_type", "llama3"},
                                  {"factor", 8.0},
                                  {"low_freq_factor", 1.0},
                                  {"high_freq_factor", 4.0},
                                  {"original_max_position_embeddings", 64},
                                  {"rope_theta", 500000.0}};
  const std::vector<std::pair<json, std::vector<double>>> cases = {
      {{{"rope_parameters", {{"rope_theta", 500000.0}, {"rope_type", "default"}}}}, theta},
      {{{"rope_parameters", llama3_parameters}}, llama3},
      {{{"rope_parameters", {{"factor", 2.0}, {"rope_theta", 10000.0}, {"rope_type", "linear"}}}},
       linear}};
  for (const auto& [config, expected] : cases) {
    SCOPED_TRACE(config.dump());
    const std::vector<float> got = RopeConfig::parse(config, "c").inverse_frequencies(16);
    ASSERT_EQ(got.size(), expected.size());
    for (size_t i = 0; i < got.size(); ++i) {
      EXPECT_FLOAT_EQ(got[i], static_cast<float>(expected[i])) << "i " << i;
    }
  }
}

TEST(RopeConfig, RefusesWhatItDoesNotImplementByName) {
  EXPECT_NE(refusal({{"rope_scaling", {{"rope_type", "yarn"}, {"factor", 4.0}}}}).find("\"yarn\""),
            std::string::npos);
  EXPECT_NE(refusal({{"rope_parameters", {{"rope_type", "dynamic"}, {"factor", 2.0}}}})
                .find("\"dynamic\""),
            std::string::npos);
  // A factor without a type would be applied by nobody.
  EXPECT_NE(refusal({{"rope_scaling", {{"factor", 2.0}}}}).find("factor"), std::string::npos);
  EXPECT_NE(refusal({{"rope_scaling", {{"rope_type", "linear"}}}}).find("factor"),
            std::string::npos);
  EXPECT_NE(refusal({{"rope_scaling", {{"rope_type", "llama3"}, {"factor", 8.0}}}})
                .find("low_freq_factor"),
            std::string::npos);
  EXPECT_NE(refusal({{"rope_parameters", {{"rope_type", "default"}, {"mrope_section", {1, 2}}}}})
                .find("mrope_section"),
            std::string::npos);
  EXPECT_NE(refusal({{"rope_parameters",
                      {{"rope_type", "linear"}, {"factor", 2.0}, {"attention_factor", 0.5}}}})
                .find("attention_factor"),
            std::string::npos);
  EXPECT_NE(refusal({{"partial_rotary_factor", 0.5}}).find("partial_rotary_factor"),
            std::string::npos);
  EXPECT_NE(refusal({{"rope_theta", 10000.0}, {"rope_parameters", {{"rope_theta", 500000.0}}}})
                .find("disagrees"),
            std::string::npos);
  EXPECT_NE(refusal({{"rope_theta", -1.0}}).find("rope_theta"), std::string::npos);
  EXPECT_NE(refusal({{"rope_scaling", "linear"}}).find("rope_scaling"), std::string::npos);
}

// The whole config.json: transformers 5's "dtype" and rope_parameters reach
// the DecoderConfig (a bfloat16 checkpoint saved by transformers 5 was run in
// float32 with theta 10000).
TEST(RopeConfig, ATransformers5ConfigJsonParsesWhole) {
  const json config = {{"model_type", "llama"},
                       {"vocab_size", 97},
                       {"hidden_size", 32},
                       {"intermediate_size", 48},
                       {"num_hidden_layers", 2},
                       {"num_attention_heads", 4},
                       {"num_key_value_heads", 2},
                       {"max_position_embeddings", 64},
                       {"dtype", "bfloat16"},
                       {"rope_parameters", {{"rope_theta", 500000.0}, {"rope_type", "default"}}},
                       {"eos_token_id", {5, 6, 7}}};
  const DecoderConfig parsed = DecoderConfig::parse(config.dump(), "config.json");
  EXPECT_EQ(parsed.dtype, runtime::DType::kBF16);
  EXPECT_EQ(parsed.rope.theta, 500000);
  EXPECT_EQ(parsed.eos_token_ids, (std::vector<int64_t>{5, 6, 7}));
  json disagreeing = config;
  disagreeing["torch_dtype"] = "float32";
  EXPECT_THROW(DecoderConfig::parse(disagreeing.dump(), "config.json"), Error);
}

}  // namespace
}  // namespace grove::serving::llm
