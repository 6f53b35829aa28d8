#include "serving/server_config.h"

#include <algorithm>
#include <optional>

#include "compiler/backends/backend_registry.h"
#include "runtime/batch_buckets.h"
#include "runtime/device_context.h"
#include "runtime/error.h"

namespace grove::serving {
namespace {

constexpr int64_t kMaxRowsPerBatch = int64_t{1} << 20;
constexpr size_t kMaxQueueCapacity = size_t{1} << 24;
constexpr auto kMaxWait = std::chrono::seconds(3600);

}  // namespace

ProgramFactory model_file_factory(std::string path, std::string batch_dim,
                                  compiler::model_format::DimBindings other_dims) {
  GROVE_CHECK_AS(ConfigError, !other_dims.count(batch_dim),
                 "model_file_factory: other_dims binds '", batch_dim,
                 "', the batch dimension the server sets per bucket; remove it");
  return [path = std::move(path), batch_dim = std::move(batch_dim),
          other_dims = std::move(other_dims)](int64_t batch, runtime::Device device) {
    compiler::model_format::DimBindings dims = other_dims;
    dims[batch_dim] = batch;
    return compiler::model_format::load_model_file(path, dims, device);
  };
}

void ServerConfig::validate() const {
  runtime::BatchBuckets checked(buckets, "ServerConfig::buckets", kMaxRowsPerBatch);
  GROVE_CHECK_AS(ConfigError, max_batch >= 1 && max_batch <= buckets.back(),
                 "ServerConfig::max_batch ", max_batch, " is outside [1, ", buckets.back(),
                 "] (the largest bucket); lower it or add a bucket of at least ", max_batch);
  GROVE_CHECK_AS(ConfigError, max_wait.count() >= 0 && max_wait <= kMaxWait,
                 "ServerConfig::max_wait ", max_wait.count(), " us is outside [0, ",
                 std::chrono::duration_cast<std::chrono::microseconds>(kMaxWait).count(), "] us");
  GROVE_CHECK_AS(ConfigError, queue_capacity >= 1 && queue_capacity <= kMaxQueueCapacity,
                 "ServerConfig::queue_capacity ", queue_capacity, " is outside [1, ",
                 kMaxQueueCapacity, "]");
  std::vector<std::string> names = compiler::backends::backend_names();
  GROVE_CHECK_AS(ConfigError, std::find(names.begin(), names.end(), backend) != names.end(),
                 "ServerConfig::backend '", backend, "' is not registered; known backends: ", [&] {
                   std::string known;
                   for (const std::string& name : names)
                     known += (known.empty() ? "" : ", ") + name;
                   return known;
                 }());
  GROVE_CHECK_AS(
      ConfigError, warmup_calls >= (backend == "cudagraphs" ? 3 : 0) && warmup_calls <= 100,
      "ServerConfig::warmup_calls ", warmup_calls, " is outside [", backend == "cudagraphs" ? 3 : 0,
      ", 100]; the graph backend needs 3 calls per bucket (warm-up, record, replay)");
  std::vector<runtime::Device> seen;
  for (const runtime::Device& device : devices) {
    GROVE_CHECK_AS(ConfigError, device.supports_graphs(), "ServerConfig::devices: ", device.str(),
                   " cannot run the server's batches; use cuda or sim devices");
    GROVE_CHECK_AS(ConfigError, runtime::device_available(device),
                   "ServerConfig::devices: ", device.str(), " is not available on this machine");
    GROVE_CHECK_AS(ConfigError, std::find(seen.begin(), seen.end(), device) == seen.end(),
                   "ServerConfig::devices lists ", device.str(),
                   " twice; a device gets one worker");
    seen.push_back(device);
  }
}

std::vector<runtime::Device> ServerConfig::resolved_devices() const {
  return devices.empty() ? std::vector<runtime::Device>{runtime::default_device()} : devices;
}

int64_t ServerConfig::bucket_for(int64_t rows) const {
  std::optional<size_t> index = runtime::bucket_index_for(buckets, rows);
  GROVE_CHECK(index.has_value(), "ServerConfig::bucket_for: ", rows,
              " rows exceed the largest bucket ", buckets.back());
  return buckets[*index];
}

}  // namespace grove::serving
