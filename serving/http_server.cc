#include "serving/http_server.h"

#include <pthread.h>
#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <thread>
#include <vector>

#include "serving/http_connection.h"
#include "serving/kserve_routes.h"

namespace grove::serving {

namespace asio = boost::asio;
using asio::ip::tcp;
using boost::system::error_code;

namespace {

// Open connections are bounded by max_connections and the file limit; the
// soft limit (1024 on Debian) is raised to the hard one.
void raise_file_limit() {
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) == 0 && limit.rlim_cur < limit.rlim_max) {
    limit.rlim_cur = limit.rlim_max;
    ::setrlimit(RLIMIT_NOFILE, &limit);
  }
}

ConnectionLimits connection_limits(const HttpConfig& config) {
  ConnectionLimits limits;
  limits.request.max_body_bytes = config.max_body_bytes;
  limits.request.max_header_bytes = config.max_header_bytes;
  limits.request.max_headers = config.max_headers;
  limits.idle_timeout = std::chrono::milliseconds(config.idle_timeout_ms);
  limits.header_timeout = std::chrono::milliseconds(config.header_timeout_ms);
  limits.body_timeout = std::chrono::milliseconds(config.body_timeout_ms);
  limits.write_timeout = std::chrono::milliseconds(std::max(config.body_timeout_ms, 1000));
  return limits;
}

}  // namespace

struct HttpServer::Impl {
  Impl(InferenceService& service, const HttpConfig& config)
      : Impl(std::make_unique<KserveRoutes>(service, config.model_name, config.retry_after_s,
                                            config.more_metrics),
             nullptr, config) {}
  Impl(HttpRoutes& routes, const HttpConfig& config) : Impl(nullptr, &routes, config) {}
  Impl(std::unique_ptr<KserveRoutes> kserve, HttpRoutes* given, const HttpConfig& config)
      : config(config),
        threads(this->config.threads > 0
                    ? this->config.threads
                    : static_cast<int>(std::max(2u, std::thread::hardware_concurrency()))),
        kserve(std::move(kserve)),
        routes(given ? *given : *this->kserve),
        hub(routes, connection_limits(this->config)),
        io(1),
        acceptor(io),
        retry_timer(io) {
    // Note [One event loop per thread].
    for (int t = 1; t < threads; ++t) {
      loops.push_back(std::make_unique<asio::io_context>(1));
      loop_work.emplace_back(loops.back()->get_executor());
    }
    inboxes.push_back(std::make_unique<AnswerInbox>(io));
    for (auto& loop : loops) inboxes.push_back(std::make_unique<AnswerInbox>(*loop));
    if (this->config.answer_relay) {
      relay = std::make_unique<AnswerRelay>();
      hub.set_relay(relay.get());
    }
  }

  void accept();
  asio::io_context& loop(size_t index) { return index == 0 ? io : *loops[index - 1]; }
  void on_accept(const error_code& error, tcp::socket socket, size_t index);
  void refuse_over_capacity(tcp::socket& socket);

  HttpConfig config;
  int threads;
  std::unique_ptr<KserveRoutes> kserve;  // unless the routes were given
  HttpRoutes& routes;
  // Before io: handlers io destroys unrun release connections, which leave the hub.
  ConnectionHub hub;
  // The acceptor's loop, which holds connections too, and the other threads'
  // loops, each kept running by its work guard until stop().
  asio::io_context io;
  std::vector<std::unique_ptr<asio::io_context>> loops;
  std::vector<asio::executor_work_guard<asio::io_context::executor_type>> loop_work;
  // Each loop's (Note [Answers woken once per batch]); loop i's at i (io's at 0).
  // After the loops: answers still waiting release their connections while
  // the sockets' loops exist.
  std::vector<std::unique_ptr<AnswerInbox>> inboxes;
  // After the inboxes: its hand-offs post to them (Note [Answers handed on by a relay]).
  std::unique_ptr<AnswerRelay> relay;
  size_t next = 0;  // the loop of the next connection (round robin; the acceptor's thread)
  tcp::acceptor acceptor;
  asio::steady_timer retry_timer;  // accept again after EMFILE
  int port = 0;
  std::atomic<bool> stopping{false};
  error_code failure;  // the listening socket's, before stop()
};

// Note [One event loop per thread]
// Each of the front's threads runs an io_context of its own, and a connection
// lives on one of them (round robin at accept), so its handlers run in order
// without a strand and no two threads share a handler queue. One io_context
// run by every thread (the first Asio version) passed each handler through
// one scheduler lock and woke idle threads through it: with 16 threads and
// 64 busy keep-alive clients the front answered 24,000-43,000 requests/s
// where the server behind it answered 215,000 (issue 35). A connection's
// answer comes back from the batching worker by a post to its loop. Tests:
// every test of tests/serving/http_server_test.py and http_abuse_test.py runs
// with --http-threads 2 (two loops).
void HttpServer::Impl::accept() {
  const size_t index = next++ % (loops.size() + 1);
  acceptor.async_accept(loop(index), [this, index](const error_code& error, tcp::socket socket) {
    on_accept(error, std::move(socket), index);
  });
}

void HttpServer::Impl::on_accept(const error_code& error, tcp::socket socket, size_t index) {
  if (stopping || !acceptor.is_open()) return;
  if (error == asio::error::no_descriptors || error == asio::error::no_buffer_space ||
      error == asio::error::no_memory) {
    // Out of descriptors: the backlog keeps the clients until one closes.
    retry_timer.expires_after(std::chrono::milliseconds(50));
    retry_timer.async_wait([this](const error_code& wait_error) {
      if (!wait_error && !stopping) accept();
    });
    return;
  }
  if (error == asio::error::bad_descriptor || error == asio::error::invalid_argument) {
    failure = error;
    for (auto& work : loop_work) work.reset();  // serve() returns once they are idle
    return;
  }
  if (!error) {
    if (hub.open() >= config.max_connections) {
      refuse_over_capacity(socket);
    } else {
      auto connection = std::make_shared<HttpConnection>(std::move(socket), hub, *inboxes[index]);
      hub.add(connection);
      connection->start();
    }
  }
  accept();
}

void HttpServer::Impl::refuse_over_capacity(tcp::socket& socket) {
  HttpResponse response =
      error_response(503, str_cat("too many connections: ", config.max_connections,
                                  " are open (--max-connections); retry later"));
  response.headers.emplace_back("Retry-After", std::to_string(config.retry_after_s));
  const std::string bytes = response_head(response, /*keep_alive=*/false) + response.body;
  error_code ignored;
  socket.non_blocking(true, ignored);
  socket.write_some(asio::buffer(bytes), ignored);  // small: fits the socket's buffer
  routes.count_response(503);
  socket.close(ignored);
}

HttpServer::HttpServer(InferenceService& server, HttpConfig config)
    : impl_(std::make_unique<Impl>(server, std::move(config))) {
  listen();
}

HttpServer::HttpServer(HttpRoutes& routes, HttpConfig config)
    : impl_(std::make_unique<Impl>(routes, std::move(config))) {
  listen();
}

void HttpServer::listen() {
  const HttpConfig& c = impl_->config;
  GROVE_CHECK_AS(ConfigError, !c.model_name.empty(), "HttpServer: model_name is empty");
  GROVE_CHECK_AS(ConfigError, c.port >= 0 && c.port <= 65535, "HttpServer: port ", c.port,
                 " is outside [0, 65535]");
  GROVE_CHECK_AS(ConfigError, c.max_body_bytes >= 64, "HttpServer: max_body_bytes ",
                 c.max_body_bytes, " is below 64");
  GROVE_CHECK_AS(ConfigError, c.max_header_bytes >= 256 && c.max_headers >= 8,
                 "HttpServer: max_header_bytes ", c.max_header_bytes, " (at least 256) or ",
                 "max_headers ", c.max_headers, " (at least 8) too small");
  GROVE_CHECK_AS(ConfigError,
                 c.idle_timeout_ms > 0 && c.header_timeout_ms > 0 && c.body_timeout_ms > 0,
                 "HttpServer: timeouts must be positive");
  raise_file_limit();
  error_code error;
  // An address, or a name such as localhost (its first address).
  tcp::resolver resolver(impl_->io);
  const tcp::resolver::results_type found =
      resolver.resolve(c.host, std::to_string(c.port), tcp::resolver::passive, error);
  GROVE_CHECK(!error && !found.empty(), "cannot listen on ", c.host, ":", c.port, " (",
              error ? error.message() : "no address", "); choose another --host");
  const tcp::endpoint endpoint = found.begin()->endpoint();
  tcp::acceptor& acceptor = impl_->acceptor;
  acceptor.open(endpoint.protocol(), error);
  if (!error) acceptor.set_option(asio::socket_base::reuse_address(true), error);
  if (!error) acceptor.bind(endpoint, error);
  // Note [Listen backlog]
  // Clients that connect at once overflow a short backlog (cpp-httplib, grove's
  // first HTTP library, used 5); a connection whose handshake the kernel
  // dropped is accepted only when its request is retransmitted, a second or
  // more later: 6 to 53 of 64 connections opened together went unanswered.
  // grove listens with the system's maximum. Test:
  // test_connections_opened_at_once_are_all_answered.
  if (!error) acceptor.listen(asio::socket_base::max_listen_connections, error);
  GROVE_CHECK(!error, "cannot listen on ", c.host, ":", c.port, " (", error.message(),
              "; in use, or not an address of this machine); choose another --port or --host");
  impl_->port = acceptor.local_endpoint().port();
  impl_->accept();
}

HttpServer::~HttpServer() { stop(); }

int HttpServer::port() const { return impl_->port; }

HttpServeReport HttpServer::serve() {
  Impl& impl = *impl_;
  std::vector<std::thread> helpers;
  for (auto& loop : impl.loops) {
    helpers.emplace_back([&loop] {
      pthread_setname_np(pthread_self(), "grove-http");  // for per-thread CPU views
      loop->run();
    });
  }
  impl.io.run();
  for (std::thread& helper : helpers) helper.join();
  GROVE_CHECK(!impl.failure, "HttpServer on ", impl.config.host, ":", impl.port,
              " stopped accepting connections without stop() (", impl.failure.message(), ")");
  return {impl.hub.responses.load(), impl.hub.responses_after_stop, impl.hub.timed_out,
          impl.hub.reads.load()};
}

void HttpServer::stop() {
  // Note [Draining on stop].
  if (impl_->stopping.exchange(true)) return;
  impl_->routes.set_stopping();
  asio::post(impl_->io, [impl = impl_.get()] {
    error_code ignored;
    impl->acceptor.close(ignored);
    impl->retry_timer.cancel();
    impl->hub.drain_all();
    // The other loops run until their connections have closed.
    for (auto& work : impl->loop_work) work.reset();
  });
}

std::string HttpServer::metrics_text() const { return impl_->routes.metrics_text(); }

size_t HttpServer::open_connections() const { return impl_->hub.open(); }

}  // namespace grove::serving
