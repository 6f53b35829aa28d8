// serve_http's gRPC client: one channel with a connection of its own per
// client thread, sending prebuilt KServe v2 ModelInfer requests (raw FP32
// contents, one row each) to grove's gRPC front (serving/grpc_server.h) and
// answering with HTTP-like codes, so the load loop counts both protocols alike.
#pragma once

#include <memory>
#include <random>
#include <string>
#include <vector>

#include "benchmarks/serve_http/load_loop.h"
#include "serving/kserve_v2_grpc.grpc.pb.h"
#include "serving/model_signature.h"

namespace grove::benchmarks {

// 16 one-row requests of random f32 values for `signature`'s inputs, raw.
std::vector<inference::ModelInferRequest> grpc_requests(const serving::ModelSignature& signature,
                                                        const std::string& model,
                                                        std::mt19937_64& rng);

class GrpcLoadClient {
 public:
  GrpcLoadClient(int port, const std::vector<inference::ModelInferRequest>& requests);
  // Sends requests[index % size] and waits for its answer: 200 for OK, 503
  // for UNAVAILABLE (a full queue), -1 for anything else with error() saying
  // what.
  int exchange(size_t index);
  const std::string& error() const { return error_; }
  inference::GRPCInferenceService::Stub& stub() { return *stub_; }

 private:
  const std::vector<inference::ModelInferRequest>& requests_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<inference::GRPCInferenceService::Stub> stub_;
  inference::ModelInferResponse response_;  // reused: its buffers stay allocated
  std::string error_;
};

// The loads of `channels.size()` clients (clients first_client, ... of
// `clients`, as drive_client() gives each one its arrivals), driven by the
// calling thread alone through gRPC's asynchronous API, each client with up
// to `in_flight` calls at once on its channel (Note [gRPC clients on one
// thread]). One tally per client.
std::vector<ClientTally> drive_grpc_clients(
    const std::vector<std::unique_ptr<GrpcLoadClient>>& channels, int64_t in_flight,
    const std::vector<inference::ModelInferRequest>& requests, LoadClock::time_point start,
    double window_s, double rate, int64_t clients, uint64_t seed, int64_t first_client);

}  // namespace grove::benchmarks
