#include "serving/grpc_server.h"

#include <absl/synchronization/mutex.h>
#include <grpc/grpc.h>
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <boost/asio/post.hpp>
#include <boost/asio/thread_pool.hpp>
#include <chrono>
#include <climits>
#include <condition_variable>
#include <map>
#include <mutex>
#include <thread>

#include "serving/errors.h"
#include "serving/grpc_message_pool.h"
#include "serving/kserve_grpc_protocol.h"
#include "serving/kserve_v2_grpc.grpc.pb.h"
#include "serving/metrics.h"

namespace grove::serving {
namespace {

const char* status_code_name(grpc::StatusCode code) {
  switch (code) {
    case grpc::StatusCode::OK:
      return "OK";
    case grpc::StatusCode::CANCELLED:
      return "CANCELLED";
    case grpc::StatusCode::INVALID_ARGUMENT:
      return "INVALID_ARGUMENT";
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      return "DEADLINE_EXCEEDED";
    case grpc::StatusCode::NOT_FOUND:
      return "NOT_FOUND";
    case grpc::StatusCode::RESOURCE_EXHAUSTED:
      return "RESOURCE_EXHAUSTED";
    case grpc::StatusCode::UNAVAILABLE:
      return "UNAVAILABLE";
    case grpc::StatusCode::INTERNAL:
      return "INTERNAL";
    default:
      return "OTHER";
  }
}

// "host:port" as gRPC reads an address (an IPv6 address in brackets).
std::string grpc_address(const std::string& host, int port) {
  if (host.find(':') != std::string::npos && host.front() != '[') {
    return str_cat("[", host, "]:", port);
  }
  return str_cat(host, ":", port);
}

}  // namespace

struct GrpcServer::Impl final : inference::GRPCInferenceService::CallbackService {
  Impl(InferenceService& service, GrpcConfig config)
      : service(service),
        config(std::move(config)),
        answer_pool(static_cast<size_t>(
            this->config.answer_threads > 0
                ? this->config.answer_threads
                : std::max(2, static_cast<int>(std::thread::hardware_concurrency() / 4)))) {
    SetMessageAllocatorFor_ModelInfer(&messages);  // Note [gRPC messages reused]
  }

  // A ModelInfer between submit and its answer.
  struct InferCall {
    grpc::ServerUnaryReactor* reactor = nullptr;
    inference::ModelInferResponse* response = nullptr;
    InferRequest parsed;
    std::future<Response> answer;
    Clock::time_point received;
    // The future assigned and its on_ready called: the later of the two
    // hands the call to answer_pool (on_ready may run before submit returns).
    std::atomic<int> pending{2};
  };

  grpc::ServerUnaryReactor* ServerLive(grpc::CallbackServerContext* context,
                                       const inference::ServerLiveRequest*,
                                       inference::ServerLiveResponse* response) override {
    response->set_live(true);
    return finish(context->DefaultReactor(), grpc::Status::OK);
  }

  grpc::ServerUnaryReactor* ServerReady(grpc::CallbackServerContext* context,
                                        const inference::ServerReadyRequest*,
                                        inference::ServerReadyResponse* response) override {
    response->set_ready(!stopping);
    return finish(context->DefaultReactor(), grpc::Status::OK);
  }

  grpc::ServerUnaryReactor* ModelReady(grpc::CallbackServerContext* context,
                                       const inference::ModelReadyRequest* request,
                                       inference::ModelReadyResponse* response) override {
    grpc::Status known = check_model(request->name(), request->version());
    if (known.ok()) response->set_ready(!stopping);
    return finish(context->DefaultReactor(), known);
  }

  grpc::ServerUnaryReactor* ServerMetadata(grpc::CallbackServerContext* context,
                                           const inference::ServerMetadataRequest*,
                                           inference::ServerMetadataResponse* response) override {
    response->set_name("grove");
    return finish(context->DefaultReactor(), grpc::Status::OK);
  }

  grpc::ServerUnaryReactor* ModelMetadata(grpc::CallbackServerContext* context,
                                          const inference::ModelMetadataRequest* request,
                                          inference::ModelMetadataResponse* response) override {
    grpc::Status known = check_model(request->name(), request->version());
    if (known.ok()) fill_grpc_model_metadata(config.model_name, service.signature(), response);
    return finish(context->DefaultReactor(), known);
  }

  grpc::ServerUnaryReactor* ModelInfer(grpc::CallbackServerContext* context,
                                       const inference::ModelInferRequest* request,
                                       inference::ModelInferResponse* response) override {
    // Note [gRPC status of a refusal].
    grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
    grpc::Status known = check_model(request->model_name(), request->model_version());
    if (!known.ok()) return finish(reactor, known);
    auto call = std::make_shared<InferCall>();
    call->reactor = reactor;
    call->response = response;
    call->received = Clock::now();
    try {
      call->parsed = parse_grpc_infer_request(*request, service.signature(), service.max_batch());
      call->answer =
          service.submit_then(std::move(call->parsed.request), [this, call] { arrive(call); });
    } catch (const ProtocolError& error) {
      return finish(reactor, {grpc::StatusCode::INVALID_ARGUMENT, error.what()});
    } catch (const ShapeError& error) {
      return finish(reactor, {grpc::StatusCode::INVALID_ARGUMENT, error.what()});
    } catch (const DTypeError& error) {
      return finish(reactor, {grpc::StatusCode::INVALID_ARGUMENT, error.what()});
    } catch (const QueueFullError& error) {
      return finish(reactor, {grpc::StatusCode::UNAVAILABLE, error.what()});
    } catch (const ServerClosedError& error) {
      return finish(reactor, {grpc::StatusCode::UNAVAILABLE, error.what()});
    } catch (const std::exception& error) {
      return finish(reactor,
                    {grpc::StatusCode::INTERNAL, str_cat("internal error: ", error.what())});
    }
    arrive(call);
    return reactor;
  }

  grpc::Status check_model(const std::string& name, const std::string& version) const {
    if (name != config.model_name) {
      return {grpc::StatusCode::NOT_FOUND,
              str_cat("no model '", name, "'; this server serves '", config.model_name, "'")};
    }
    if (!version.empty() && version != "1") {
      return {grpc::StatusCode::NOT_FOUND,
              str_cat("model '", name, "' has no version '", version, "'; it has version 1")};
    }
    return grpc::Status::OK;
  }

  void arrive(const std::shared_ptr<InferCall>& call) {
    // On a worker's thread (or this one): hand the answer on, never build it here.
    if (call->pending.fetch_sub(1) == 1) {
      boost::asio::post(answer_pool, [this, call] { answer(*call); });
    }
  }

  void answer(InferCall& call) {
    grpc::Status status = grpc::Status::OK;
    try {
      Response answer = call.answer.get();
      fill_grpc_infer_response(config.model_name, call.parsed, service.signature(), answer,
                               call.response);
      request_latency.observe(std::chrono::duration<double>(Clock::now() - call.received).count());
    } catch (const RequestCancelledError& error) {
      status = {grpc::StatusCode::UNAVAILABLE, error.what()};
    } catch (const std::exception& error) {
      status = {grpc::StatusCode::INTERNAL, str_cat("the batch failed: ", error.what())};
    }
    finish(call.reactor, status);
  }

  grpc::ServerUnaryReactor* finish(grpc::ServerUnaryReactor* reactor, const grpc::Status& status) {
    // Counted without a lock: every gRPC thread answers.
    const auto code = static_cast<size_t>(status.error_code());
    answers[code < answers.size() ? code : answers.size() - 1].fetch_add(1,
                                                                         std::memory_order_relaxed);
    answered.fetch_add(1, std::memory_order_relaxed);
    if (stopping) answered_after_stop.fetch_add(1, std::memory_order_relaxed);
    reactor->Finish(status);
    return reactor;
  }

  // Shuts gRPC down once (Note [Draining gRPC on stop]).
  void shut_down() {
    std::lock_guard<std::mutex> lock(shutdown_mutex);
    if (server == nullptr) return;
    server->Shutdown(std::chrono::system_clock::now() +
                     std::chrono::milliseconds(config.drain_timeout_ms));
    server->Wait();
    answer_pool.join();
    server.reset();
  }

  InferenceService& service;
  const GrpcConfig config;
  // Declared before the server, so destroyed after it (the pool outlives every call).
  InferMessagePool messages;
  boost::asio::thread_pool answer_pool;
  std::unique_ptr<grpc::Server> server;
  int port = 0;
  std::atomic<bool> stopping{false};
  std::mutex stop_mutex;
  std::condition_variable stopped;
  std::mutex shutdown_mutex;
  LatencyHistogram request_latency;
  // By grpc::StatusCode (0-16; the last slot: any other).
  std::array<std::atomic<uint64_t>, 18> answers{};
  std::atomic<uint64_t> answered{0};
  std::atomic<uint64_t> answered_after_stop{0};
};

// Note [gRPC without lock-order checks]
// Debian builds Abseil without NDEBUG, so every absl::Mutex lock in gRPC's
// core ran Abseil's deadlock detection (a lock-order graph updated under a
// global lock): on sim, 4% of serve_http's CPU over gRPC went to
// DeadlockCheck and GraphCycles. grove's gRPC front turns the check off for
// the process (a debugging aid, not a guard: a real cycle would still hang,
// never corrupt). Test: GrpcServer.StartsWithAbseilLockChecksOff
// (tests/serving/grpc_server_test.cc).
GrpcServer::GrpcServer(InferenceService& service, GrpcConfig config)
    : impl_(std::make_unique<Impl>(service, std::move(config))) {
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  const GrpcConfig& c = impl_->config;
  GROVE_CHECK_AS(ConfigError, !c.model_name.empty(), "GrpcServer: model_name is empty");
  GROVE_CHECK_AS(ConfigError, c.port >= 0 && c.port <= 65535, "GrpcServer: port ", c.port,
                 " is outside [0, 65535]");
  GROVE_CHECK_AS(ConfigError, c.max_message_bytes >= 64, "GrpcServer: max_message_bytes ",
                 c.max_message_bytes, " is below 64");
  GROVE_CHECK_AS(ConfigError, c.handshake_timeout_ms > 0 && c.idle_timeout_ms > 0,
                 "GrpcServer: timeouts must be positive");
  grpc::ServerBuilder builder;
  // gRPC would let a second server take the port silently (SO_REUSEPORT).
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  // Note [gRPC connection deadlines].
  builder.AddChannelArgument(GRPC_ARG_SERVER_HANDSHAKE_TIMEOUT_MS, c.handshake_timeout_ms);
  builder.AddChannelArgument(GRPC_ARG_MAX_CONNECTION_IDLE_MS, c.idle_timeout_ms);
  builder.SetMaxReceiveMessageSize(
      static_cast<int>(std::min<size_t>(c.max_message_bytes, INT_MAX)));
  builder.AddListeningPort(grpc_address(c.host, c.port), grpc::InsecureServerCredentials(),
                           &impl_->port);
  builder.RegisterService(impl_.get());
  impl_->server = builder.BuildAndStart();
  GROVE_CHECK(impl_->server != nullptr && impl_->port != 0, "cannot serve gRPC on ", c.host, ":",
              c.port,
              " (in use, or not an address of this machine); choose another --grpc-port "
              "or --host");
}

GrpcServer::~GrpcServer() {
  stop();
  impl_->shut_down();
}

int GrpcServer::port() const { return impl_->port; }

GrpcServeReport GrpcServer::serve() {
  Impl& impl = *impl_;
  {
    std::unique_lock<std::mutex> lock(impl.stop_mutex);
    impl.stopped.wait(lock, [&] { return impl.stopping.load(); });
  }
  impl.shut_down();
  return {impl.answered.load(), impl.answered_after_stop.load()};
}

void GrpcServer::stop() {
  std::lock_guard<std::mutex> lock(impl_->stop_mutex);
  impl_->stopping = true;
  impl_->stopped.notify_all();
}

std::string GrpcServer::metrics_text() const {
  std::string out =
      "# HELP grove_grpc_responses_total gRPC answers by status code.\n"
      "# TYPE grove_grpc_responses_total counter\n";
  std::map<std::string, uint64_t> by_name;  // codes without a name of their own add up
  for (size_t code = 0; code < impl_->answers.size(); ++code) {
    const uint64_t count = impl_->answers[code].load(std::memory_order_relaxed);
    if (count > 0) by_name[status_code_name(static_cast<grpc::StatusCode>(code))] += count;
  }
  for (const auto& [name, count] : by_name) {
    out += str_cat("grove_grpc_responses_total{code=\"", name, "\"} ", count, "\n");
  }
  impl_->request_latency.write(out, "grove_grpc_request_latency_seconds",
                               "Time from a ModelInfer call's arrival to its answer.");
  return out;
}

}  // namespace grove::serving
