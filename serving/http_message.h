// An HTTP/1.1 request as grove's HTTP front reads it, and the answer it
// writes: only the parts the KServe routes use (serving/kserve_routes.h), so
// that a request costs its body and little more (Note [Request limits]).
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace grove::serving {

class HttpStream;  // serving/http_stream.h

struct HttpRequest {
  std::string method;  // as sent: "GET", "POST", ...
  std::string target;  // as sent: "/v2/models/mlp/infer?x=1"
  std::string path;    // the target's path, percent-decoded (any bytes)
  bool keep_alive = true;
  int version = 11;  // HTTP/1.1: 11; HTTP/1.0: 10 (Note [Streams to HTTP/1.0 clients])
  // The Inference-Header-Content-Length field, as sent (binary tensor data).
  std::optional<std::string> inference_header_length;
  std::string body;
};

// Note [Response fields without allocations]
// A response's content type and its extra headers' names are static text (a
// string literal): "application/json" is one character past std::string's
// inline capacity, and "Inference-Header-Content-Length" far past it, so as
// strings they cost an allocation and a free on the loop for every answer
// (every JSON answer one, every binary answer three: perf's malloc probe,
// serve_http on sim). Tests: KserveRoutes.*, HttpMessage.ResponseHeadHasEveryField.
struct HttpResponse {
  int status = 200;
  const char* content_type = "application/json";  // static text
  // Beyond the standard ones: a name (static text) and its value.
  std::vector<std::pair<const char*, std::string>> headers;
  std::string body;
  // Set: the body comes later, from a producer (Note [Streamed answers]).
  std::shared_ptr<HttpStream> stream;
};

// A response with a JSON body of {"error": message}.
HttpResponse error_response(int status, const std::string& message);
// A response with `body`, JSON text the caller made.
HttpResponse json_response(int status, std::string body);

// "OK", "Not Found", ... ("Unknown" for a code grove does not write).
const char* status_reason(int status);

// The status line and header block of `response` (Content-Length, Connection
// and `Accept-Ranges: none` included), ready to be written before its body.
std::string response_head(const HttpResponse& response, bool keep_alive);
// The same, written into `head` (its text replaced, its capacity kept: Note
// [A response head without allocations]).
void write_response_head(std::string& head, const HttpResponse& response, bool keep_alive);

// `path` with each %XX replaced by its byte; a malformed escape stays as sent.
std::string percent_decode(const std::string& path);

}  // namespace grove::serving
