// The KServe v2 / Open Inference Protocol's JSON forms (REST), as grove's HTTP
// server speaks them: an inference request becomes a serving::Request checked
// against the model's signature, a Response becomes the protocol's JSON, and
// a model's signature becomes its metadata.
//
//   POST /v2/models/mlp/infer
//   {"id": "42", "inputs": [{"name": "x", "shape": [2, 512], "datatype": "FP32",
//                            "data": [0.1, ...]}]}
//   -> {"model_name": "mlp", "id": "42",
//       "outputs": [{"name": "gelu15", "shape": [2, 512], "datatype": "FP32", "data": [...]}]}
//
// "data" may be flat (row-major) or nested as the shape; a request may list
// the "outputs" it wants by name (all of them otherwise).
//
// The binary tensor data extension is supported: with an
// Inference-Header-Content-Length header of L, the body's first L bytes are
// the JSON and the rest holds raw little-endian tensors, one per input whose
// "parameters" give "binary_data_size" (instead of "data"), in the order the
// inputs are listed. An output asked for with "parameters": {"binary_data":
// true} (or every output, with the request's "binary_data_output": true) is
// answered the same way: its JSON gets "binary_data_size", its bytes follow
// the answer's JSON, and the answer's JSON length is returned for the
// Inference-Header-Content-Length header.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "runtime/error.h"
#include "serving/kserve_request_reader.h"
#include "serving/model_signature.h"
#include "serving/request.h"

namespace grove::serving {

// A request body the protocol refuses; the message names the field
// ("inputs[0].data[17]") and what was expected. HTTP 400.
class ProtocolError : public Error {
 public:
  using Error::Error;
};

// The most a request's JSON may nest (data nested as a rank-8 shape, inside
// the request's own levels).
inline constexpr int kMaxRequestDepth = 16;

// NAME of a path "/v2/models/NAME" + `rest` ("/infer", "/ready", "" ...), when
// the path has that form and NAME is one non-empty segment.
std::optional<std::string> model_in_path(const std::string& path, const std::string& rest);

// "FP32", "INT64", ... for a grove dtype; nullptr for none.
const char* kserve_datatype(runtime::DType dtype);

struct InferRequest {
  std::string id;               // echoed in the response ("" when absent)
  CheckedRequest request;       // one HostRows per model input, call order
  std::vector<size_t> outputs;  // signature output indices to return, in order
  std::vector<bool> binary;     // per entry of `outputs`: answer it as raw bytes
};

// Note [One set of request checks]
// A request's inputs are checked the same way whatever carries them (JSON
// over HTTP, protobuf over gRPC: serving/kserve_grpc_protocol.h): InputChecks
// holds the checks of names, datatypes, shapes and row counts, with the
// messages the HTTP front always gave, and each protocol reads its own
// encoding of the values around them. Tests: KserveProtocol.*,
// KserveGrpcProtocol.* (the same refusal for the same tensor in both forms).
// How messages name an input of a request: "inputs[0]", or "inputs[0] ('x')"
// once the model input it gives is known. Made per request and written only
// into a refusal's message (a string per input per request cost more than the
// checks themselves).
struct InputField {
  size_t index = 0;
  const std::string* name = nullptr;  // the model input's, once known
};
std::ostream& operator<<(std::ostream& out, const InputField& field);

class InputChecks {
 public:
  InputChecks(const ModelSignature& signature, int64_t max_batch);
  // `given` inputs are as many as the model takes.
  void count(size_t given) const;
  // The signature index of the input named `name`, given at `field`
  // ("inputs[0]"); ProtocolError for an unknown or repeated name.
  size_t input(const InputField& field, const std::string& name);
  // "inputs[0] ('x')": how messages name a field of that input.
  InputField where(const InputField& field, size_t input) const;
  void datatype(const InputField& where, size_t input, const std::string& datatype) const;
  // Sizes in [0, 2^30], the row shape the model takes, rows in [1, max_batch]
  // and the same rows as every earlier input.
  void shape(const InputField& where, size_t input, const runtime::Shape& shape);
  // The request read through these checks, every input given (Note [Requests
  // checked once]): the server checks it no more.
  CheckedRequest checked(Request request) const;

 private:
  const ModelSignature& signature_;
  const int64_t max_batch_;
  std::vector<bool> given_;
  int64_t rows_ = -1;
};

// The signature index of the output named `name`, asked for at `field`
// ("outputs[1]"); ProtocolError when the model has none.
size_t requested_output(const std::string& field, const std::string& name,
                        const ModelSignature& signature);

// Rows of raw little-endian elements (`size` is what `shape` holds); a BOOL
// byte other than 0 reads as true, stored as 1.
HostRows rows_from_bytes(const runtime::Shape& shape, runtime::DType dtype, const uint8_t* bytes,
                         size_t size);

// Parses and checks `body` against `signature` (input names, datatypes, row
// shapes, row counts in [1, max_batch], element counts and values). Throws
// ProtocolError naming the field.
// `json_length`: the Inference-Header-Content-Length of a body with binary
// tensors (nullopt: the whole body is JSON).
InferRequest parse_infer_request(const std::string& body, const ModelSignature& signature,
                                 int64_t max_batch,
                                 std::optional<size_t> json_length = std::nullopt);

// Each way parse_infer_request() reads a body (tests compare them): from the
// body's fields in the common layout, nullopt for a body in another layout or
// one a check refuses (Note [Requests in the common layout]); and from its
// document as serving/kserve_request_reader.h reads it.
std::optional<InferRequest> parse_common_infer_request(
    const std::string& body, const ModelSignature& signature, int64_t max_batch,
    std::optional<size_t> json_length = std::nullopt);
InferRequest parse_infer_request_from_document(RequestDocument& document, const std::string& body,
                                               const ModelSignature& signature, int64_t max_batch,
                                               std::optional<size_t> json_length = std::nullopt);

// The response body for `response` to `request`: its JSON, then the bytes of
// the outputs asked for as binary. `json_length`, when given, is set to the
// JSON's length when binary bytes follow it and to 0 otherwise.
std::string infer_response_json(const std::string& model_name, const InferRequest& request,
                                const ModelSignature& signature, const Response& response,
                                size_t* json_length = nullptr);

// GET /v2/models/{name}: name, versions, platform, inputs and outputs with
// their datatypes and shapes (-1 for the batch dimension).
nlohmann::json model_metadata(const std::string& model_name, const ModelSignature& signature,
                              int64_t max_batch);

// Note [Refusals are valid JSON]
// A refusal's message quotes what the client sent (a path, a field, an id), in
// whatever bytes it came: nlohmann's dump() throws on invalid UTF-8, which
// once aborted the server on `GET /%FF`. Every body grove writes goes through
// json_text(), which writes invalid UTF-8 as U+FFFD, so it never throws and
// every answer is valid JSON. Tests: test_invalid_utf8_path_is_404_json,
// test_invalid_utf8_fields_are_400_json (tests/serving/http_abuse_test.py),
// KserveProtocol.ErrorJsonReplacesInvalidUtf8.
std::string json_text(const nlohmann::json& value);

// {"error": message}, the protocol's error body (Note [Refusals are valid JSON]).
std::string error_json(const std::string& message);

}  // namespace grove::serving
