// HttpStream is an answer that a producer on another thread writes after its
// request was routed: a body in pieces (server-sent events, written to the
// client as HTTP/1.1 chunks) or, later, the whole response. The connection
// writes what comes and tells the producer when the client has gone.
//
//   auto stream = std::make_shared<HttpStream>(HttpStream::Mode::kChunked);
//   stream->on_cancel([&] { generator_side.cancel(id); });
//   response.stream = stream;             // the route's answer: 200, head only
//   ... stream->write("data: {...}\n\n"); ... stream->close();   // producer thread
//
// Note [Streamed answers]
// A chunked stream's head (Transfer-Encoding: chunked, no Content-Length) is
// written at once; each update the producer makes is written as one chunk as
// soon as the previous write ended, and close() writes the last chunk, after
// which the connection reads its next request (keep-alive). While an answer
// streams or waits, the connection watches its socket: a client that closes
// it (or a write that fails) cancels the stream, which calls the producer's
// on_cancel once, on the connection's thread, so the producer frees what it
// holds (a KV slot) at its next step. A client that half-closes its socket
// after its request counts as gone. Tests: test_disconnect_mid_stream_frees_the_slot
// (tests/serving/llm/llm_http_test.py), HttpStream.* (tests/serving/http_stream_test.cc).
#pragma once

#include <functional>
#include <mutex>
#include <optional>
#include <string>

#include "serving/http_message.h"

namespace grove::serving {

class HttpStream {
 public:
  enum class Mode { kChunked, kWhole };
  explicit HttpStream(Mode mode) : mode_(mode) {}
  Mode mode() const { return mode_; }

  // Producer side, any thread. kChunked: write() appends to the body, close()
  // ends it. kWhole: answer() gives the response. Calls after the end or a
  // cancel are dropped.
  void write(std::string piece);
  void close();
  void answer(HttpResponse response);
  // `on_cancel` runs once if the client goes away before the end (at once,
  // here, if it already has).
  void on_cancel(std::function<void()> on_cancel);
  bool cancelled() const;

  // Connection side. `on_update` runs on the producer's thread after each
  // write/close/answer (it must only hand the work on); take() returns what
  // came since the last take.
  struct Update {
    std::string bytes;                     // kChunked: body bytes, not yet framed
    bool ended = false;                    // close() or answer() came
    std::optional<HttpResponse> response;  // kWhole, once ended
  };
  void watch(std::function<void()> on_update);
  Update take();
  // The client went away: runs on_cancel (once) and drops the watcher.
  void cancel();

 private:
  void notify(std::unique_lock<std::mutex>& lock);

  const Mode mode_;
  mutable std::mutex mutex_;
  std::string pending_;
  std::optional<HttpResponse> response_;
  bool ended_ = false;
  bool taken_end_ = false;
  bool cancelled_ = false;
  std::function<void()> on_update_;
  std::function<void()> on_cancel_;
};

// The head of a streamed answer (Transfer-Encoding: chunked; Cache-Control:
// no-cache for server-sent events), and one chunk's framing.
//
// Note [Streams to HTTP/1.0 clients]
// HTTP/1.0 has no chunked transfer coding (RFC 9112 says a server must not
// send it to a 1.0 client, and such a client shows the chunk sizes inside
// the body: nginx proxies with HTTP/1.0 unless told otherwise). A stream
// answering an HTTP/1.0 request therefore has no Transfer-Encoding (and
// `chunked` false here), says Connection: close, writes the producer's bytes
// unframed and ends the body by closing the connection. Tests:
// HttpStream.HeadWithoutChunksForHttp10 (tests/serving/http_stream_test.cc),
// test_http10_client_gets_an_unframed_stream (tests/serving/llm/llm_http_test.py).
std::string chunked_response_head(const HttpResponse& response, bool keep_alive,
                                  bool chunked = true);
std::string http_chunk(const std::string& bytes);  // "" for empty bytes
constexpr const char* kLastChunk = "0\r\n\r\n";

}  // namespace grove::serving
