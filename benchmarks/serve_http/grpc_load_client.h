// serve_http's gRPC client: one channel with a connection of its own per
// client thread, sending prebuilt KServe v2 ModelInfer requests (raw FP32
// contents, one row each) to grove's gRPC front (serving/grpc_server.h) and
// answering with HTTP-like codes, so the load loop counts both protocols alike.
#pragma once

#include <memory>
#include <random>
#include <string>
#include <vector>

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

 private:
  const std::vector<inference::ModelInferRequest>& requests_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<inference::GRPCInferenceService::Stub> stub_;
  inference::ModelInferResponse response_;  // reused: its buffers stay allocated
  std::string error_;
};

}  // namespace grove::benchmarks
