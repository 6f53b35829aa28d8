// TreeConfig defaults and environment overrides.
#include <gtest/gtest.h>

#include <cstdlib>

#include "cudagraph_trees/config.h"
#include "cudagraph_trees/tree_manager.h"

namespace grove::cudagraph_trees {
namespace {

class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) { setenv(name, value, 1); }
  ~ScopedEnv() { unsetenv(name_); }

 private:
  const char* name_;
};

TEST(TreeConfig, DefaultsFollowPyTorch) {
  TreeConfig config;
  EXPECT_FALSE(config.strict);
  EXPECT_EQ(config.rerecord_limit, 128);
  EXPECT_EQ(config.managed_input_move_limit, 5);
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

TEST(TreeConfig, ManagerRejectsCpuDeviceAndBadConfig) {
  EXPECT_THROW(TreeManager(runtime::kCpuDevice, TreeConfig{}), DeviceError);
  TreeConfig bad;
  bad.managed_input_move_limit = 0;
  EXPECT_THROW(TreeManager(runtime::kSimDevice, bad), ConfigError);
}

}  // namespace
}  // namespace grove::cudagraph_trees
