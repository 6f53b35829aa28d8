#include "benchmarks/serve_http/grpc_load_client.h"

#include <grpc/grpc.h>
#include <grpcpp/grpcpp.h>

#include <chrono>

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

}  // namespace grove::benchmarks
