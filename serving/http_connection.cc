#include "serving/http_connection.h"

#include <algorithm>
#include <array>
#include <boost/asio/post.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/read.hpp>

#include "runtime/error.h"

namespace grove::serving {

namespace asio = boost::asio;
namespace http = boost::beast::http;
using boost::system::error_code;

// Note [Connections without threads]
// A connection holds no thread: every step (read, answer, write, deadline)
// is a completion handler on its thread's event loop, and an infer request that waits for
// its batch holds only its Queued state until the worker's on_ready posts the
// answer back (Note [Answers without a waiting thread]). So open connections
// cost memory (a buffer of at most max_header_bytes + 64 KiB while a request
// is read, none while idle, and the body), and are bounded by max_connections
// and the process's file limit, not by threads: 500 slowloris connections
// leave a normal client answered. Test: test_many_slow_connections_do_not_starve_others.

// Note [Read sizes]
// Beast reads as much as the buffer's free capacity allows, at least 512
// bytes. An idle connection holds no buffer (capacity 0), so without a
// reserve every request came in 512-byte reads: a 10 KB JSON request took 20
// recv calls and as many completion handlers, and the HTTP front answered a
// fifth of what the server behind it could (issue 35). A header read reserves
// kHeaderRead (a slowloris connection holds that much: 500 of them 8 MiB), a
// body read room for what its Content-Length still owes, up to kReadChunk.
// kHeaderRead holds a whole 512-float JSON request (about 10 KB with its
// header), so such a request takes one read; at 8 KiB it took two, the second
// after growing the buffer and copying what the first had read. Larger
// requests take one or two more. Test: test_a_request_takes_few_reads
// (tests/serving/http_abuse_test.py).

namespace {
constexpr size_t kReadChunk = 64 << 10;
constexpr size_t kHeaderRead = 16 << 10;
constexpr size_t kLingerBytes = size_t{4} << 20;
constexpr std::chrono::milliseconds kLingerTime{1000};
}  // namespace

void ConnectionHub::add(const std::shared_ptr<HttpConnection>& connection) {
  std::lock_guard<std::mutex> lock(mutex_);
  open_.emplace(connection.get(), connection);
}

void ConnectionHub::remove(const HttpConnection* connection) {
  std::lock_guard<std::mutex> lock(mutex_);
  open_.erase(connection);
}

size_t ConnectionHub::open() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return open_.size();
}

void ConnectionHub::drain_all() {
  draining_ = true;
  std::vector<std::shared_ptr<HttpConnection>> connections;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto& [key, weak] : open_) {
      if (auto connection = weak.lock()) connections.push_back(std::move(connection));
    }
  }
  for (auto& connection : connections) connection->drain();
}

HttpConnection::HttpConnection(asio::ip::tcp::socket socket, ConnectionHub& hub, AnswerInbox& inbox)
    : socket_(std::move(socket)),
      timer_(socket_.get_executor()),
      hub_(hub),
      inbox_(inbox),
      reader_(socket_, hub.reads),
      buffer_(hub.limits().request.max_header_bytes + kReadChunk) {}

HttpConnection::~HttpConnection() { hub_.remove(this); }

void HttpConnection::start() {
  error_code ignored;
  socket_.set_option(asio::ip::tcp::no_delay(true), ignored);
  draining_ = hub_.draining();
  read_idle();
}

void HttpConnection::drain() {
  asio::post(socket_.get_executor(), [self = shared_from_this()] {
    if (self->draining_) return;
    self->draining_ = true;
    // Note [Draining on stop]: an idle connection may still send one request
    // within the grace; any other finishes the request it is reading.
    if (self->phase_ == Phase::kIdle) self->arm(self->hub_.limits().drain_grace);
  });
}

void HttpConnection::read_idle() {
  if (buffer_.size() > 0) return read_header();  // a pipelined request is buffered
  phase_ = Phase::kIdle;
  const ConnectionLimits& limits = hub_.limits();
  arm(draining_ ? std::min(limits.idle_timeout, limits.drain_grace) : limits.idle_timeout);
  // An idle connection holds no buffer: it waits for the socket to be
  // readable, and the header read allocates one (Note [Connections without threads]).
  buffer_.shrink_to_fit();
  socket_.async_wait(asio::ip::tcp::socket::wait_read,
                     [self = shared_from_this()](const error_code& error) {
                       if (error) return self->close();
                       self->read_header();  // EOF there closes quietly
                     });
}

void HttpConnection::read_header() {
  phase_ = Phase::kHeader;
  parser_ = std::make_unique<RequestParser>(hub_.limits().request);
  arm(hub_.limits().header_timeout);
  // Note [Read sizes].
  buffer_.reserve(std::min(kHeaderRead, buffer_.max_size()));
  http::async_read_header(reader_, buffer_, *parser_,
                          [self = shared_from_this()](const error_code& error, size_t) {
                            self->on_read(error, /*header=*/true);
                          });
}

void HttpConnection::read_body() {
  phase_ = Phase::kBody;
  arm(hub_.limits().body_timeout);
  // Note [Read sizes]: room for the rest of a Content-Length body (up to
  // kReadChunk), so that it comes in one read.
  if (const boost::optional<std::uint64_t> remaining = parser_->content_length_remaining()) {
    const size_t want =
        buffer_.size() + static_cast<size_t>(std::min<std::uint64_t>(*remaining, kReadChunk));
    buffer_.reserve(std::min(want, buffer_.max_size()));
  }
  http::async_read(reader_, buffer_, *parser_,
                   [self = shared_from_this()](const error_code& error, size_t) {
                     self->on_read(error, /*header=*/false);
                   });
}

void HttpConnection::on_read(const error_code& error, bool header) {
  if (phase_ == Phase::kClosed) return;
  if (timed_out_) {
    const ConnectionLimits& limits = hub_.limits();
    return refuse(error_response(
        408, header ? str_cat("request header not complete within ", limits.header_timeout.count(),
                              " ms (--header-timeout-ms)")
                    : str_cat("request body not complete within ", limits.body_timeout.count(),
                              " ms (--body-timeout-ms)")));
  }
  if (error == http::error::end_of_stream || error == http::error::partial_message ||
      error == asio::error::eof || error == asio::error::connection_reset ||
      error == asio::error::operation_aborted) {
    return close();  // the client went away mid-request: nobody to answer
  }
  if (error) return refuse(parser_->refusal(error));
  if (header && !parser_->is_done()) {
    if (parser_->expects_continue()) {
      disarm();
      phase_ = Phase::kWriting;
      head_ = "HTTP/1.1 100 Continue\r\n\r\n";
      arm(hub_.limits().write_timeout);
      return asio::async_write(socket_, asio::buffer(head_),
                               [self = shared_from_this()](const error_code& error, size_t) {
                                 if (error || self->timed_out_) return self->close();
                                 self->read_body();
                               });
    }
    return read_body();
  }
  dispatch();
}

void HttpConnection::dispatch() {
  disarm();
  phase_ = Phase::kWaiting;
  HttpRequest& request = parser_->request();
  keep_alive_ = request.keep_alive;
  chunks_understood_ = request.version >= 11;  // Note [Streams to HTTP/1.0 clients]
  // Note [An answer handed on without allocations].
  waiting_self_ = shared_from_this();
  auto on_ready = [this] {
    // On the thread that answers (the request reaper's): only hands on, and
    // touches nothing of this connection after the post (Note [An OnAnswer
    // without an allocation], kserve_routes.cc).
    std::shared_ptr<AnswerTaker> taker = waiting_self_;
    // Note [Answers handed on by a relay]; Note [Answers woken once per batch].
    if (AnswerRelay* relay = hub_.relay()) return relay->post(inbox_, std::move(taker));
    inbox_.post(std::move(taker));
  };
  auto result = hub_.routes().respond(request, std::move(on_ready));
  if (auto* response = std::get_if<HttpResponse>(&result)) {
    waiting_self_.reset();  // answered at once: on_ready is never called
    return answer(std::move(*response));
  }
  queued_work_.emplace(socket_.get_executor());
  queued_ = std::move(std::get<std::unique_ptr<HttpRoutes::Pending>>(result));
}

// Note [An answer handed on without allocations]
// An answer reached its connection's loop through three callables, each a
// std::function holding the connection's shared_ptr, too large to be kept in
// place: one allocated on the loop (on_ready), one on the request reaper's
// thread (the relay's hand-off) and one on the relay's (the inbox's), two of
// them freed by another thread, per answer. Now the connection keeps itself
// alive while its answer is queued (waiting_self_, a cycle that
// take_answer() breaks), on_ready holds only its address (kept in place),
// and the relay and the inbox carry the connection as an AnswerTaker: no
// allocation between the reaper and the loop. The connection's lifetime is
// as before: it stayed alive through the cycle on_ready's capture made.
// Allocations per answer (perf's malloc probe, serve_http on sim, binary):
// the reaper's 1.0 -> 0, the relay's 1.2 -> 0.2, the loops' 19 -> 18; the
// front's CPU per answer did not move beyond the noise of 2 shared cores
// (six alternated pairs: binary 16.9 -> 17.3 us, JSON 29.9 -> 29.9, medians).
// Tests: every HTTP test (tests/serving/http_server_test.py,
// http_abuse_test.py; test_without_answer_relay_each_client_gets_its_rows_and_drains
// without the relay), AnswerRelay.* (tests/serving/answer_relay_test.cc).
void HttpConnection::take_answer() {
  const std::shared_ptr<HttpConnection> self = std::move(waiting_self_);  // alive to the end
  HttpResponse response = hub_.routes().complete(*queued_);
  queued_.reset();
  queued_work_.reset();
  answer(std::move(response));
}

void HttpConnection::answer(HttpResponse response) {
  if (response.stream) return stream(std::move(response));
  parser_.reset();
  keep_alive_ = keep_alive_ && !draining_;
  hub_.routes().count_response(response.status);
  write_response_head(head_, response, keep_alive_);  // Note [A response head without allocations]
  body_ = std::move(response.body);
  phase_ = Phase::kWriting;
  arm(hub_.limits().write_timeout);
  const std::array<asio::const_buffer, 2> buffers = {asio::buffer(head_), asio::buffer(body_)};
  asio::async_write(socket_, buffers, [self = shared_from_this()](const error_code& error, size_t) {
    self->on_written(error);
  });
}

void HttpConnection::on_written(const error_code& error) {
  disarm();
  std::string().swap(body_);
  if (error || timed_out_) return close();
  hub_.responses.add();
  if (draining_) ++hub_.responses_after_stop;
  if (!keep_alive_) return linger();
  read_idle();
}

void HttpConnection::refuse(HttpResponse response) {
  keep_alive_ = false;
  timed_out_ = false;
  answer(std::move(response));
}

void HttpConnection::linger() {
  // A close with unread bytes in the socket resets the connection, and the
  // client may lose the answer it was sent (a 413 before a body it is still
  // sending): send FIN, then read and drop what comes, bounded in bytes and time.
  phase_ = Phase::kLingering;
  error_code ignored;
  socket_.shutdown(asio::ip::tcp::socket::shutdown_send, ignored);
  if (lingered_bytes_ == 0) arm(kLingerTime);
  buffer_.consume(buffer_.size());
  socket_.async_read_some(buffer_.prepare(kReadChunk),
                          [self = shared_from_this()](const error_code& error, size_t bytes) {
                            self->lingered_bytes_ += bytes + 1;
                            if (error || self->timed_out_ || self->lingered_bytes_ > kLingerBytes) {
                              return self->close();
                            }
                            self->linger();
                          });
}

void HttpConnection::close() {
  if (phase_ == Phase::kClosed) return;
  phase_ = Phase::kClosed;
  disarm();
  timer_.cancel();  // its handler holds the connection
  error_code ignored;
  socket_.shutdown(asio::ip::tcp::socket::shutdown_both, ignored);
  socket_.close(ignored);
}

// Note [Deadlines without a timer per phase]
// A request passes through four phases, each with its own deadline (Note
// [Connection timeouts]); setting and cancelling the connection's timer at
// each one cost four aborted wait handlers per request, each through the
// connection's executor. Instead arm() only records the deadline, and the
// timer waits for the earliest it was asked for: when it fires it compares
// the clock with the deadline in force now (none after disarm()) and either
// expires the connection or waits again for the later deadline. The timer is
// reset only when a deadline comes earlier than its wait (the drain grace,
// lingering), and cancelled once, at close(). So a busy connection's timer
// fires about once per idle timeout, and a deadline is still met to the
// timer's precision. Tests: test_slowloris_connection_gets_408,
// test_idle_keep_alive_connection_is_closed (tests/serving/http_abuse_test.py).
void HttpConnection::arm(std::chrono::milliseconds timeout) {
  deadline_ = Clock::now() + timeout;
  armed_ = true;
  if (timer_waiting_ && timer_.expiry() <= deadline_) return;  // it fires first, then waits on
  wait_for_deadline();
}

void HttpConnection::wait_for_deadline() {
  const uint64_t generation = ++timer_generation_;
  timer_waiting_ = true;
  timer_.expires_at(deadline_);  // ends an earlier wait, whose generation is then stale
  timer_.async_wait([self = shared_from_this(), generation](const error_code& error) {
    if (generation != self->timer_generation_) return;
    self->timer_waiting_ = false;
    if (error || !self->armed_ || self->phase_ == Phase::kClosed) return;
    if (Clock::now() < self->deadline_) return self->wait_for_deadline();
    self->on_deadline();
  });
}

void HttpConnection::disarm() { armed_ = false; }

void HttpConnection::on_deadline() {
  // Note [Connection timeouts]: the pending read or write ends with
  // operation_aborted, and its handler sees timed_out_.
  ++hub_.timed_out;
  timed_out_ = true;
  error_code ignored;
  socket_.cancel(ignored);
}

}  // namespace grove::serving
