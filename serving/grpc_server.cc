#include "serving/grpc_server.h"

#include <absl/synchronization/mutex.h>
#include <grpc/grpc.h>
#include <grpcpp/alarm.h>
#include <grpcpp/grpcpp.h>
#include <pthread.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <boost/asio/post.hpp>
#include <boost/asio/thread_pool.hpp>
#include <chrono>
#include <climits>
#include <condition_variable>
#include <cstdlib>
#include <map>
#include <mutex>
#include <optional>
#include <string_view>
#include <thread>
#include <vector>

#include "runtime/environment.h"
#include "serving/errors.h"
#include "serving/grpc_message_pool.h"
#include "serving/kserve_grpc_protocol.h"
#include "serving/kserve_v2_grpc.grpc.pb.h"
#include "serving/metrics.h"
#include "serving/protobuf_log_limit.h"

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

using Grpc = inference::GRPCInferenceService;

// Note [gRPC infer on completion queues]
// gRPC 1.51's callback API (Debian's) runs every callback from one
// completion queue that cores/2 threads (at most 16) wait on in turn, each
// completion handed from the thread that polled it to another; the gRPC
// front answered 67,000-81,000 calls/s (0.17-0.41x the in-process server,
// session 20) with 111-119 us of its threads' CPU per call. So ModelInfer is
// served through N completion queues of gRPC's async API, each with one
// thread of its own that polls it and starts the calls that arrive there
// (the layout gRPC's own benchmarks use); the other RPCs stay on the
// callback API (answers left from the answer pool until Note [gRPC answers
// on their completion queue]). r1 of session
// 21 (H100 host, 32 cores, max batch 16, cudagraphs, 320,000/s offered):
// callback 67,370 calls/s at 119.0 us of front CPU per call; 8 queues 88,465
// (91.5 us); 4 queues 110,972 (80.7 us). On session 22's 32-core H200 host
// (cudagraphs, one request each round) 8 queues answered more than 4 every
// time: max batch 64, 192,376 against 152,886 (r1, 480,000/s offered) and
// 195,081 against 151,085 (r2, 640,000/s; 16 queues 206,898), max batch 16
// 185,258 against 171,425 (r2), the 4 queues' threads 78-79% busy. So N is
// GrpcConfig::completion_queues, else GROVE_GRPC_COMPLETION_QUEUES, else a
// quarter of the cores (2 to 16; an eighth, 2 to 8, before); 0 is the
// callback API for every RPC, as before.
// A call is a QueuedInfer: requested on a queue, received (a new one is
// requested at once), submitted, finished, then deleted by its queue's
// thread. On stop, gRPC's shutdown completes every requested call with
// ok = false, the calls already received are answered (by their queues'
// threads, or the answer pool), then the queues are shut down and drained. Tests: every GrpcServer
// test runs both ways (grpc_server_test on queues, grpc_server_callback_test with
// GROVE_GRPC_COMPLETION_QUEUES=0), tests/serving/grpc_client_test.py.
using QueuedInferService = Grpc::WithCallbackMethod_ServerLive<Grpc::WithCallbackMethod_ServerReady<
    Grpc::WithCallbackMethod_ModelReady<Grpc::WithCallbackMethod_ServerMetadata<
        Grpc::WithCallbackMethod_ModelMetadata<Grpc::WithAsyncMethod_ModelInfer<Grpc::Service>>>>>>;

// Calls requested on each completion queue ahead of their arrival.
constexpr int kCallsRequestedPerQueue = 64;

int completion_queues_from(const GrpcConfig& config) {
  if (config.completion_queues >= 0) return config.completion_queues;
  const std::optional<long> queues = runtime::integer_from_environment(
      "GROVE_GRPC_COMPLETION_QUEUES", 0, 256,
      ": expected a count of completion queues from 0 (the callback API) to 256");
  // Unset: a quarter of the cores, 2 to 16: 8 on the 32-core hosts that measured it.
  if (!queues)
    return static_cast<int>(std::clamp(std::thread::hardware_concurrency() / 4, 2u, 16u));
  return static_cast<int>(*queues);
}

// Note [gRPC answers without a future]
// As the HTTP front (Note [Answers without a future], request.cc), ModelInfer
// submits with an OnAnswer: the request reaper hands the response (or the
// error) to the call and posts it to the answer pool, with no promise set
// (a futex wake per answer on the reaper's thread) and no shared state
// beside the call. GROVE_GRPC_ANSWER_FUTURES=1 takes each answer through a
// future as before. Session 23 (H200 host, 32 cores, max batch 64,
// cudagraphs, 640,000/s offered): r1 162,984 and 145,611 calls/s against
// 120,450 through futures, the reaper at 2.4-2.5 us per answer against 3.3;
// r2 (a busier host, with Note [Counters per thread] and the rest of
// GROVE_SERVING_CONTENDED) 130,408 against 112,858, reaper 2.0 against 2.9. Tests: every GrpcServer
// test (tests/serving/grpc_server_test.cc, grpc_server_callback_test), both ways in
// GrpcServer.AnswersThroughFuturesOrNot, tests/serving/grpc_client_test.py.
static bool env_flag(const char* name) {
  const char* value = std::getenv(name);
  return value != nullptr && *value != '\0' && std::string_view(value) != "0";
}

struct GrpcServer::Impl {
  Impl(InferenceService& service, GrpcConfig config)
      : service(service),
        config(std::move(config)),
        completion_queues(completion_queues_from(this->config)),
        answers_through_futures(env_flag("GROVE_GRPC_ANSWER_FUTURES")),
        answers_on_queues(completion_queues > 0 && !answers_through_futures &&
                          !env_flag("GROVE_GRPC_ANSWER_POOL")),
        answer_pool(static_cast<size_t>(
            this->config.answer_threads > 0
                ? this->config.answer_threads
                : std::max(2, static_cast<int>(std::thread::hardware_concurrency() / 4)))) {}

  struct QueuedInfer;
  // A ModelInfer between submit and its answer: from the callback API (its
  // reactor) or from a completion queue (its QueuedInfer).
  struct InferCall {
    grpc::ServerUnaryReactor* reactor = nullptr;
    QueuedInfer* queued = nullptr;
    inference::ModelInferResponse* response = nullptr;
    InferRequest parsed;
    Clock::time_point received;
    // Note [gRPC answers without a future]: the answer the reaper handed over.
    RequestAnswer answer;
    // GROVE_GRPC_ANSWER_FUTURES=1 only: the future, assigned, and its on_ready
    // called: the later of the two hands the call to answer_pool (on_ready may
    // run before submit returns).
    std::future<Response> future;
    std::atomic<int> pending{2};
  };

  // Note [gRPC infer on completion queues].
  struct QueuedInfer {
    enum class Stage { kRequested, kFinishing };
    explicit QueuedInfer(size_t queue) : queue(queue), responder(&context) {}
    const size_t queue;
    Stage stage = Stage::kRequested;
    grpc::ServerContext context;
    inference::ModelInferRequest request;
    inference::ModelInferResponse response;
    grpc::ServerAsyncResponseWriter<inference::ModelInferResponse> responder;
  };

  // Note [gRPC answers on their completion queue]: the answered calls of one
  // queue, waiting for its thread, and the alarm that wakes it.
  struct QueueInbox {
    std::mutex mutex;
    std::vector<std::shared_ptr<InferCall>> waiting;
    bool alarm_set = false;  // set, and its tag not yet taken by the queue's thread
    bool closed = false;     // the queue is shutting down: no Finish may start
    grpc::Alarm alarm;       // its tag: this inbox
  };

  grpc::ServerUnaryReactor* ServerLive(grpc::CallbackServerContext* context,
                                       const inference::ServerLiveRequest*,
                                       inference::ServerLiveResponse* response) {
    response->set_live(true);
    return finish(context->DefaultReactor(), grpc::Status::OK);
  }

  grpc::ServerUnaryReactor* ServerReady(grpc::CallbackServerContext* context,
                                        const inference::ServerReadyRequest*,
                                        inference::ServerReadyResponse* response) {
    response->set_ready(!stopping);
    return finish(context->DefaultReactor(), grpc::Status::OK);
  }

  grpc::ServerUnaryReactor* ModelReady(grpc::CallbackServerContext* context,
                                       const inference::ModelReadyRequest* request,
                                       inference::ModelReadyResponse* response) {
    grpc::Status known = check_model(request->name(), request->version());
    if (known.ok()) response->set_ready(!stopping);
    return finish(context->DefaultReactor(), known);
  }

  grpc::ServerUnaryReactor* ServerMetadata(grpc::CallbackServerContext* context,
                                           const inference::ServerMetadataRequest*,
                                           inference::ServerMetadataResponse* response) {
    response->set_name("grove");
    return finish(context->DefaultReactor(), grpc::Status::OK);
  }

  grpc::ServerUnaryReactor* ModelMetadata(grpc::CallbackServerContext* context,
                                          const inference::ModelMetadataRequest* request,
                                          inference::ModelMetadataResponse* response) {
    grpc::Status known = check_model(request->name(), request->version());
    if (known.ok()) fill_grpc_model_metadata(config.model_name, service.signature(), response);
    return finish(context->DefaultReactor(), known);
  }

  grpc::ServerUnaryReactor* ModelInfer(grpc::CallbackServerContext* context,
                                       const inference::ModelInferRequest* request,
                                       inference::ModelInferResponse* response) {
    grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
    auto call = std::make_shared<InferCall>();
    call->reactor = reactor;
    call->response = response;
    const grpc::Status refused = start_infer(*request, call);
    if (!refused.ok()) return finish(reactor, refused);
    return reactor;
  }

  // Checks and submits `request` for `call` (Note [gRPC status of a
  // refusal]): OK once submitted (its answer then comes through arrive()),
  // else the status to finish the call with at once.
  grpc::Status start_infer(const inference::ModelInferRequest& request,
                           const std::shared_ptr<InferCall>& call) {
    grpc::Status known = check_model(request.model_name(), request.model_version());
    if (!known.ok()) return known;
    call->received = Clock::now();
    try {
      call->parsed = parse_grpc_infer_request(request, service.signature(), service.max_batch());
      if (answers_through_futures) {
        call->future =
            service.submit_then(std::move(call->parsed.request), [this, call] { arrive(call); });
      } else {
        // Note [gRPC answers without a future]: on the reaper's thread, only handed on.
        service.submit_then_answer(
            std::move(call->parsed.request), [this, call](RequestAnswer answer) {
              call->answer = std::move(answer);
              if (answers_on_queues && call->queued != nullptr) return to_queue(call);
              boost::asio::post(answer_pool, [this, call] { this->answer(*call); });
            });
        return grpc::Status::OK;
      }
    } catch (const ProtocolError& error) {
      return {grpc::StatusCode::INVALID_ARGUMENT, error.what()};
    } catch (const ShapeError& error) {
      return {grpc::StatusCode::INVALID_ARGUMENT, error.what()};
    } catch (const DTypeError& error) {
      return {grpc::StatusCode::INVALID_ARGUMENT, error.what()};
    } catch (const QueueFullError& error) {
      return {grpc::StatusCode::UNAVAILABLE, error.what()};
    } catch (const ServerClosedError& error) {
      return {grpc::StatusCode::UNAVAILABLE, error.what()};
    } catch (const std::exception& error) {
      return {grpc::StatusCode::INTERNAL, str_cat("internal error: ", error.what())};
    }
    arrive(call);
    return grpc::Status::OK;
  }

  // Note [gRPC infer on completion queues]: asks queue `queue` for the next call.
  void request_infer(size_t queue) {
    auto* queued = new QueuedInfer(queue);
    queued_service->RequestModelInfer(&queued->context, &queued->request, &queued->responder,
                                      queues[queue].get(), queues[queue].get(), queued);
  }

  // The thread of completion queue `queue`: until it is shut down and drained.
  void poll_queue(size_t queue) {
    void* tag = nullptr;
    bool ok = false;
    while (queues[queue]->Next(&tag, &ok)) {
      if (tag == inboxes[queue].get()) {
        answer_waiting(*inboxes[queue]);
        continue;
      }
      auto* queued = static_cast<QueuedInfer*>(tag);
      if (queued->stage == QueuedInfer::Stage::kFinishing || !ok) {
        delete queued;  // answered, or a request the shutdown ended
        continue;
      }
      request_infer(queue);  // the next call's slot, before this one's work
      queued->stage = QueuedInfer::Stage::kFinishing;
      auto call = std::make_shared<InferCall>();
      call->queued = queued;
      call->response = &queued->response;
      const grpc::Status refused = start_infer(queued->request, call);
      if (!refused.ok()) finish_queued(*queued, refused);
    }
  }

  // Note [gRPC answers on their completion queue]
  // The gRPC front's answers left through the answer pool: the request
  // reaper posted each answered call to a pool thread (a wake-up when it
  // slept), which built the answer and called Finish, whose completion then
  // came back to the call's queue thread. A call received on a completion
  // queue now goes back to that queue's thread instead: the reaper adds it
  // to the queue's inbox and, when the inbox has no alarm set, sets one due
  // at once, whose tag the queue's thread takes from Next() like any other;
  // the thread then builds and finishes every call waiting there, in order.
  // So a batch of answers costs the reaper one alarm per queue, not one post
  // per call, and no thread wakes only to answer. Once shut_down() closes an
  // inbox, nothing more is finished through it (a Finish on a queue that is
  // shutting down would be an error): as answers that reached the stopped
  // pool before, they are dropped. The alarm's deadline is long past, so it
  // fires at once on the reaper's thread: at gpr_now() (which gRPC rounds up
  // to its next millisecond) it waited for gRPC's timer thread, which then
  // cost 0.7-1.1 us per call and the calls' p50 latency rose by 16% (sim).
  // On sim (2 shared cores: CPU time only, GPU confirmation owed;
  // serve_http, gelu512, max batch 64, 12,000/s offered, 8 clients x 8
  // calls, 2 queues; one binary alternated eight times with
  // GROVE_GRPC_ANSWER_POOL=1) the front's CPU per call fell 44.3 -> 37.8 us
  // (median; 7 of 8 runs lower): the pool threads' 10-14 us went, the queue
  // threads' rose from 10-19 to 18-28 us, and gRPC's default executor (2-4
  // us per call) no longer ran; p50 latency was alike (25.4 and 25.8 ms) and
  // answered/s within 0.5%. The queue threads now carry the answers' work
  // too: where they are busy, more queues (GROVE_GRPC_COMPLETION_QUEUES) may
  // be needed. GROVE_GRPC_ANSWER_POOL=1 answers through the pool as before
  // (the callback API always does). Tests: every GrpcServer test on
  // completion queues (tests/serving/grpc_server_test.cc),
  // GrpcServer.AnswersOnTheirQueueOrThroughThePool,
  // tests/serving/grpc_client_test.py (test_sigterm_answers_calls_in_flight).
  void to_queue(const std::shared_ptr<InferCall>& call) {
    const size_t queue = call->queued->queue;
    QueueInbox& inbox = *inboxes[queue];
    {
      std::lock_guard<std::mutex> lock(inbox.mutex);
      if (inbox.closed) return;
      inbox.waiting.push_back(call);
      if (inbox.alarm_set) return;
      inbox.alarm_set = true;
      // Set under the lock: answer_waiting() may take the tag only after this.
      // A deadline already past fires at once, on this thread: gpr_now() rounds
      // up to gRPC's next millisecond and waited for its timer thread.
      inbox.alarm.Set(queues[queue].get(), gpr_inf_past(GPR_CLOCK_MONOTONIC), &inbox);
    }
  }

  // On the queue's thread, once its inbox's alarm fired.
  void answer_waiting(QueueInbox& inbox) {
    std::vector<std::shared_ptr<InferCall>> calls;
    {
      std::lock_guard<std::mutex> lock(inbox.mutex);
      inbox.alarm_set = false;
      if (inbox.closed) return;
      calls.swap(inbox.waiting);
    }
    for (const std::shared_ptr<InferCall>& call : calls) answer(*call);
  }

  void finish_queued(QueuedInfer& queued, const grpc::Status& status) {
    count_answer(status);
    // The queue's thread deletes it once the answer is written.
    if (status.ok()) {
      queued.responder.Finish(queued.response, status, &queued);
    } else {
      queued.responder.FinishWithError(status, &queued);
    }
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
      if (answers_through_futures) {
        call.answer.response = call.future.get();
      } else if (call.answer.error) {
        std::rethrow_exception(call.answer.error);
      }
      fill_grpc_infer_response(config.model_name, call.parsed, service.signature(),
                               *call.answer.response, call.response);
      request_latency.observe(std::chrono::duration<double>(Clock::now() - call.received).count());
    } catch (const RequestCancelledError& error) {
      status = {grpc::StatusCode::UNAVAILABLE, error.what()};
    } catch (const std::exception& error) {
      status = {grpc::StatusCode::INTERNAL, str_cat("the batch failed: ", error.what())};
    }
    if (call.queued != nullptr) return finish_queued(*call.queued, status);
    finish(call.reactor, status);
  }

  void count_answer(const grpc::Status& status) {
    // Counted without a lock: every gRPC thread answers.
    const auto code = static_cast<size_t>(status.error_code());
    answers[code < answers.size() ? code : answers.size() - 1].fetch_add(1,
                                                                         std::memory_order_relaxed);
    answered.fetch_add(1, std::memory_order_relaxed);
    if (stopping) answered_after_stop.fetch_add(1, std::memory_order_relaxed);
  }

  grpc::ServerUnaryReactor* finish(grpc::ServerUnaryReactor* reactor, const grpc::Status& status) {
    count_answer(status);
    reactor->Finish(status);
    return reactor;
  }

  // The service gRPC calls: each method forwards to the Impl's of its name.
  template <class Base>
  struct Methods : Base {
    explicit Methods(Impl& impl) : impl(impl) {}
    grpc::ServerUnaryReactor* ServerLive(grpc::CallbackServerContext* context,
                                         const inference::ServerLiveRequest* request,
                                         inference::ServerLiveResponse* response) override {
      return impl.ServerLive(context, request, response);
    }
    grpc::ServerUnaryReactor* ServerReady(grpc::CallbackServerContext* context,
                                          const inference::ServerReadyRequest* request,
                                          inference::ServerReadyResponse* response) override {
      return impl.ServerReady(context, request, response);
    }
    grpc::ServerUnaryReactor* ModelReady(grpc::CallbackServerContext* context,
                                         const inference::ModelReadyRequest* request,
                                         inference::ModelReadyResponse* response) override {
      return impl.ModelReady(context, request, response);
    }
    grpc::ServerUnaryReactor* ServerMetadata(grpc::CallbackServerContext* context,
                                             const inference::ServerMetadataRequest* request,
                                             inference::ServerMetadataResponse* response) override {
      return impl.ServerMetadata(context, request, response);
    }
    grpc::ServerUnaryReactor* ModelMetadata(grpc::CallbackServerContext* context,
                                            const inference::ModelMetadataRequest* request,
                                            inference::ModelMetadataResponse* response) override {
      return impl.ModelMetadata(context, request, response);
    }
    Impl& impl;
  };
  // Every method on the callback API.
  struct CallbackMethods final : Methods<Grpc::CallbackService> {
    explicit CallbackMethods(Impl& impl) : Methods(impl) {
      SetMessageAllocatorFor_ModelInfer(&impl.messages);  // Note [gRPC messages reused]
    }
    grpc::ServerUnaryReactor* ModelInfer(grpc::CallbackServerContext* context,
                                         const inference::ModelInferRequest* request,
                                         inference::ModelInferResponse* response) override {
      return impl.ModelInfer(context, request, response);
    }
  };
  // ModelInfer on completion queues (Note [gRPC infer on completion queues]).
  struct QueuedMethods final : Methods<QueuedInferService> {
    using Methods::Methods;
  };

  // Shuts gRPC down once (Note [Draining gRPC on stop]).
  void shut_down() {
    std::lock_guard<std::mutex> lock(shutdown_mutex);
    if (server == nullptr) return;
    server->Shutdown(std::chrono::system_clock::now() +
                     std::chrono::milliseconds(config.drain_timeout_ms));
    server->Wait();
    answer_pool.join();
    // Note [gRPC answers on their completion queue]: no Finish after this.
    for (auto& inbox : inboxes) {
      std::lock_guard<std::mutex> lock(inbox->mutex);
      inbox->closed = true;
      inbox->waiting.clear();
    }
    // Note [gRPC infer on completion queues]: every answer is finished; the
    // queues' threads delete what remains as they drain.
    for (auto& queue : queues) queue->Shutdown();
    for (std::thread& thread : queue_threads) thread.join();
    server.reset();
  }

  InferenceService& service;
  const GrpcConfig config;
  const int completion_queues;  // Note [gRPC infer on completion queues]; 0: none
  // Note [gRPC answers without a future]: GROVE_GRPC_ANSWER_FUTURES=1, the old path.
  const bool answers_through_futures;
  // Note [gRPC answers on their completion queue]: off with GROVE_GRPC_ANSWER_POOL=1.
  const bool answers_on_queues;
  // Declared before the server, so destroyed after it (the pool outlives every call).
  InferMessagePool messages;
  boost::asio::thread_pool answer_pool;
  // The service gRPC calls (one of the two), forwarding to this Impl.
  std::unique_ptr<grpc::Service> callback_service;
  QueuedInferService* queued_service = nullptr;  // owned by callback_service's slot when used
  std::vector<std::unique_ptr<grpc::ServerCompletionQueue>> queues;
  std::vector<std::unique_ptr<QueueInbox>> inboxes;  // one per queue
  std::vector<std::thread> queue_threads;
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
  limit_protobuf_log();  // Note [Protobuf's complaints about requests, counted]
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
  Impl& impl = *impl_;
  if (impl.completion_queues > 0) {
    // Note [gRPC infer on completion queues].
    auto queued = std::make_unique<Impl::QueuedMethods>(impl);
    impl.queued_service = queued.get();
    impl.callback_service = std::move(queued);
    for (int q = 0; q < impl.completion_queues; ++q) {
      impl.queues.push_back(builder.AddCompletionQueue());
      impl.inboxes.push_back(std::make_unique<Impl::QueueInbox>());
    }
  } else {
    impl.callback_service = std::make_unique<Impl::CallbackMethods>(impl);
  }
  builder.RegisterService(impl.callback_service.get());
  impl.server = builder.BuildAndStart();
  GROVE_CHECK(impl.server != nullptr && impl.port != 0, "cannot serve gRPC on ", c.host, ":",
              c.port,
              " (in use, or not an address of this machine); choose another --grpc-port "
              "or --host");
  for (size_t q = 0; q < impl.queues.size(); ++q) {
    for (int k = 0; k < kCallsRequestedPerQueue; ++k) impl.request_infer(q);
    impl.queue_threads.emplace_back([&impl, q] {
      pthread_setname_np(pthread_self(), "grpc-queue");
      impl.poll_queue(q);
    });
  }
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
