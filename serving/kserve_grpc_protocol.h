// The KServe v2 protocol's gRPC messages (serving/kserve_v2_grpc.proto) to and
// from grove's requests, apart from any server: a ModelInferRequest becomes an
// InferRequest checked against the model's signature by the same checks as the
// JSON form (Note [One set of request checks]), a Response becomes a
// ModelInferResponse with raw_output_contents, and a signature becomes the
// model's metadata.
//
//   InferRequest parsed = parse_grpc_infer_request(request, signature, max_batch);
//   ... submit parsed.request, get `answer` ...
//   fill_grpc_infer_response(model_name, parsed, signature, answer, &response);
//
// Note [gRPC tensor contents]
// An input's elements come either as raw little-endian bytes (every input in
// raw_input_contents, in the order of `inputs`) or typed, in the contents
// field of the input's datatype: fp32_contents for FP32, fp64_contents for
// FP64, int_contents for INT32, int64_contents for INT64, bool_contents for
// BOOL (FP16 and BF16 have no typed field: raw only). Mixing the two forms, a
// typed field of another datatype, or a count or byte size that is not what
// the shape holds is refused with INVALID_ARGUMENT naming the field. Answers
// are always raw (raw_output_contents), which every KServe v2 client reads.
// Tests: KserveGrpcProtocol.*.
#pragma once

#include <cstdint>
#include <string>

#include "serving/kserve_protocol.h"
#include "serving/kserve_v2_grpc.pb.h"

namespace grove::serving {

// Checks `request`'s inputs and outputs against `signature`; ProtocolError
// naming the field otherwise. The model name is the caller's to check.
InferRequest parse_grpc_infer_request(const inference::ModelInferRequest& request,
                                      const ModelSignature& signature, int64_t max_batch);

// The answer to `request`: the outputs it asked for, raw.
void fill_grpc_infer_response(const std::string& model_name, const InferRequest& request,
                              const ModelSignature& signature, const Response& answer,
                              inference::ModelInferResponse* response);

// The model's metadata, as GET /v2/models/{name} gives it.
void fill_grpc_model_metadata(const std::string& model_name, const ModelSignature& signature,
                              inference::ModelMetadataResponse* response);

}  // namespace grove::serving
