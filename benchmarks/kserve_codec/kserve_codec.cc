// kserve_codec: the CPU cost per request of the KServe v2 fronts' own codec
// work, apart from sockets and the model: reading a request (JSON numbers,
// the binary tensor data extension, gRPC's protobuf) into checked rows, and
// writing the answer in the same form. A microbenchmark for the per-request
// CPU of serve_http's encodings (issue 35), run on any machine.
//
//   kserve_codec [--features 512] [--rows 1] [--iters 2000] [--repeats 7]
//
// Each operation runs --iters times per repeat; the table gives the median
// and the best over repeats of µs per call, and the calls per second one core
// could make at the median. Time is the calling thread's CPU time
// (CLOCK_THREAD_CPUTIME_ID), so that other work on a shared machine, which
// preempts the benchmark, is not counted as the codec's.
#include <time.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "benchmarks/common/flags.h"
#include "benchmarks/common/json_report.h"
#include "benchmarks/common/latency.h"
#include "benchmarks/common/table.h"
#include "serving/kserve_grpc_protocol.h"
#include "serving/kserve_protocol.h"
#include "serving/kserve_v2_grpc.pb.h"

namespace grove::benchmarks {
namespace {

constexpr const char* kName = "kserve_codec";

const std::vector<FlagSpec> kFlags = {
    {"--features", "N", "values per row of the one f32 input and output (default 512)"},
    {"--rows", "N", "rows per request (default 1)"},
    {"--iters", "N", "calls per repeat (default 2000)"},
    {"--repeats", "N", "repeats; the median is reported (default 7)"},
    kJsonFlag,
};

double thread_cpu_us() {
  timespec now{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &now);
  return static_cast<double>(now.tv_sec) * 1e6 + static_cast<double>(now.tv_nsec) * 1e-3;
}

// µs per call of `op` in each of `repeats` runs of `iters` calls, sorted.
std::vector<double> time_op(const std::function<void()>& op, int64_t iters, int64_t repeats) {
  std::vector<double> per_call;
  for (int64_t r = 0; r < repeats; ++r) {
    const double start_us = thread_cpu_us();
    for (int64_t i = 0; i < iters; ++i) op();
    per_call.push_back((thread_cpu_us() - start_us) / static_cast<double>(iters));
  }
  std::sort(per_call.begin(), per_call.end());
  return per_call;
}

int run(int argc, char** argv) {
  FlagValues flags = parse_flags(kName, argc, argv, kFlags);
  if (flags.help_requested()) {
    std::fputs(usage_text(kName,
                          "CPU per request of the KServe v2 codecs (JSON, binary tensor data, "
                          "gRPC): reading a request into rows and writing its answer.",
                          kFlags)
                   .c_str(),
               stdout);
    return 0;
  }
  const int64_t features = flags.integer("--features", 512, 1, 1 << 20);
  const int64_t rows = flags.integer("--rows", 1, 1, 1024);
  const int64_t iters = flags.integer("--iters", 2000, 1);
  const int64_t repeats = flags.integer("--repeats", 7, 1, 101);
  const std::string json_path = flags.text("--json", "");
  if (!json_path.empty()) cli::check_output_path("--json", json_path);

  serving::ModelSignature signature;
  signature.inputs.push_back({"x", {features}, runtime::DType::kF32, size_t(features) * 4});
  signature.outputs.push_back({"y", {features}, runtime::DType::kF32, size_t(features) * 4});
  std::mt19937_64 rng(1);
  std::uniform_real_distribution<float> uniform(-1.f, 1.f);
  std::vector<float> values(static_cast<size_t>(features * rows));
  for (float& value : values) value = uniform(rng);
  const std::vector<int64_t> shape{rows, features};

  // Requests as serve_http's clients send them.
  nlohmann::json tensor{{"name", "x"}, {"shape", shape}, {"datatype", "FP32"}, {"data", values}};
  const std::string json_body = nlohmann::json{{"inputs", {tensor}}}.dump();
  tensor.erase("data");
  tensor["parameters"] = {{"binary_data_size", values.size() * 4}};
  const std::string header =
      nlohmann::json{{"inputs", {tensor}}, {"parameters", {{"binary_data_output", true}}}}.dump();
  const std::string binary_body =
      header + std::string(reinterpret_cast<const char*>(values.data()), values.size() * 4);
  inference::ModelInferRequest grpc_request;
  grpc_request.set_model_name("m");
  auto* input = grpc_request.add_inputs();
  input->set_name("x");
  input->set_datatype("FP32");
  for (int64_t size : shape) input->add_shape(size);
  grpc_request.add_raw_input_contents(values.data(), values.size() * 4);
  const std::string grpc_bytes = grpc_request.SerializeAsString();

  serving::Response answer;
  answer.outputs.push_back(serving::HostRows::from_values(values, shape));
  const serving::InferRequest json_parsed =
      serving::parse_infer_request(json_body, signature, rows);
  const serving::InferRequest binary_parsed =
      serving::parse_infer_request(binary_body, signature, rows, header.size());

  struct Row {
    std::string encoding, op;
    size_t bytes;
    std::function<void()> call;
  };
  size_t sink = 0;
  std::vector<Row> ops = {
      {"json", "read request", json_body.size(),
       [&] { sink += serving::parse_infer_request(json_body, signature, rows).outputs.size(); }},
      {"json", "write answer", 0,
       [&] { sink += serving::infer_response_json("m", json_parsed, signature, answer).size(); }},
      {"binary", "read request", binary_body.size(),
       [&] {
         sink += serving::parse_infer_request(binary_body, signature, rows, header.size())
                     .outputs.size();
       }},
      {"binary", "write answer", 0,
       [&] { sink += serving::infer_response_json("m", binary_parsed, signature, answer).size(); }},
      {"grpc", "read request", grpc_bytes.size(),
       [&] {
         inference::ModelInferRequest request;
         request.ParseFromString(grpc_bytes);
         sink += serving::parse_grpc_infer_request(request, signature, rows).outputs.size();
       }},
      {"grpc", "write answer", 0,
       [&] {
         inference::ModelInferResponse response;
         serving::fill_grpc_infer_response("m", json_parsed, signature, answer, &response);
         sink += response.SerializeAsString().size();
       }},
  };
  ops[1].bytes = serving::infer_response_json("m", json_parsed, signature, answer).size();
  ops[3].bytes = serving::infer_response_json("m", binary_parsed, signature, answer).size();
  {
    inference::ModelInferResponse response;
    serving::fill_grpc_infer_response("m", json_parsed, signature, answer, &response);
    ops[5].bytes = response.ByteSizeLong();
  }
  std::printf("%s: one f32 input and output of %lld values, %lld row(s) per request\n", kName,
              static_cast<long long>(features), static_cast<long long>(rows));
  Table table({{"encoding"},
               {"operation"},
               {"bytes", Align::kRight},
               {"us per call", Align::kRight},
               {"best us", Align::kRight},
               {"calls/s per core", Align::kRight}});
  nlohmann::json results = nlohmann::json::array();
  for (const Row& row : ops) {
    const std::vector<double> us = time_op(row.call, iters, repeats);
    const double median = us[us.size() / 2];
    table.add_row({row.encoding, row.op, std::to_string(row.bytes), format_fixed(median, 2),
                   format_fixed(us.front(), 2), format_fixed(1e6 / median, 0)});
    results.push_back({{"encoding", row.encoding},
                       {"operation", row.op},
                       {"bytes", row.bytes},
                       {"us_per_call_median", median},
                       {"us_per_call_best", us.front()}});
  }
  std::fputs(table.render().c_str(), stdout);
  if (!json_path.empty()) {
    write_json_file(json_path, {{"benchmark", kName},
                                {"date", utc_date()},
                                {"features", features},
                                {"rows", rows},
                                {"results", results}});
    std::printf("wrote %s\n", json_path.c_str());
  }
  return sink == 0 ? 1 : 0;
}

}  // namespace
}  // namespace grove::benchmarks

int main(int argc, char** argv) {
  return grove::benchmarks::benchmark_main(grove::benchmarks::kName, grove::benchmarks::run, argc,
                                           argv);
}
