// KserveRoutes apart from sockets, over a fake InferenceService: every answer
// is JSON (invalid UTF-8 included), an infer is queued and answered only
// after the service's on_ready (Note [Answers without a waiting thread]),
// and the refusals of Note [HTTP status of a refusal].
#include "serving/kserve_routes.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <stdexcept>
#include <thread>
#include <vector>

#include "serving/errors.h"
#include "serving/metrics.h"
#include "serving/sharded_counter.h"

namespace grove::serving {
namespace {

using nlohmann::json;

// Holds each submitted request's promise and on_ready for the test to set.
class FakeService : public InferenceService {
 public:
  enum class Mode { kQueue, kFull, kClosed };
  Mode mode = Mode::kQueue;
  std::promise<Response> promise;
  std::function<void()> on_ready;
  int submitted = 0;

  FakeService() {
    signature_.inputs.push_back({"x", {3}, runtime::DType::kF32, 12});
    signature_.outputs.push_back({"y", {3}, runtime::DType::kF32, 12});
  }
  std::future<Response> submit(Request request) override {
    return submit_then(std::move(request), nullptr);
  }
  std::future<Response> submit_then(Request request, std::function<void()> ready) override {
    if (mode == Mode::kFull) throw QueueFullError("server queue is full (1 requests wait)");
    if (mode == Mode::kClosed) throw ServerClosedError("server is shut down");
    ++submitted;
    rows = request.inputs.at(0);
    promise = std::promise<Response>();
    on_ready = std::move(ready);
    return promise.get_future();
  }
  const ModelSignature& signature() const override { return signature_; }
  int64_t max_batch() const override { return 4; }
  ServerStats stats() const override { return {}; }
  size_t queue_size() const override { return 0; }
  std::vector<WorkerSnapshot> backend_snapshots() const override { return {}; }

  HostRows rows;

 private:
  ModelSignature signature_;
};

HttpRequest request(const std::string& method, const std::string& path, std::string body = "") {
  HttpRequest r;
  r.method = method;
  r.target = path;
  r.path = percent_decode(path);
  r.body = std::move(body);
  return r;
}

const std::string kInfer = "/v2/models/m/infer";
const std::string kBody =
    R"({"id": "7", "inputs": [{"name": "x", "shape": [1, 3], "datatype": "FP32",
        "data": [1, 2, 3]}]})";

// The answer handle() gives at once (fails the test for a queued infer).
HttpResponse now(std::variant<HttpResponse, std::unique_ptr<KserveRoutes::Queued>> result) {
  if (auto* response = std::get_if<HttpResponse>(&result)) return *response;
  ADD_FAILURE() << "queued, expected an answer now";
  return {};
}

TEST(KserveRoutes, EveryAnswerIsJsonWhateverThePathHolds) {
  FakeService service;
  KserveRoutes routes(service, "m", 1);
  HttpRequest live = request("GET", "/v2/health/live");
  EXPECT_EQ(now(routes.handle(live, nullptr)).body, R"({"live":true})");
  for (const char* path : {"/%FF", "/v2/models/%FF", "/v2/models/%FE%FF/infer", "/\xff\xfe"}) {
    HttpRequest odd = request("GET", path);
    HttpResponse response = now(routes.handle(odd, nullptr));
    EXPECT_EQ(response.status, 404) << path;
    const std::string message = json::parse(response.body)["error"];  // valid JSON
    EXPECT_NE(message.find("\ufffd"), std::string::npos) << message;
  }
  HttpRequest put = request("PUT", kInfer);
  EXPECT_EQ(now(routes.handle(put, nullptr)).status, 404);
  HttpRequest other = request("POST", "/v2/models/other/infer", kBody);
  EXPECT_NE(now(routes.handle(other, nullptr)).body.find("no model 'other'"), std::string::npos);
  HttpRequest bad_id = request("POST", kInfer, "{\"id\": \"\xff\", \"inputs\": []}");
  HttpResponse refused = now(routes.handle(bad_id, nullptr));
  EXPECT_EQ(refused.status, 400);
  EXPECT_NO_THROW(json::parse(refused.body));
  EXPECT_EQ(service.submitted, 0);
}

TEST(KserveRoutes, InferIsAnsweredOnlyAfterOnReady) {
  FakeService service;
  KserveRoutes routes(service, "m", 1);
  HttpRequest infer = request("POST", kInfer, kBody);
  bool ready = false;
  auto result = routes.handle(infer, [&] { ready = true; });
  ASSERT_TRUE(std::holds_alternative<std::unique_ptr<KserveRoutes::Queued>>(result));
  EXPECT_TRUE(infer.body.empty()) << "the body is kept after it was parsed";
  EXPECT_EQ(service.rows.values<float>(), (std::vector<float>{1, 2, 3}));
  EXPECT_FALSE(ready);
  Response response;
  response.outputs.push_back(HostRows::from_values<float>({4, 5, 6}, {1, 3}));
  service.promise.set_value(std::move(response));
  service.on_ready();
  EXPECT_TRUE(ready);
  HttpResponse answer = routes.finish(*std::get<std::unique_ptr<KserveRoutes::Queued>>(result));
  EXPECT_EQ(answer.status, 200);
  const json body = json::parse(answer.body);
  EXPECT_EQ(body["id"], "7");
  EXPECT_EQ(body["outputs"][0]["data"], json({4, 5, 6}));
}

TEST(KserveRoutes, RefusalsOfTheServiceKeepTheirStatus) {
  FakeService service;
  KserveRoutes routes(service, "m", 3);
  service.mode = FakeService::Mode::kFull;
  HttpRequest full = request("POST", kInfer, kBody);
  HttpResponse busy = now(routes.handle(full, nullptr));
  EXPECT_EQ(busy.status, 503);
  ASSERT_EQ(busy.headers.size(), 1u);
  EXPECT_STREQ(busy.headers[0].first, "Retry-After");
  EXPECT_EQ(busy.headers[0].second, "3");
  service.mode = FakeService::Mode::kClosed;
  HttpRequest closed = request("POST", kInfer, kBody);
  EXPECT_EQ(now(routes.handle(closed, nullptr)).status, 503);

  service.mode = FakeService::Mode::kQueue;
  HttpRequest failing = request("POST", kInfer, kBody);
  auto queued = routes.handle(failing, nullptr);
  service.promise.set_exception(std::make_exception_ptr(std::runtime_error("device lost")));
  service.on_ready();  // finish() answers once on_ready has run
  HttpResponse failed = routes.finish(*std::get<std::unique_ptr<KserveRoutes::Queued>>(queued));
  EXPECT_EQ(failed.status, 500);
  EXPECT_NE(failed.body.find("the batch failed: device lost"), std::string::npos);
  HttpRequest cancelled = request("POST", kInfer, kBody);
  queued = routes.handle(cancelled, nullptr);
  service.promise.set_exception(std::make_exception_ptr(RequestCancelledError("cancelled")));
  service.on_ready();
  EXPECT_EQ(routes.finish(*std::get<std::unique_ptr<KserveRoutes::Queued>>(queued)).status, 503);

  routes.set_stopping();
  HttpRequest ready = request("GET", "/v2/health/ready");
  EXPECT_EQ(now(routes.handle(ready, nullptr)).status, 503);
}

// count_response is called by every front thread at once (relaxed atomics, no
// lock): no count is lost, and /metrics shows each status with its own count.
TEST(KserveRoutes, ResponsesCountedFromManyThreadsByStatus) {
  FakeService service;
  KserveRoutes routes(service, "m", 1);
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&routes, t] {
      for (int i = 0; i < 1000; ++i) routes.count_response(i % 10 == 0 ? 503 : 200);
      if (t == 0) routes.count_response(431);
    });
  }
  for (std::thread& thread : threads) thread.join();
  const std::string text = routes.metrics_text();
  EXPECT_NE(text.find("grove_http_responses_total{code=\"200\"} 7200\n"), std::string::npos)
      << text;
  EXPECT_NE(text.find("grove_http_responses_total{code=\"503\"} 800\n"), std::string::npos);
  EXPECT_NE(text.find("grove_http_responses_total{code=\"431\"} 1\n"), std::string::npos);
  EXPECT_EQ(text.find("grove_http_responses_total{code=\"404\"}"), std::string::npos);
}

// Note [Counters per thread]: adds from more threads than slots all count.
TEST(ShardedCounter, SumsEveryThreadsAdds) {
  ShardedCounter counter;
  std::vector<std::thread> threads;
  const int thread_count = 2 * static_cast<int>(kCounterShards) + 3;
  for (int t = 0; t < thread_count; ++t) {
    threads.emplace_back([&counter, t] {
      for (int i = 0; i < 1000; ++i) counter.add(t % 2 == 0 ? 1 : 2);
    });
  }
  for (std::thread& thread : threads) thread.join();
  const uint64_t odd = static_cast<uint64_t>(thread_count / 2);
  const uint64_t even = static_cast<uint64_t>(thread_count) - odd;
  EXPECT_EQ(counter.load(), 1000 * (even + 2 * odd));
}

// Note [Histograms counted per thread]: observations from more threads than
// shards, each in the bucket of its latency, add up in the text.
TEST(Metrics, HistogramSumsEveryThreadsObservations) {
  LatencyHistogram histogram;
  std::vector<std::thread> threads;
  for (int t = 0; t < 3 * static_cast<int>(LatencyHistogram::kShards); ++t) {
    threads.emplace_back([&histogram] {
      for (int i = 0; i < 100; ++i) histogram.observe(i % 4 == 0 ? 0.002 : 0.00005);
    });
  }
  for (std::thread& thread : threads) thread.join();
  std::string text;
  histogram.write(text, "h", "test");
  const int observed = 3 * static_cast<int>(LatencyHistogram::kShards) * 100;
  EXPECT_NE(text.find(str_cat("h_bucket{le=\"0.0001\"} ", observed * 3 / 4, "\n")),
            std::string::npos)
      << text;
  EXPECT_NE(text.find(str_cat("h_bucket{le=\"0.0025\"} ", observed, "\n")), std::string::npos)
      << text;
  EXPECT_NE(text.find(str_cat("h_count ", observed, "\n")), std::string::npos) << text;
  // 0.002 s a quarter of the time, 50 us the rest.
  const double sum = observed / 4 * 0.002 + observed * 3 / 4 * 0.00005;
  const size_t at = text.find("h_sum ");
  ASSERT_NE(at, std::string::npos) << text;
  EXPECT_NEAR(std::stod(text.substr(at + 6)), sum, 1e-6) << text;
}

}  // namespace
}  // namespace grove::serving
