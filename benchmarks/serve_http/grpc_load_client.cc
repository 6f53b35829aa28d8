#include "benchmarks/serve_http/grpc_load_client.h"

#include <grpc/grpc.h>
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <chrono>
#include <deque>

#include "benchmarks/common/flags.h"
#include "runtime/error.h"

namespace grove::benchmarks {

std::vector<inference::ModelInferRequest> grpc_requests(const serving::ModelSignature& signature,
                                                        const std::string& model,
                                                        std::mt19937_64& rng) {
  std::uniform_real_distribution<float> uniform(-1.f, 1.f);
  std::vector<inference::ModelInferRequest> requests(16);
  for (inference::ModelInferRequest& request : requests) {
    request.set_model_name(model);
    for (const serving::RowSpec& input : signature.inputs) {
      GROVE_CHECK_AS(UsageError, input.dtype == runtime::DType::kF32, "serve_http: input '",
                     input.name, "' is ", runtime::dtype_name(input.dtype),
                     "; this benchmark sends f32");
      auto* tensor = request.add_inputs();
      tensor->set_name(input.name);
      tensor->set_datatype("FP32");
      tensor->add_shape(1);
      for (int64_t size : input.row_shape) tensor->add_shape(size);
      std::vector<float> data(static_cast<size_t>(runtime::shape_numel(input.row_shape)));
      for (float& value : data) value = uniform(rng);
      request.add_raw_input_contents(reinterpret_cast<const char*>(data.data()),
                                     data.size() * sizeof(float));
    }
  }
  return requests;
}

GrpcLoadClient::GrpcLoadClient(int port, const std::vector<inference::ModelInferRequest>& requests)
    : requests_(requests) {
  grpc::ChannelArguments arguments;
  // A connection of its own, as each HTTP client has (channels would share one).
  arguments.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  channel_ = grpc::CreateCustomChannel(str_cat("127.0.0.1:", port),
                                       grpc::InsecureChannelCredentials(), arguments);
  stub_ = inference::GRPCInferenceService::NewStub(channel_);
  // Connected and one call made before the measured window (not a ModelInfer:
  // the batching server's counts stay the run's own).
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  inference::ServerLiveResponse live;
  stub_->ServerLive(&context, {}, &live);
}

int GrpcLoadClient::exchange(size_t index) {
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
  response_.Clear();
  const grpc::Status status =
      stub_->ModelInfer(&context, requests_[index % requests_.size()], &response_);
  if (status.ok()) return 200;
  if (status.error_code() == grpc::StatusCode::UNAVAILABLE &&
      status.error_message().find("queue is full") != std::string::npos) {
    return 503;
  }
  error_ =
      str_cat("gRPC status ", static_cast<int>(status.error_code()), ": ", status.error_message());
  return -1;
}

// Note [gRPC clients on one thread]
// A blocking gRPC call costs its client thread a sleep and a wake-up, and
// gRPC's poller is handed from thread to thread within a process: on sim a
// blocking client spent about 55 us of CPU per call, more than the server.
// The clients of a process share one thread instead: it starts each call at
// its arrival time (or, with every slot of its client busy, when one frees)
// and takes the answers from one completion queue, waiting in it until the
// next arrival. Each client keeps its own Poisson arrivals, seeded as
// drive_client() seeds them, and latency still runs from a call's arrival
// time. Test: benchmarks/serve_http/serve_http_smoke_test.sh (gRPC rows).
std::vector<ClientTally> drive_grpc_clients(
    const std::vector<std::unique_ptr<GrpcLoadClient>>& channels, int64_t in_flight,
    const std::vector<inference::ModelInferRequest>& requests, LoadClock::time_point start,
    double window_s, double rate, int64_t clients, uint64_t seed, int64_t first_client) {
  struct Client {
    std::mt19937_64 rng;
    std::exponential_distribution<double> gap;
    double next = 0;  // the next arrival, seconds from start
    int64_t calls = 0;
    std::deque<LoadClock::time_point> waiting;  // arrivals with every slot busy
    ClientTally tally;
  };
  struct Call {
    size_t client = 0;
    LoadClock::time_point arrival;
    grpc::ClientContext context;
    inference::ModelInferResponse response;
    grpc::Status status;
    std::unique_ptr<grpc::ClientAsyncResponseReader<inference::ModelInferResponse>> reader;
  };
  const double cpu_before = thread_cpu_seconds();
  const LoadClock::time_point window_end = start + std::chrono::duration_cast<LoadClock::duration>(
                                                       std::chrono::duration<double>(window_s));
  auto at = [&](double t) {
    return start +
           std::chrono::duration_cast<LoadClock::duration>(std::chrono::duration<double>(t));
  };
  std::vector<Client> states(channels.size());
  for (size_t c = 0; c < states.size(); ++c) {
    Client& client = states[c];
    client.rng.seed(seed * 1000003 + static_cast<uint64_t>(first_client + static_cast<int64_t>(c)));
    client.gap = std::exponential_distribution<double>(rate / static_cast<double>(clients));
    client.next = client.gap(client.rng);
    client.tally.last_answer = start;
  }
  grpc::CompletionQueue queue;
  int64_t open_calls = 0;
  auto start_call = [&](size_t c, LoadClock::time_point arrival) {
    Client& client = states[c];
    auto* call = new Call;
    call->client = c;
    call->arrival = arrival;
    call->context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
    ++client.tally.sent;
    if (LoadClock::now() < window_end) ++client.tally.sent_in_window;
    call->reader = channels[c]->stub().PrepareAsyncModelInfer(
        &call->context, requests[client.tally.sent % requests.size()], &queue);
    call->reader->StartCall();
    call->reader->Finish(&call->response, &call->status, call);
    ++client.calls;
    ++open_calls;
  };
  while (true) {
    // Arrivals due: a call each, or a wait for a free slot.
    const LoadClock::time_point now = LoadClock::now();
    LoadClock::time_point next_arrival = LoadClock::time_point::max();
    for (size_t c = 0; c < states.size(); ++c) {
      Client& client = states[c];
      while (client.next < window_s && at(client.next) <= now) {
        if (client.calls < in_flight) {
          start_call(c, at(client.next));
        } else {
          client.waiting.push_back(at(client.next));
        }
        client.next += client.gap(client.rng);
      }
      if (client.next < window_s) next_arrival = std::min(next_arrival, at(client.next));
    }
    if (open_calls == 0 && next_arrival == LoadClock::time_point::max()) break;
    const auto deadline =
        open_calls == 0 ? next_arrival : std::min(next_arrival, now + std::chrono::seconds(70));
    void* tag = nullptr;
    bool ok = false;
    const grpc::CompletionQueue::NextStatus event =
        queue.AsyncNext(&tag, &ok, std::chrono::system_clock::now() + (deadline - now));
    if (event != grpc::CompletionQueue::GOT_EVENT) {
      if (event == grpc::CompletionQueue::SHUTDOWN) break;
      continue;  // an arrival is due
    }
    std::unique_ptr<Call> call(static_cast<Call*>(tag));
    Client& client = states[call->client];
    --client.calls;
    --open_calls;
    const LoadClock::time_point done = LoadClock::now();
    ClientTally& tally = client.tally;
    if (ok && call->status.ok()) {
      tally.count_answer(call->arrival, done);
    } else if (call->status.error_code() == grpc::StatusCode::UNAVAILABLE &&
               call->status.error_message().find("queue is full") != std::string::npos) {
      ++tally.rejected;
    } else {
      tally.count_error([&] {
        return str_cat("gRPC status ", static_cast<int>(call->status.error_code()), ": ",
                       call->status.error_message());
      });
    }
    if (!client.waiting.empty()) {
      const LoadClock::time_point arrival = client.waiting.front();
      client.waiting.pop_front();
      start_call(call->client, arrival);
    }
  }
  queue.Shutdown();
  void* tag = nullptr;
  bool ok = false;
  while (queue.Next(&tag, &ok)) delete static_cast<Call*>(tag);
  std::vector<ClientTally> tallies;
  const double cpu_each = (thread_cpu_seconds() - cpu_before) / static_cast<double>(states.size());
  for (Client& client : states) {
    client.tally.cpu_s = cpu_each;
    tallies.push_back(std::move(client.tally));
  }
  return tallies;
}

}  // namespace grove::benchmarks
