#include "tests/serving/serving_test_util.h"

#include <cmath>
#include <cstring>
#include <limits>

#include "compiler/model_format/model_json.h"
#include "tests/common/test_util.h"

namespace grove::serving::test_support {
namespace {

constexpr const char* kTinyModel = R"({
  "name": "tiny_served_mlp",
  "dims": {"batch": 1},
  "inputs": [{"name": "x", "shape": ["batch", 8], "dtype": "f32"},
             {"name": "shift", "shape": ["batch", 4], "dtype": "f32"}],
  "params": [
    {"name": "w0", "shape": [16, 8], "dtype": "f32",
     "init": {"kind": "uniform", "low": -0.5, "high": 0.5, "seed": 11}},
    {"name": "b0", "shape": [16], "dtype": "f32",
     "init": {"kind": "uniform", "low": -0.5, "high": 0.5, "seed": 12}},
    {"name": "w1", "shape": [4, 16], "dtype": "f32",
     "init": {"kind": "uniform", "low": -0.5, "high": 0.5, "seed": 13}},
    {"name": "b1", "shape": [4], "dtype": "f32",
     "init": {"kind": "uniform", "low": -0.5, "high": 0.5, "seed": 14}}],
  "nodes": [
    {"name": "fc0", "op": "linear", "inputs": ["x", "w0", "b0"]},
    {"name": "hidden", "op": "gelu", "inputs": ["fc0"]},
    {"name": "fc1", "op": "linear", "inputs": ["hidden", "w1", "b1"]},
    {"name": "out", "op": "add", "inputs": ["fc1", "shift"]}],
  "outputs": ["out", "hidden"]
})";

HostRows random_rows(std::mt19937& rng, int64_t rows, int64_t width) {
  std::vector<float> values =
      grove::testing::random_floats(rng, static_cast<size_t>(rows * width), -2.0f, 2.0f);
  return HostRows::from_values(values, {rows, width});
}

compiler::TensorList to_device(const Request& request, runtime::Device device) {
  compiler::TensorList tensors;
  for (const HostRows& rows : request.inputs) {
    tensors.push_back(
        runtime::Tensor::from_host(rows.bytes.data(), rows.shape, rows.dtype, device));
  }
  return tensors;
}

}  // namespace

ProgramFactory tiny_model() {
  return [](int64_t batch, runtime::Device device) {
    return compiler::model_format::load_model(kTinyModel, {{"batch", batch}}, device);
  };
}

ProgramFactory tiny_model_with(const std::function<void(nlohmann::json&)>& edit) {
  nlohmann::json model = nlohmann::json::parse(kTinyModel);
  edit(model);
  std::string text = model.dump();
  return [text](int64_t batch, runtime::Device device) {
    return compiler::model_format::load_model(text, {{"batch", batch}}, device);
  };
}

Request random_request(std::mt19937& rng, int64_t rows) {
  return Request{{random_rows(rng, rows, kXWidth), random_rows(rng, rows, kShiftWidth)}};
}

std::vector<HostRows> reference_outputs(const Request& request, runtime::Device device) {
  int64_t rows = request.inputs.front().rows();
  compiler::backends::CompiledModel model =
      compiler::backends::compile(tiny_model()(rows, device), {.backend = "eager"});
  compiler::TensorList outputs = model(to_device(request, device));
  std::vector<HostRows> host;
  for (const runtime::Tensor& output : outputs) {
    const std::vector<uint8_t> bytes = output.to_host_bytes();
    host.push_back(HostRows{output.shape(), output.dtype(), RowBytes(bytes.begin(), bytes.end())});
  }
  return host;
}

bool same_bits(const std::vector<HostRows>& a, const std::vector<HostRows>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].shape != b[i].shape || a[i].dtype != b[i].dtype || a[i].bytes != b[i].bytes) {
      return false;
    }
  }
  return true;
}

double max_abs_difference(const std::vector<HostRows>& a, const std::vector<HostRows>& b) {
  if (a.size() != b.size()) return std::numeric_limits<double>::infinity();
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].shape != b[i].shape || a[i].dtype != b[i].dtype) {
      return std::numeric_limits<double>::infinity();
    }
    std::vector<float> x = a[i].values<float>(), y = b[i].values<float>();
    for (size_t k = 0; k < x.size(); ++k) {
      worst = std::max(worst, std::fabs(static_cast<double>(x[k]) - static_cast<double>(y[k])));
    }
  }
  return worst;
}

std::function<void(int64_t, runtime::Device)> WorkerGate::hook() {
  return [this](int64_t rows, runtime::Device device) {
    std::unique_lock<std::mutex> lock(mutex_);
    rows_.push_back(rows);
    devices_.push_back(device);
    bool hold = entered_ < hold_batches_;
    ++entered_;
    changed_.notify_all();
    if (hold) changed_.wait(lock, [this] { return released_; });
  };
}

void WorkerGate::wait_for_entries(int count) {
  std::unique_lock<std::mutex> lock(mutex_);
  changed_.wait(lock, [&] { return entered_ >= count; });
}

void WorkerGate::release() {
  std::lock_guard<std::mutex> lock(mutex_);
  released_ = true;
  changed_.notify_all();
}

std::vector<int64_t> WorkerGate::batch_rows() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return rows_;
}

std::vector<runtime::Device> WorkerGate::batch_devices() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return devices_;
}

}  // namespace grove::serving::test_support
