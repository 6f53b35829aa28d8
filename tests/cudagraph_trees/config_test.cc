// TreeConfig defaults and environment overrides.
#include "cudagraph_trees/config.h"

#include <gtest/gtest.h>

#include <cstdlib>

#include "cudagraph_trees/tree_manager.h"
#include "tests/common/test_util.h"

namespace grove::cudagraph_trees {
namespace {

using testing::ScopedEnv;

TEST(TreeConfig, DefaultsFollowPyTorch) {
  TreeConfig config;
  EXPECT_FALSE(config.strict);
  EXPECT_EQ(config.rerecord_limit, 128);
  EXPECT_EQ(config.managed_input_move_limit, 5);
  EXPECT_EQ(config.mutation_policy, MutationPolicy::kCopyBack);
  EXPECT_TRUE(config.zero_copy_inputs);
  EXPECT_EQ(config.min_segment_kernels, 1);
  EXPECT_TRUE(config.batch_buckets.empty());
}

TEST(TreeConfig, BackendKnobsComeFromTheEnvironment) {
  ScopedEnv policy("GROVE_CUDAGRAPHS_MUTATION_POLICY", "eager");
  ScopedEnv zero_copy("GROVE_CUDAGRAPHS_ZERO_COPY", "0");
  ScopedEnv graph_copies("GROVE_CUDAGRAPHS_GRAPH_INPUT_COPIES", "0");
  ScopedEnv kernels("GROVE_CUDAGRAPHS_MIN_SEGMENT_KERNELS", "3");
  ScopedEnv buckets("GROVE_CUDAGRAPHS_BATCH_BUCKETS", "1,2,4,16");
  TreeConfig config = TreeConfig::from_environment();
  EXPECT_EQ(config.mutation_policy, MutationPolicy::kEager);
  EXPECT_FALSE(config.zero_copy_inputs);
  EXPECT_FALSE(config.graph_input_copies);
  EXPECT_TRUE(TreeConfig{}.graph_input_copies);  // on unless turned off
  EXPECT_EQ(config.min_segment_kernels, 3);
  EXPECT_EQ(config.batch_buckets, (std::vector<int64_t>{1, 2, 4, 16}));
}

TEST(TreeConfig, MalformedPolicyAndBucketsNameTheVariable) {
  {
    ScopedEnv policy("GROVE_CUDAGRAPHS_MUTATION_POLICY", "sometimes");
    try {
      TreeConfig::from_environment();
      FAIL() << "expected ConfigError";
    } catch (const ConfigError& error) {
      EXPECT_NE(std::string(error.what()).find("GROVE_CUDAGRAPHS_MUTATION_POLICY"),
                std::string::npos);
    }
  }
  {
    ScopedEnv buckets("GROVE_CUDAGRAPHS_BATCH_BUCKETS", "1,x");
    EXPECT_THROW(TreeConfig::from_environment(), ConfigError);
  }
  ScopedEnv buckets("GROVE_CUDAGRAPHS_BATCH_BUCKETS", "4,2");
  EXPECT_THROW(TreeConfig::from_environment(), ConfigError);
}

TEST(TreeConfig, EnvironmentOverridesDefaults) {
  ScopedEnv strict("GROVE_CUDAGRAPHS_STRICT", "1");
  ScopedEnv limit("GROVE_CUDAGRAPHS_RERECORD_LIMIT", "7");
  ScopedEnv moves("GROVE_CUDAGRAPHS_MANAGED_INPUT_LIMIT", "2");
  TreeConfig config = TreeConfig::from_environment();
  EXPECT_TRUE(config.strict);
  EXPECT_EQ(config.rerecord_limit, 7);
  EXPECT_EQ(config.managed_input_move_limit, 2);
}

TEST(TreeConfig, MalformedEnvironmentValuesNameTheVariable) {
  {
    ScopedEnv strict("GROVE_CUDAGRAPHS_STRICT", "maybe");
    try {
      TreeConfig::from_environment();
      FAIL() << "expected ConfigError";
    } catch (const ConfigError& error) {
      EXPECT_NE(std::string(error.what()).find("GROVE_CUDAGRAPHS_STRICT"), std::string::npos);
    }
  }
  ScopedEnv limit("GROVE_CUDAGRAPHS_RERECORD_LIMIT", "-3");
  EXPECT_THROW(TreeConfig::from_environment(), ConfigError);
}

TEST(TreeConfig, ControlsAreReadFromTheEnvironment) {
  ScopedEnv skip("GROVE_CUDAGRAPHS_SKIP", "mlp:segment1,attention*");
  ScopedEnv policy("GROVE_CUDAGRAPHS_MANAGED_INPUT_POLICY", "eager");
  ScopedEnv bytes("GROVE_CUDAGRAPHS_INITIAL_POOL_BYTES", "1048576");
  TreeConfig config = TreeConfig::from_environment();
  EXPECT_EQ(config.skip_functions, (std::vector<std::string>{"mlp:segment1", "attention*"}));
  EXPECT_EQ(config.managed_input_policy, ManagedInputPolicy::kEager);
  EXPECT_EQ(config.initial_pool_bytes, 1048576u);
  ASSERT_NE(config.skip_entry_for("attention:block3"), nullptr);
  EXPECT_EQ(*config.skip_entry_for("attention:block3"), "attention*");
  EXPECT_EQ(config.skip_entry_for("mlp:segment10"), nullptr);  // exact entries match exactly
}

TEST(TreeConfig, MalformedControlsNameTheVariable) {
  for (auto [variable, value] : std::vector<std::pair<const char*, const char*>>{
           {"GROVE_CUDAGRAPHS_SKIP", "a,,b"},
           {"GROVE_CUDAGRAPHS_SKIP", "a,"},
           {"GROVE_CUDAGRAPHS_MANAGED_INPUT_POLICY", "sometimes"},
           {"GROVE_CUDAGRAPHS_INITIAL_POOL_BYTES", "-1"},
           {"GROVE_CUDAGRAPHS_INITIAL_POOL_BYTES", "1MB"}}) {
    ScopedEnv bad(variable, value);
    try {
      TreeConfig::from_environment();
      ADD_FAILURE() << variable << "=" << value << ": expected ConfigError";
    } catch (const ConfigError& error) {
      EXPECT_NE(std::string(error.what()).find(variable), std::string::npos) << error.what();
    }
  }
}

TEST(TreeConfig, ManagerRejectsCpuDeviceAndBadConfig) {
  EXPECT_THROW(TreeManager(runtime::kCpuDevice, TreeConfig{}), DeviceError);
  TreeConfig bad;
  bad.managed_input_move_limit = 0;
  EXPECT_THROW(TreeManager(runtime::kSimDevice, bad), ConfigError);
}

}  // namespace
}  // namespace grove::cudagraph_trees
