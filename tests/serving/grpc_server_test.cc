// grove's gRPC front over loopback with a gRPC C++ client, over a fake
// InferenceService that doubles its input: the health and metadata RPCs,
// ModelInfer with raw and typed contents, the refusals of Note [gRPC status
// of a refusal] (same messages as the JSON form: Note [One set of request
// checks]) and Note [Draining gRPC on stop].
#include "serving/grpc_server.h"

#include <absl/synchronization/mutex.h>
#include <arpa/inet.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>

#include "serving/errors.h"
#include "serving/grpc_message_pool.h"
#include "serving/kserve_grpc_protocol.h"
#include "serving/kserve_protocol.h"
#include "serving/kserve_v2_grpc.grpc.pb.h"

namespace grove::serving {
namespace {

using inference::GRPCInferenceService;
using inference::ModelInferRequest;
using inference::ModelInferResponse;

// y = 2 * x for x: f32[rows, 3]. Answers on the submitting thread (its
// on_ready runs before submit_then returns), or holds every request until
// release() when `hold` is set.
class DoublingService : public InferenceService {
 public:
  enum class Mode { kAnswer, kHold, kFull };
  std::atomic<Mode> mode{Mode::kAnswer};

  DoublingService() {
    signature_.inputs.push_back({"x", {3}, runtime::DType::kF32, 12});
    signature_.outputs.push_back({"y", {3}, runtime::DType::kF32, 12});
  }
  std::future<Response> submit(Request request) override {
    return submit_then(std::move(request), nullptr);
  }
  std::future<Response> submit_then(Request request, std::function<void()> ready) override {
    if (mode == Mode::kFull) throw QueueFullError("server queue is full (1 requests wait)");
    Held held;
    held.request = std::move(request);
    held.on_ready = std::move(ready);
    std::future<Response> future = held.promise.get_future();
    if (mode == Mode::kHold) {
      std::lock_guard<std::mutex> lock(mutex_);
      held_.push_back(std::move(held));
    } else {
      answer(held);
    }
    return future;
  }
  // Counted, then through the default (a future): which way a front submits.
  std::atomic<int> submitted_with_on_answer{0};
  void submit_then_answer(CheckedRequest request, OnAnswer on_answer) override {
    ++submitted_with_on_answer;
    InferenceService::submit_then_answer(std::move(request), std::move(on_answer));
  }
  // Answers every held request; returns how many.
  size_t release() {
    std::vector<Held> held;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      held.swap(held_);
    }
    for (Held& one : held) answer(one);
    return held.size();
  }
  size_t held() {
    std::lock_guard<std::mutex> lock(mutex_);
    return held_.size();
  }
  const ModelSignature& signature() const override { return signature_; }
  int64_t max_batch() const override { return 4; }
  ServerStats stats() const override { return {}; }
  size_t queue_size() const override { return 0; }
  std::vector<WorkerSnapshot> backend_snapshots() const override { return {}; }

 private:
  struct Held {
    Request request;
    std::promise<Response> promise;
    std::function<void()> on_ready;
  };
  static void answer(Held& held) {
    std::vector<float> values = held.request.inputs.at(0).values<float>();
    for (float& value : values) value *= 2;
    Response response;
    response.outputs.push_back(HostRows::from_values(values, held.request.inputs[0].shape));
    held.promise.set_value(std::move(response));
    if (held.on_ready) held.on_ready();
  }

  ModelSignature signature_;
  std::mutex mutex_;
  std::vector<Held> held_;
};

// A GrpcServer on a free loopback port, serve() on its own thread, and a stub.
struct Fixture {
  explicit Fixture(size_t max_message_bytes = size_t{1} << 20)
      : server(service, {.model_name = "m", .port = 0, .max_message_bytes = max_message_bytes}) {
    serving = std::thread([this] { report = server.serve(); });
    channel = grpc::CreateChannel(str_cat("127.0.0.1:", server.port()),
                                  grpc::InsecureChannelCredentials());
    stub = GRPCInferenceService::NewStub(channel);
  }
  ~Fixture() {
    server.stop();
    service.release();
    serving.join();
  }
  grpc::Status infer(const ModelInferRequest& request, ModelInferResponse* response) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
    return stub->ModelInfer(&context, request, response);
  }

  DoublingService service;
  GrpcServer server;
  GrpcServeReport report;
  std::thread serving;
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<GRPCInferenceService::Stub> stub;
};

// rows x 3 random floats (seeded) as a raw FP32 request for input "x".
ModelInferRequest raw_request(int64_t rows, std::vector<float>* values, uint64_t seed = 35) {
  std::mt19937 rng(static_cast<uint32_t>(seed));
  std::uniform_real_distribution<float> uniform(-4.f, 4.f);
  values->resize(static_cast<size_t>(rows) * 3);
  for (float& value : *values) value = uniform(rng);
  ModelInferRequest request;
  request.set_model_name("m");
  request.set_id("seven");
  auto* input = request.add_inputs();
  input->set_name("x");
  input->set_datatype("FP32");
  input->add_shape(rows);
  input->add_shape(3);
  request.add_raw_input_contents(reinterpret_cast<const char*>(values->data()),
                                 values->size() * sizeof(float));
  return request;
}

std::vector<float> floats_of(const std::string& bytes) {
  std::vector<float> values(bytes.size() / sizeof(float));
  std::memcpy(values.data(), bytes.data(), values.size() * sizeof(float));
  return values;
}

TEST(GrpcServer, HealthAndMetadataAnswer) {
  Fixture f;
  {
    grpc::ClientContext context;
    inference::ServerLiveResponse live;
    ASSERT_TRUE(f.stub->ServerLive(&context, {}, &live).ok());
    EXPECT_TRUE(live.live());
  }
  {
    grpc::ClientContext context;
    inference::ServerReadyResponse ready;
    ASSERT_TRUE(f.stub->ServerReady(&context, {}, &ready).ok());
    EXPECT_TRUE(ready.ready());
  }
  {
    grpc::ClientContext context;
    inference::ModelReadyRequest request;
    request.set_name("m");
    inference::ModelReadyResponse ready;
    ASSERT_TRUE(f.stub->ModelReady(&context, request, &ready).ok());
    EXPECT_TRUE(ready.ready());
  }
  {
    grpc::ClientContext context;
    inference::ServerMetadataResponse metadata;
    ASSERT_TRUE(f.stub->ServerMetadata(&context, {}, &metadata).ok());
    EXPECT_EQ(metadata.name(), "grove");
  }
  {
    grpc::ClientContext context;
    inference::ModelMetadataRequest request;
    request.set_name("m");
    inference::ModelMetadataResponse metadata;
    ASSERT_TRUE(f.stub->ModelMetadata(&context, request, &metadata).ok());
    EXPECT_EQ(metadata.name(), "m");
    ASSERT_EQ(metadata.inputs_size(), 1);
    EXPECT_EQ(metadata.inputs(0).name(), "x");
    EXPECT_EQ(metadata.inputs(0).datatype(), "FP32");
    EXPECT_EQ(
        std::vector<int64_t>(metadata.inputs(0).shape().begin(), metadata.inputs(0).shape().end()),
        (std::vector<int64_t>{-1, 3}));
    ASSERT_EQ(metadata.outputs_size(), 1);
    EXPECT_EQ(metadata.outputs(0).name(), "y");
  }
  {
    grpc::ClientContext context;
    inference::ModelMetadataRequest request;
    request.set_name("other");
    inference::ModelMetadataResponse metadata;
    grpc::Status status = f.stub->ModelMetadata(&context, request, &metadata);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::NOT_FOUND);
    EXPECT_EQ(status.error_message(), "no model 'other'; this server serves 'm'");
  }
}

TEST(GrpcServer, RawAndTypedContentsGetTheSameRawAnswer) {
  Fixture f;
  std::vector<float> values;
  ModelInferRequest raw = raw_request(3, &values);
  ModelInferResponse raw_answer;
  grpc::Status status = f.infer(raw, &raw_answer);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(raw_answer.model_name(), "m");
  EXPECT_EQ(raw_answer.id(), "seven");
  ASSERT_EQ(raw_answer.outputs_size(), 1);
  EXPECT_EQ(raw_answer.outputs(0).name(), "y");
  EXPECT_EQ(raw_answer.outputs(0).datatype(), "FP32");
  EXPECT_EQ(raw_answer.outputs(0).shape_size(), 2);
  EXPECT_EQ(raw_answer.outputs(0).shape(0), 3);
  ASSERT_EQ(raw_answer.raw_output_contents_size(), 1);
  std::vector<float> doubled = values;
  for (float& value : doubled) value *= 2;
  EXPECT_EQ(floats_of(raw_answer.raw_output_contents(0)), doubled);

  ModelInferRequest typed = raw;
  typed.clear_raw_input_contents();
  for (float value : values) typed.mutable_inputs(0)->mutable_contents()->add_fp32_contents(value);
  ModelInferResponse typed_answer;
  status = f.infer(typed, &typed_answer);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(typed_answer.raw_output_contents(0), raw_answer.raw_output_contents(0));
}

// Calls one after another, each with its own rows, id and typed or raw
// contents, get their own answers: nothing of an earlier call's messages
// shows through the reused ones (Note [gRPC messages reused]).
TEST(GrpcServer, CallsInTurnGetTheirOwnAnswersFromReusedMessages) {
  Fixture f;
  for (int call = 0; call < 60; ++call) {
    std::vector<float> values;
    ModelInferRequest request = raw_request(1 + call % 4, &values, 100 + call);
    if (call % 3 == 0) request.clear_id();
    if (call % 3 == 1) request.set_id(std::string(static_cast<size_t>(1 + call), 'a' + call % 26));
    if (call % 5 == 2) {  // typed contents instead of raw bytes
      request.clear_raw_input_contents();
      for (float value : values) {
        request.mutable_inputs(0)->mutable_contents()->add_fp32_contents(value);
      }
    }
    if (call % 7 == 3) request.add_outputs()->set_name("y");
    ModelInferResponse answer;
    grpc::Status status = f.infer(request, &answer);
    ASSERT_TRUE(status.ok()) << "call " << call << ": " << status.error_message();
    EXPECT_EQ(answer.id(), request.id()) << "call " << call;
    ASSERT_EQ(answer.outputs_size(), 1) << "call " << call;
    ASSERT_EQ(answer.raw_output_contents_size(), 1) << "call " << call;
    EXPECT_EQ(answer.outputs(0).shape(0), 1 + call % 4) << "call " << call;
    std::vector<float> doubled = values;
    for (float& value : doubled) value *= 2;
    EXPECT_EQ(floats_of(answer.raw_output_contents(0)), doubled) << "call " << call;
  }
}

// `calls` calls (first tag `first_tag`) that the service holds, then releases
// together: each is answered with its own rows doubled; `how` names the path.
void expect_a_held_burst_answered(Fixture& f, int calls, int first_tag, const char* how) {
  f.service.mode = DoublingService::Mode::kHold;
  std::vector<std::vector<float>> values(calls);
  std::vector<grpc::Status> statuses(calls);
  std::vector<ModelInferResponse> answers(calls);
  std::vector<std::thread> callers;
  for (int c = 0; c < calls; ++c) {
    callers.emplace_back([&, c] {
      const ModelInferRequest request = raw_request(1 + c % 3, &values[c], first_tag + c);
      statuses[c] = f.infer(request, &answers[c]);
    });
  }
  const auto count = static_cast<size_t>(calls);
  while (f.service.held() < count) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  EXPECT_EQ(f.service.release(), count);
  for (std::thread& caller : callers) caller.join();
  for (int c = 0; c < calls; ++c) {
    ASSERT_TRUE(statuses[c].ok()) << c << ": " << statuses[c].error_message() << " (" << how << ")";
    std::vector<float> doubled = values[c];
    for (float& value : doubled) value *= 2;
    EXPECT_EQ(floats_of(answers[c].raw_output_contents(0)), doubled)
        << "call " << c << " (" << how << ")";
  }
}

// Note [gRPC answers without a future]: ModelInfer submits with an OnAnswer
// unless GROVE_GRPC_ANSWER_FUTURES=1, and either way each call, answered off
// the submitting thread (held, then released together), gets its own rows.
TEST(GrpcServer, AnswersThroughFuturesOrNot) {
  const char* saved = std::getenv("GROVE_GRPC_ANSWER_FUTURES");
  const std::string kept = saved != nullptr ? saved : "";
  for (const bool futures : {false, true}) {
    if (futures) {
      ::setenv("GROVE_GRPC_ANSWER_FUTURES", "1", 1);
    } else {
      ::unsetenv("GROVE_GRPC_ANSWER_FUTURES");
    }
    Fixture f;
    constexpr int kCalls = 6;
    expect_a_held_burst_answered(f, kCalls, 500, futures ? "futures" : "OnAnswer");
    EXPECT_EQ(f.service.submitted_with_on_answer.load(), futures ? 0 : kCalls)
        << (futures ? "with" : "without") << " GROVE_GRPC_ANSWER_FUTURES=1";
  }
  if (saved != nullptr) {
    ::setenv("GROVE_GRPC_ANSWER_FUTURES", kept.c_str(), 1);
  } else {
    ::unsetenv("GROVE_GRPC_ANSWER_FUTURES");
  }
}

// Note [gRPC answers on their completion queue]: calls received on a
// completion queue are answered by that queue's thread unless
// GROVE_GRPC_ANSWER_POOL=1 (through the answer pool); either way calls
// answered in one burst (held, then released together) each get their own
// rows, and the server stops cleanly after them. (Under
// GROVE_GRPC_COMPLETION_QUEUES=0 both runs take the callback API.)
TEST(GrpcServer, AnswersOnTheirQueueOrThroughThePool) {
  const char* saved = std::getenv("GROVE_GRPC_ANSWER_POOL");
  const std::string kept = saved != nullptr ? saved : "";
  for (const bool pool : {false, true}) {
    if (pool) {
      ::setenv("GROVE_GRPC_ANSWER_POOL", "1", 1);
    } else {
      ::unsetenv("GROVE_GRPC_ANSWER_POOL");
    }
    Fixture f;
    expect_a_held_burst_answered(f, 12, 700, pool ? "answer pool" : "queue threads");
    // A second burst after the first: the inboxes' alarms are set again.
    std::vector<float> again;
    ModelInferResponse answer;
    f.service.mode = DoublingService::Mode::kAnswer;
    ASSERT_TRUE(f.infer(raw_request(2, &again, 799), &answer).ok());
    for (float& value : again) value *= 2;
    EXPECT_EQ(floats_of(answer.raw_output_contents(0)), again);
  }
  if (saved != nullptr) {
    ::setenv("GROVE_GRPC_ANSWER_POOL", kept.c_str(), 1);
  } else {
    ::unsetenv("GROVE_GRPC_ANSWER_POOL");
  }
}

TEST(InferMessagePool, ReusesClearedPairsAndFreesLargeOnes) {
  InferMessagePool pool(/*max_kept=*/2, /*max_kept_bytes=*/1024);
  InferMessagePool::Holder* first = pool.AllocateMessages();
  first->request()->set_model_name("m");
  first->request()->add_raw_input_contents(std::string(100, 'x'));
  first->response()->set_id("answer");
  first->Release();
  EXPECT_EQ(pool.kept(), 1u);
  InferMessagePool::Holder* again = pool.AllocateMessages();
  EXPECT_EQ(again, first) << "a released pair is handed out again";
  EXPECT_EQ(pool.allocated(), 1u);
  EXPECT_EQ(again->request()->ByteSizeLong(), 0u) << "handed out cleared";
  EXPECT_EQ(again->response()->ByteSizeLong(), 0u);
  // A pair that grew past max_kept_bytes is freed, not kept.
  again->request()->add_raw_input_contents(std::string(4096, 'y'));
  again->Release();
  EXPECT_EQ(pool.kept(), 0u);
  // At most max_kept pairs wait.
  std::vector<InferMessagePool::Holder*> held;
  for (int i = 0; i < 3; ++i) held.push_back(pool.AllocateMessages());
  EXPECT_EQ(pool.allocated(), 4u);
  for (InferMessagePool::Holder* holder : held) holder->Release();
  EXPECT_EQ(pool.kept(), 2u);
}

// The refusal for `request`, which must not succeed.
grpc::Status refusal(Fixture& f, const ModelInferRequest& request) {
  ModelInferResponse response;
  grpc::Status status = f.infer(request, &response);
  EXPECT_FALSE(status.ok());
  return status;
}

TEST(GrpcServer, MalformedRequestsGetTheirStatusAndAMessageNamingTheField) {
  Fixture f(/*max_message_bytes=*/4096);
  std::vector<float> values;
  const ModelInferRequest good = raw_request(2, &values);

  ModelInferRequest wrong_dtype = good;
  wrong_dtype.mutable_inputs(0)->set_datatype("INT64");
  grpc::Status status = refusal(f, wrong_dtype);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(status.error_message(), "inputs[0] ('x').datatype: expected FP32, found INT64");

  ModelInferRequest wrong_shape = good;
  wrong_shape.mutable_inputs(0)->set_shape(1, 4);
  status = refusal(f, wrong_shape);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(status.error_message(), "inputs[0] ('x').shape: expected [rows, 3], found [2,4]");

  ModelInferRequest too_many_rows = good;
  too_many_rows.mutable_inputs(0)->set_shape(0, 5);
  status = refusal(f, too_many_rows);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(status.error_message().find("5 rows is outside [1, 4]"), std::string::npos);

  ModelInferRequest long_raw = good;
  long_raw.mutable_raw_input_contents(0)->append(8, '\0');
  status = refusal(f, long_raw);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(status.error_message(),
            "raw_input_contents[0] (inputs[0] ('x')): 32 bytes, but shape [2, 3] of FP32 holds "
            "24");

  ModelInferRequest wrong_typed = good;
  wrong_typed.clear_raw_input_contents();
  for (int i = 0; i < 6; ++i)
    wrong_typed.mutable_inputs(0)->mutable_contents()->add_int64_contents(i);
  status = refusal(f, wrong_typed);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(status.error_message(),
            "inputs[0] ('x').contents: FP32 values go in fp32_contents, found int64_contents");

  ModelInferRequest unknown_input = good;
  unknown_input.mutable_inputs(0)->set_name("z");
  status = refusal(f, unknown_input);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(status.error_message(), "inputs[0].name: the model has no input 'z'");

  ModelInferRequest unknown_output = good;
  unknown_output.add_outputs()->set_name("w");
  status = refusal(f, unknown_output);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(status.error_message(), "outputs[0].name: the model has no output 'w'");

  ModelInferRequest unknown_model = good;
  unknown_model.set_model_name("other");
  status = refusal(f, unknown_model);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(status.error_message(), "no model 'other'; this server serves 'm'");

  ModelInferRequest unknown_version = good;
  unknown_version.set_model_version("2");
  EXPECT_EQ(refusal(f, unknown_version).error_code(), grpc::StatusCode::NOT_FOUND);

  // Over max_message_bytes: refused by gRPC before grove reads it.
  std::vector<float> many;
  ModelInferRequest oversized = raw_request(4, &many);
  oversized.set_id(std::string(5000, 'i'));
  status = refusal(f, oversized);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);

  f.service.mode = DoublingService::Mode::kFull;
  status = refusal(f, good);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_NE(status.error_message().find("queue is full"), std::string::npos);

  // Still serving after every refusal.
  f.service.mode = DoublingService::Mode::kAnswer;
  ModelInferResponse answer;
  EXPECT_TRUE(f.infer(good, &answer).ok());
  const std::string metrics = f.server.metrics_text();
  EXPECT_NE(metrics.find("grove_grpc_responses_total{code=\"INVALID_ARGUMENT\"} 7"),
            std::string::npos)
      << metrics;
  EXPECT_NE(metrics.find("grove_grpc_responses_total{code=\"NOT_FOUND\"} 2"), std::string::npos);
  EXPECT_NE(metrics.find("grove_grpc_responses_total{code=\"UNAVAILABLE\"} 1"), std::string::npos);
  EXPECT_NE(metrics.find("grove_grpc_responses_total{code=\"OK\"} 1"), std::string::npos);
  EXPECT_NE(metrics.find("grove_grpc_request_latency_seconds_count 1"), std::string::npos);
}

TEST(GrpcServer, StopAnswersCallsInFlightAndRefusesNewOnes) {
  Fixture f;
  f.service.mode = DoublingService::Mode::kHold;
  std::vector<float> values;
  const ModelInferRequest request = raw_request(1, &values);
  constexpr int kCalls = 8;
  std::vector<grpc::Status> statuses(kCalls);
  std::vector<ModelInferResponse> answers(kCalls);
  std::vector<std::thread> callers;
  for (int c = 0; c < kCalls; ++c) {
    callers.emplace_back([&, c] { statuses[c] = f.infer(request, &answers[c]); });
  }
  while (f.service.held() < kCalls) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  f.server.stop();
  {
    grpc::ClientContext context;
    inference::ServerReadyResponse ready;
    grpc::Status status = f.stub->ServerReady(&context, {}, &ready);
    EXPECT_TRUE(!status.ok() || !ready.ready()) << "ready after stop()";
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_EQ(f.service.release(), size_t{kCalls});
  for (std::thread& caller : callers) caller.join();
  for (int c = 0; c < kCalls; ++c) {
    ASSERT_TRUE(statuses[c].ok()) << c << ": " << statuses[c].error_message();
    EXPECT_EQ(floats_of(answers[c].raw_output_contents(0)),
              std::vector<float>({values[0] * 2, values[1] * 2, values[2] * 2}));
  }
  f.serving.join();
  f.serving = std::thread([] {});  // the fixture joins it again
  EXPECT_GE(f.report.answers, uint64_t{kCalls});
  EXPECT_GE(f.report.answers_after_stop, uint64_t{kCalls});
  ModelInferResponse late;
  grpc::Status status = f.infer(request, &late);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAVAILABLE) << status.error_message();
}

// Seconds until the server closes a connection to `port` that sends
// `trickle` one byte per 100 ms (or nothing), and never completes gRPC's
// handshake; -1 when still open after 10 s.
double seconds_until_closed(int port, const std::string& trickle) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
  const auto start = std::chrono::steady_clock::now();
  double closed_after = -1;
  for (size_t sent = 0; std::chrono::steady_clock::now() - start < std::chrono::seconds(10);) {
    if (sent < trickle.size()) ::send(fd, &trickle[sent++], 1, MSG_NOSIGNAL);
    pollfd poll_fd{fd, POLLIN, 0};
    if (::poll(&poll_fd, 1, 100) > 0) {
      char sink[256];
      if (::recv(fd, sink, sizeof(sink), MSG_DONTWAIT) <= 0) {
        closed_after =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        break;
      }
    }
  }
  ::close(fd);
  return closed_after;
}

// Note [gRPC connection deadlines]: a client that sends nothing, or trickles
// the HTTP/2 preface, loses its connection at the handshake deadline.
TEST(GrpcServer, ConnectionsThatNeverHandshakeAreClosed) {
  DoublingService service;
  GrpcServer server(service, {.model_name = "m", .port = 0, .handshake_timeout_ms = 500});
  std::thread serving([&] { server.serve(); });
  const double silent = seconds_until_closed(server.port(), "");
  const double trickling = seconds_until_closed(server.port(), "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n");
  EXPECT_GE(silent, 0.3);
  EXPECT_LT(silent, 5.0) << "a silent connection stayed open";
  EXPECT_GE(trickling, 0.3);
  EXPECT_LT(trickling, 5.0) << "a trickling connection stayed open";
  server.stop();
  serving.join();
}

// Threads of this process named `name` (/proc/self/task/*/comm).
int threads_named(const std::string& name) {
  int count = 0;
  for (const auto& task : std::filesystem::directory_iterator("/proc/self/task")) {
    std::ifstream comm(task.path() / "comm");
    std::string line;
    if (std::getline(comm, line) && line == name) ++count;
  }
  return count;
}

// Note [gRPC infer on completion queues]: with completion_queues N, ModelInfer
// is answered through N queues, each polled by a thread of its own, and
// calls in flight at once on several channels each get their own answer.
TEST(GrpcServer, CompletionQueuesAnswerCallsFromThreadsOfTheirOwn) {
  DoublingService service;
  const int before = threads_named("grpc-queue");
  GrpcServer server(service, {.model_name = "m", .port = 0, .completion_queues = 3});
  std::thread serving([&] { server.serve(); });
  // Each names itself once started.
  const auto named_by = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (threads_named("grpc-queue") - before < 3 && std::chrono::steady_clock::now() < named_by) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_EQ(threads_named("grpc-queue") - before, 3);
  constexpr int kCallers = 6;
  std::vector<std::thread> callers;
  std::atomic<int> right{0};
  for (int c = 0; c < kCallers; ++c) {
    callers.emplace_back([&, c] {
      auto stub = GRPCInferenceService::NewStub(grpc::CreateChannel(
          str_cat("127.0.0.1:", server.port()), grpc::InsecureChannelCredentials()));
      for (int call = 0; call < 40; ++call) {
        std::vector<float> values;
        const ModelInferRequest request = raw_request(1 + call % 4, &values, 1000 * c + call);
        grpc::ClientContext context;
        context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
        ModelInferResponse answer;
        if (!stub->ModelInfer(&context, request, &answer).ok()) continue;
        for (float& value : values) value *= 2;
        if (answer.raw_output_contents_size() == 1 &&
            floats_of(answer.raw_output_contents(0)) == values) {
          ++right;
        }
      }
    });
  }
  for (std::thread& caller : callers) caller.join();
  EXPECT_EQ(right.load(), kCallers * 40);
  server.stop();
  serving.join();
  EXPECT_EQ(threads_named("grpc-queue"), before) << "a queue's thread outlived serve()";
}

// Without a count in the config, the queues are GROVE_GRPC_COMPLETION_QUEUES's
// (0 in grpc_server_callback_test: no queue thread) or a quarter of the cores, 2 to 16.
TEST(GrpcServer, QueueCountDefaultsToTheEnvironmentOrAQuarterOfTheCores) {
  const char* from_environment = std::getenv("GROVE_GRPC_COMPLETION_QUEUES");
  const int expected =
      from_environment
          ? std::atoi(from_environment)
          : static_cast<int>(std::clamp(std::thread::hardware_concurrency() / 4, 2u, 16u));
  DoublingService service;
  const int before = threads_named("grpc-queue");
  GrpcServer server(service, {.model_name = "m", .port = 0});
  std::thread serving([&] { server.serve(); });
  const auto named_by = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (threads_named("grpc-queue") - before < expected &&
         std::chrono::steady_clock::now() < named_by) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(20));  // none beyond them
  EXPECT_EQ(threads_named("grpc-queue") - before, expected);
  server.stop();
  serving.join();
}

// A GROVE_GRPC_COMPLETION_QUEUES that is not a count is refused by name.
TEST(GrpcServer, CompletionQueueCountFromTheEnvironmentIsChecked) {
  const char* saved = std::getenv("GROVE_GRPC_COMPLETION_QUEUES");
  const std::string kept = saved ? saved : "";
  ::setenv("GROVE_GRPC_COMPLETION_QUEUES", "many", 1);
  DoublingService service;
  try {
    GrpcServer server(service, {.model_name = "m", .port = 0});
    ADD_FAILURE() << "GROVE_GRPC_COMPLETION_QUEUES=many was accepted";
  } catch (const ConfigError& error) {
    EXPECT_NE(std::string(error.what()).find("GROVE_GRPC_COMPLETION_QUEUES='many'"),
              std::string::npos)
        << error.what();
  }
  if (saved) {
    ::setenv("GROVE_GRPC_COMPLETION_QUEUES", kept.c_str(), 1);
  } else {
    ::unsetenv("GROVE_GRPC_COMPLETION_QUEUES");
  }
}

// Note [One set of request checks]: a tensor refused over HTTP (JSON) and
// over gRPC gets the same message.
// Note [gRPC without lock-order checks]: Debian's Abseil checks lock order on
// every absl::Mutex lock and aborts on an inversion; once a GrpcServer is
// built the check is off, so two locks taken in both orders pass.
TEST(GrpcServer, StartsWithAbseilLockChecksOff) {
  DoublingService service;
  GrpcServer server(service, {.model_name = "m", .port = 0});
  absl::Mutex first, second;
  first.Lock();
  second.Lock();
  second.Unlock();
  first.Unlock();
  second.Lock();
  first.Lock();  // the inverse order: Abseil's check aborts the process here when on
  first.Unlock();
  second.Unlock();
  server.stop();
}

TEST(KserveGrpcProtocol, RefusalsMatchTheJsonForm) {
  DoublingService service;
  struct Case {
    std::string json_tensor;
    std::function<void(ModelInferRequest&)> mutate;
  };
  const std::vector<Case> cases = {
      {R"({"name":"x","datatype":"INT32","shape":[1,3],"data":[1,2,3]})",
       [](ModelInferRequest& r) { r.mutable_inputs(0)->set_datatype("INT32"); }},
      {R"({"name":"x","datatype":"FP32","shape":[1,3,1],"data":[1,2,3]})",
       [](ModelInferRequest& r) { r.mutable_inputs(0)->add_shape(1); }},
      {R"({"name":"x","datatype":"FP32","shape":[9,3],"data":[1,2,3]})",
       [](ModelInferRequest& r) { r.mutable_inputs(0)->set_shape(0, 9); }},
      {R"({"name":"q","datatype":"FP32","shape":[1,3],"data":[1,2,3]})",
       [](ModelInferRequest& r) { r.mutable_inputs(0)->set_name("q"); }},
  };
  for (const Case& c : cases) {
    std::string json_message, grpc_message;
    try {
      parse_infer_request(R"({"inputs":[)" + c.json_tensor + "]}", service.signature(), 4);
    } catch (const ProtocolError& error) {
      json_message = error.what();
    }
    std::vector<float> values;
    ModelInferRequest request = raw_request(1, &values);
    c.mutate(request);
    try {
      parse_grpc_infer_request(request, service.signature(), 4);
    } catch (const ProtocolError& error) {
      grpc_message = error.what();
    }
    EXPECT_FALSE(json_message.empty()) << c.json_tensor;
    EXPECT_EQ(grpc_message, json_message) << c.json_tensor;
  }
}

// Note [gRPC tensor contents]: each datatype's typed field, raw bytes (BOOL
// bytes other than 0 read as 1), and the datatypes that have no typed field.
TEST(KserveGrpcProtocol, EachDatatypeReadsItsTypedFieldOrRawBytes) {
  ModelSignature signature;
  signature.inputs.push_back({"ids", {2}, runtime::DType::kI64, 16});
  signature.inputs.push_back({"mask", {2}, runtime::DType::kBool, 2});
  signature.inputs.push_back({"pos", {2}, runtime::DType::kI32, 8});
  signature.inputs.push_back({"w", {2}, runtime::DType::kF64, 16});
  signature.outputs.push_back({"y", {2}, runtime::DType::kF32, 8});
  ModelInferRequest typed;
  auto add = [&](const char* name, const char* datatype) {
    auto* input = typed.add_inputs();
    input->set_name(name);
    input->set_datatype(datatype);
    input->add_shape(1);
    input->add_shape(2);
    return input->mutable_contents();
  };
  // Listed in another order than the model's: matched by name.
  {
    auto* contents = add("w", "FP64");
    contents->add_fp64_contents(0.25);
    contents->add_fp64_contents(-1e300);
  }
  {
    auto* contents = add("ids", "INT64");
    contents->add_int64_contents(int64_t{1} << 40);
    contents->add_int64_contents(-3);
  }
  {
    auto* contents = add("mask", "BOOL");
    contents->add_bool_contents(true);
    contents->add_bool_contents(false);
  }
  {
    auto* contents = add("pos", "INT32");
    contents->add_int_contents(7);
    contents->add_int_contents(-8);
  }
  InferRequest parsed = parse_grpc_infer_request(typed, signature, 4);
  EXPECT_EQ(parsed.request.inputs()[0].values<int64_t>(),
            (std::vector<int64_t>{int64_t{1} << 40, -3}));
  EXPECT_EQ(parsed.request.inputs()[1].bytes, (RowBytes{1, 0}));
  EXPECT_EQ(parsed.request.inputs()[2].values<int32_t>(), (std::vector<int32_t>{7, -8}));
  // Note [Request bytes copied once]: decoded straight into pinned rows.
  for (const HostRows& rows : parsed.request.inputs()) {
    EXPECT_TRUE(PinnedRowPool::contains(rows.bytes.data())) << rows.str();
  }
  EXPECT_EQ(parsed.request.inputs()[3].values<double>(), (std::vector<double>{0.25, -1e300}));

  ModelInferRequest raw = typed;
  const std::vector<std::string> bytes = {std::string("\0\0\0\0\0\0\xd0\x3f\0\0\0\0\0\0\0\0", 16),
                                          std::string(16, '\x01'), std::string("\x05\x00", 2),
                                          std::string(8, '\x02')};
  for (int i = 0; i < raw.inputs_size(); ++i) {
    raw.mutable_inputs(i)->clear_contents();
    raw.add_raw_input_contents(bytes[static_cast<size_t>(i)]);
  }
  parsed = parse_grpc_infer_request(raw, signature, 4);
  EXPECT_EQ(parsed.request.inputs()[1].bytes, (RowBytes{1, 0}));  // 5 reads as true
  for (const HostRows& rows : parsed.request.inputs()) {
    EXPECT_TRUE(PinnedRowPool::contains(rows.bytes.data())) << rows.str();
  }
  EXPECT_EQ(parsed.request.inputs()[2].values<int32_t>(),
            (std::vector<int32_t>{0x02020202, 0x02020202}));
  EXPECT_EQ(parsed.request.inputs()[3].values<double>()[0], 0.25);

  ModelSignature half;
  half.inputs.push_back({"h", {2}, runtime::DType::kBF16, 4});
  half.outputs.push_back({"y", {2}, runtime::DType::kF32, 8});
  ModelInferRequest typed_half;
  auto* input = typed_half.add_inputs();
  input->set_name("h");
  input->set_datatype("BF16");
  input->add_shape(1);
  input->add_shape(2);
  input->mutable_contents()->add_fp32_contents(1.f);
  try {
    parse_grpc_infer_request(typed_half, half, 4);
    ADD_FAILURE() << "BF16 in typed contents was accepted";
  } catch (const ProtocolError& error) {
    EXPECT_STREQ(error.what(),
                 "inputs[0] ('h').contents: BF16 has no typed contents field; give its bytes in "
                 "raw_input_contents");
  }
  ModelInferRequest mixed = raw;
  mixed.mutable_inputs(2)->mutable_contents()->add_int_contents(1);
  try {
    parse_grpc_infer_request(mixed, signature, 4);
    ADD_FAILURE() << "raw and typed contents together were accepted";
  } catch (const ProtocolError& error) {
    EXPECT_NE(std::string(error.what()).find("not both"), std::string::npos) << error.what();
  }
}

}  // namespace
}  // namespace grove::serving
