// HttpConnection is one client's TCP connection to grove's HTTP front: it
// reads requests one after another (pipelined ones in order, from what is
// already buffered), hands each to the HttpRoutes, and writes the answers
// (streamed ones as they come, Note [Streamed answers]), all on the event
// loop of one of the server's few threads (Note [Connections without threads],
// Note [One event loop per thread]).
// ConnectionHub holds what the connections of one server
// share: the routes, the limits, the set of open connections and counters.
#pragma once

#include <atomic>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>

#include "serving/answer_relay.h"
#include "serving/http_answer_inbox.h"
#include "serving/http_request_parser.h"
#include "serving/http_routes.h"
#include "serving/http_stream.h"
#include "serving/read_buffer_cache.h"
#include "serving/sharded_counter.h"

namespace grove::serving {

struct ConnectionLimits {
  RequestLimits request;
  // Note [Connection timeouts]
  // Each phase of a connection has its own deadline, so a client that
  // trickles bytes (slowloris) holds a connection for a bounded time whatever
  // its pace: idle, from the end of an answer to the first byte of the next
  // request (closed quietly); header, from that first byte to the header's
  // end (408); body, to the body's end (408); write, to the end of an answer
  // the client reads slowly (closed). Tests: test_many_slow_connections_do_not_starve_others,
  // test_slowloris_connection_gets_408 (tests/serving/http_abuse_test.py).
  std::chrono::milliseconds idle_timeout{5000};
  std::chrono::milliseconds header_timeout{10000};
  std::chrono::milliseconds body_timeout{30000};
  std::chrono::milliseconds write_timeout{30000};
  // After stop(): how long an idle keep-alive connection may still send one
  // request (Note [Draining on stop]).
  std::chrono::milliseconds drain_grace{1000};
};

class HttpConnection;

class ConnectionHub {
 public:
  ConnectionHub(HttpRoutes& routes, ConnectionLimits limits) : routes_(routes), limits_(limits) {}

  HttpRoutes& routes() { return routes_; }
  const ConnectionLimits& limits() const { return limits_; }
  void add(const std::shared_ptr<HttpConnection>& connection);
  void remove(const HttpConnection* connection);
  size_t open() const;
  // Note [Draining on stop]: every open connection finishes the request it
  // has read and closes.
  void drain_all();
  bool draining() const { return draining_; }
  // Note [Answers handed on by a relay]: the server's, if it has one.
  void set_relay(AnswerRelay* relay) { relay_ = relay; }
  AnswerRelay* relay() const { return relay_; }

  ShardedCounter responses;                       // answers written (Note [Counters per thread])
  std::atomic<uint64_t> responses_after_stop{0};  // of which after drain_all()
  std::atomic<uint64_t> timed_out{0};             // connections closed by a deadline
  ShardedCounter reads;                           // socket reads of requests (Note [Read sizes])

 private:
  HttpRoutes& routes_;
  const ConnectionLimits limits_;
  std::atomic<bool> draining_{false};
  AnswerRelay* relay_ = nullptr;
  mutable std::mutex mutex_;
  std::unordered_map<const HttpConnection*, std::weak_ptr<HttpConnection>> open_;
};

// The connection's socket as Beast reads it, counting the reads (Note [Read
// sizes]); writes and waits go to the socket itself.
class CountedReads {
 public:
  using executor_type = boost::asio::ip::tcp::socket::executor_type;
  CountedReads(boost::asio::ip::tcp::socket& socket, ShardedCounter& reads)
      : socket_(socket), reads_(reads) {}
  executor_type get_executor() { return socket_.get_executor(); }
  template <class MutableBuffers, class Handler>
  auto async_read_some(const MutableBuffers& buffers, Handler&& handler) {
    reads_.add();
    return socket_.async_read_some(buffers, std::forward<Handler>(handler));
  }

 private:
  boost::asio::ip::tcp::socket& socket_;
  ShardedCounter& reads_;
};

class HttpConnection : public std::enable_shared_from_this<HttpConnection>, public AnswerTaker {
 public:
  // `socket`'s executor is the connection's event loop, run by one thread.
  // `inbox` is that loop's (Note [Answers woken once per batch]).
  HttpConnection(boost::asio::ip::tcp::socket socket, ConnectionHub& hub, AnswerInbox& inbox);
  ~HttpConnection();
  void start();
  // Posts the drain onto the connection's loop (any thread).
  void drain();

 private:
  enum class Phase { kIdle, kHeader, kBody, kWaiting, kWriting, kLingering, kClosed };

  void read_idle();
  void read_header();
  void read_body();
  void on_read(const boost::system::error_code& error, bool header);
  void dispatch();
  void take_answer() override;
  void answer(HttpResponse response);
  void on_written(const boost::system::error_code& error);
  void refuse(HttpResponse response);
  void linger();
  void close();
  void arm(std::chrono::milliseconds timeout);
  void disarm();
  void wait_for_deadline();
  void on_deadline();
  // Note [Streamed answers].
  void stream(HttpResponse response);
  void on_stream_update();
  void watch_client();
  // The stream is over (ended, or its client left): dropped, its late updates
  // and the client watch ignored, serve()'s threads free to idle.
  void forget_stream();

  boost::asio::ip::tcp::socket socket_;
  boost::asio::steady_timer timer_;
  ConnectionHub& hub_;
  AnswerInbox& inbox_;
  CountedReads reader_;  // socket_, for Beast's request reads
  // Note [Read buffers kept by their loop].
  boost::beast::basic_flat_buffer<ReadBufferAllocator<char>> buffer_;
  std::unique_ptr<RequestParser> parser_;
  std::unique_ptr<HttpRoutes::Pending> queued_;
  // This connection while its answer is queued: Note [An answer handed on
  // without allocations].
  std::shared_ptr<HttpConnection> waiting_self_;
  // While an answer is queued no I/O is pending: this keeps serve()'s
  // threads running until the worker posts it back (Note [Draining on stop]).
  std::optional<boost::asio::executor_work_guard<boost::asio::any_io_executor>> queued_work_;
  Phase phase_ = Phase::kIdle;
  // Note [Deadlines without a timer per phase].
  using Clock = boost::asio::steady_timer::clock_type;
  Clock::time_point deadline_;
  bool armed_ = false;
  bool timer_waiting_ = false;
  uint64_t timer_generation_ = 0;
  bool timed_out_ = false;
  bool draining_ = false;
  bool keep_alive_ = true;
  bool chunks_understood_ = true;  // the request was HTTP/1.1 (Note [Streams to HTTP/1.0 clients])
  std::string head_;
  std::string body_;
  size_t lingered_bytes_ = 0;
  std::shared_ptr<HttpStream> stream_;  // the answer streaming or awaited
  uint64_t stream_generation_ = 0;      // which stream watch_client() watches
  bool stream_writing_ = false;
};

}  // namespace grove::serving
