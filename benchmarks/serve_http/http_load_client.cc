#include "benchmarks/serve_http/http_load_client.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <nlohmann/json.hpp>
#include <string_view>
#include <thread>

#include "benchmarks/common/flags.h"
#include "runtime/error.h"

namespace grove::benchmarks {

// Note [A client that costs little]
// The clients share the CPU with the server they measure, so every cycle they
// spend is taken from it: requests are whole HTTP messages built before the
// run (headers and body sent in one send()), and an answer is read only as
// far as its status and Content-Length, then its bytes are skipped, never
// parsed. (With cpp-httplib's client a request took two sends and about ten
// polls and reads, a quarter of the process's CPU at saturation on sim.)
// serve_http_smoke_test checks that answers are counted.

// One row of the model's input as a whole KServe v2 HTTP request (f32 inputs
// only), in `encoding`.
std::vector<std::string> http_requests(const serving::ModelSignature& signature,
                                       const std::string& path, int port,
                                       const std::string& encoding, std::mt19937_64& rng) {
  std::uniform_real_distribution<float> uniform(-1.f, 1.f);
  const bool binary = encoding == "binary";
  std::vector<std::string> messages;
  for (int i = 0; i < 16; ++i) {
    nlohmann::json inputs = nlohmann::json::array();
    std::string bytes;
    for (const serving::RowSpec& input : signature.inputs) {
      if (input.dtype != runtime::DType::kF32) {
        throw UsageError(str_cat("serve_http: input '", input.name, "' is ",
                                 runtime::dtype_name(input.dtype), "; this benchmark sends f32"));
      }
      std::vector<int64_t> shape{1};
      shape.insert(shape.end(), input.row_shape.begin(), input.row_shape.end());
      std::vector<float> data(static_cast<size_t>(runtime::shape_numel(input.row_shape)));
      for (float& value : data) value = uniform(rng);
      nlohmann::json tensor{{"name", input.name}, {"shape", shape}, {"datatype", "FP32"}};
      if (binary) {
        tensor["parameters"] = {{"binary_data_size", data.size() * sizeof(float)}};
        bytes.append(reinterpret_cast<const char*>(data.data()), data.size() * sizeof(float));
      } else {
        tensor["data"] = data;
      }
      inputs.push_back(tensor);
    }
    nlohmann::json header{{"inputs", inputs}};
    if (binary) header["parameters"] = {{"binary_data_output", true}};
    const std::string text = header.dump();
    const std::string body = text + bytes;
    std::string message = str_cat("POST ", path, " HTTP/1.1\r\nHost: 127.0.0.1:", port,
                                  "\r\nContent-Length: ", body.size(), "\r\n");
    if (binary) {
      message += str_cat("Content-Type: application/octet-stream\r\n",
                         "Inference-Header-Content-Length: ", text.size(), "\r\n");
    } else {
      message += "Content-Type: application/json\r\n";
    }
    messages.push_back(message + "\r\n" + body);
  }
  return messages;
}

namespace {

// Note [Answers waited for with epoll]
// A client thread waits for the answers on its busy connections. ppoll()
// over them (up to 32) registered a wait on every socket and took it down
// again at each wake-up, once or twice per answer; an epoll set keeps the
// registrations, and a connection is armed once per request (EPOLLONESHOT,
// so an idle connection is never reported). A wait that must end at the
// next arrival, to the nanosecond, is a ppoll() on the epoll descriptor
// alone; one with every connection busy (or no arrivals left) waits in
// epoll_wait() itself. r2 of session 19 (H100, max batch 64, cudagraphs, two
// runs each): the clients spent 16.0-16.7 us per JSON answer against
// 19.1-20.4 with ppoll() (binary 13.2-13.6 against 15.6-16.4), and answered/s
// stayed within 2% (164,550-170,927 against 163,622-170,002 JSON). Test:
// benchmarks/serve_http/serve_http_smoke_test.sh (--connections 3: each
// answer counted once, none lost).
class AnswerWaiter {
 public:
  explicit AnswerWaiter(size_t connections)
      : epoll_fd_(::epoll_create1(EPOLL_CLOEXEC)), armed_fd_(connections, -1) {
    GROVE_CHECK(epoll_fd_ >= 0, "serve_http: epoll_create1: ", std::strerror(errno));
  }
  ~AnswerWaiter() { ::close(epoll_fd_); }
  AnswerWaiter(const AnswerWaiter&) = delete;
  AnswerWaiter& operator=(const AnswerWaiter&) = delete;

  // Reports connection `slot` (socket `fd`) once when it is next readable.
  void arm(size_t slot, int fd) {
    epoll_event event{};
    event.events = EPOLLIN | EPOLLONESHOT;
    event.data.u64 = slot;
    // A socket closed since was dropped from the set, and its number may be reused.
    if (armed_fd_[slot] == fd && ::epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, fd, &event) == 0) return;
    if (::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &event) != 0) {
      ::epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, fd, &event);
    }
    armed_fd_[slot] = fd;
  }

  // The slots readable within `timeout` (none: up to a minute); empty if none.
  const std::vector<size_t>& wait(const std::chrono::nanoseconds* timeout) {
    ready_.clear();
    epoll_event events[64];
    int count = 0;
    if (timeout != nullptr) {
      pollfd set{epoll_fd_, POLLIN, 0};
      const timespec until{static_cast<time_t>(timeout->count() / 1000000000),
                           static_cast<long>(timeout->count() % 1000000000)};
      if (::ppoll(&set, 1, &until, nullptr) > 0) count = ::epoll_wait(epoll_fd_, events, 64, 0);
    } else {
      do {
        count = ::epoll_wait(epoll_fd_, events, 64, 60000);
      } while (count < 0 && errno == EINTR);
    }
    for (int i = 0; i < count; ++i) ready_.push_back(static_cast<size_t>(events[i].data.u64));
    return ready_;
  }

 private:
  const int epoll_fd_;
  std::vector<int> armed_fd_;  // the socket each slot was last armed with
  std::vector<size_t> ready_;
};

// Where the value of header `name` (lowercase, with its colon) starts; npos if absent.
size_t find_field(std::string_view head, std::string_view name) {
  for (size_t line = head.find("\r\n"); line != std::string_view::npos;
       line = head.find("\r\n", line + 2)) {
    const size_t begin = line + 2;
    if (head.size() - begin < name.size()) break;
    bool same = true;
    for (size_t i = 0; i < name.size() && same; ++i) {
      same = std::tolower(static_cast<unsigned char>(head[begin + i])) == name[i];
    }
    if (same) return begin + name.size();
  }
  return std::string_view::npos;
}

}  // namespace

HttpLoadConnection::HttpLoadConnection(int port) : port_(port) { buffer_.resize(1 << 16); }

HttpLoadConnection::~HttpLoadConnection() { close_socket(); }

bool HttpLoadConnection::open() {
  fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd_ < 0) return fail("socket") >= 0;
  const int one = 1;
  // As the server (serving/http_server.cc): no wait for a delayed ACK.
  ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  timeval timeout{60, 0};
  ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port_));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd_, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0) {
    return fail("connect") >= 0;
  }
  return true;
}

bool HttpLoadConnection::send(const std::string& request) {
  if (fd_ < 0 && !open()) return false;  // error() says why
  for (size_t sent = 0; sent < request.size();) {
    const ssize_t n = ::send(fd_, request.data() + sent, request.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) return fail("send") >= 0;
    sent += static_cast<size_t>(n);
  }
  return true;
}

int HttpLoadConnection::read_answer() {
  if (fd_ < 0) return fail("read an answer: not connected");
  // The head: up to the blank line.
  size_t have = 0, head_end = std::string::npos;
  while (head_end == std::string::npos) {
    if (have == buffer_.size()) return fail("an answer's head over 64 KiB");
    const ssize_t n = ::recv(fd_, buffer_.data() + have, buffer_.size() - have, 0);
    if (n <= 0) return fail(n == 0 ? "recv: the server closed the connection" : "recv");
    const size_t from = have >= 3 ? have - 3 : 0;
    have += static_cast<size_t>(n);
    const size_t at = std::string_view(buffer_.data() + from, have - from).find("\r\n\r\n");
    if (at != std::string_view::npos) head_end = from + at + 4;
  }
  const std::string_view head(buffer_.data(), head_end);
  int status = 0;
  if (head.size() < 12 || head.substr(0, 5) != "HTTP/" ||
      std::sscanf(buffer_.data() + head.find(' ') + 1, "%3d", &status) != 1) {
    return fail("an answer without an HTTP status line");
  }
  const size_t field = find_field(head, "content-length:");
  if (field == std::string_view::npos) return fail("an answer without Content-Length");
  const size_t length = std::strtoull(head.data() + field, nullptr, 10);
  // The body: skipped, not kept.
  size_t body = have - head_end;
  while (body < length) {
    const ssize_t n = ::recv(fd_, buffer_.data(), std::min(buffer_.size(), length - body), 0);
    if (n <= 0) return fail("recv (body)");
    body += static_cast<size_t>(n);
  }
  if (body != length) return fail("bytes past an answer's Content-Length");
  if (find_field(head, "connection: close") != std::string_view::npos) close_socket();
  return status;
}

int HttpLoadConnection::exchange(const std::string& request) {
  if (!send(request)) return -1;
  return read_answer();
}

int HttpLoadConnection::fail(const char* what) {
  error_ = errno != 0 ? str_cat(what, ": ", std::strerror(errno)) : what;
  errno = 0;
  close_socket();
  return -1;
}

void HttpLoadConnection::close_socket() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

// Note [Requests in flight per client]
// A client with one connection sends its next request only once the last
// one was answered, so C clients hold at most C requests in flight, and
// answered/s can be no more than C over the round trip, whatever the server
// could do: 64 clients could not fill two batches of 64 (mean batch 44 on
// the H100), where the in-process benchmark (benchmarks/serve) keeps any
// number in flight. With --connections K each client thread holds K
// keep-alive connections and sends each request at its arrival time on one
// with nothing in flight, waiting for answers between arrivals (Note
// [Answers waited for with epoll])
// (one thread, so the clients cost the server's cores no more threads); only
// when all K are busy does a request wait, and its latency still counts from
// its arrival time. The benchmark's default is 8 clients of 64 connections
// (Note [Load clients sized for a shared host]), so that a table measures
// the server and not its clients. Test:
// benchmarks/serve_http/serve_http_smoke_test.sh (--connections 3).
ClientTally drive_http_client(const std::vector<std::unique_ptr<HttpLoadConnection>>& connections,
                              const std::vector<std::string>& messages, LoadClock::time_point start,
                              double window_s, double rate, int64_t clients, uint64_t seed,
                              int64_t client) {
  if (connections.size() == 1) {
    HttpLoadConnection& connection = *connections.front();
    return drive_client(
        [&](size_t n) { return connection.exchange(messages[n % messages.size()]); },
        [&] { return connection.error(); }, start, window_s, rate, clients, seed, client);
  }
  std::mt19937_64 rng(seed * 1000003 + static_cast<uint64_t>(client));  // as drive_client
  std::exponential_distribution<double> gap(rate / static_cast<double>(clients));
  ClientTally tally;
  tally.last_answer = start;
  const double cpu_before = thread_cpu_seconds();
  const size_t count = connections.size();
  std::vector<bool> busy(count, false);
  std::vector<LoadClock::time_point> scheduled(count);
  size_t in_flight = 0;
  AnswerWaiter waiter(count);  // Note [Answers waited for with epoll]
  auto count_answer = [&](size_t slot) {
    HttpLoadConnection& connection = *connections[slot];
    const int status = connection.read_answer();
    const LoadClock::time_point done = LoadClock::now();
    busy[slot] = false;
    --in_flight;
    count_http_status(tally, status, scheduled[slot], done, [&] { return connection.error(); });
  };
  double t = gap(rng);
  while (t < window_s || in_flight > 0) {
    const bool arrivals = t < window_s;
    const LoadClock::time_point next =
        start + std::chrono::duration_cast<LoadClock::duration>(std::chrono::duration<double>(t));
    LoadClock::time_point now = LoadClock::now();
    if (arrivals && now >= next && in_flight < count) {
      size_t slot = 0;
      while (busy[slot]) ++slot;
      ++tally.sent;
      if (now < start + std::chrono::duration_cast<LoadClock::duration>(
                            std::chrono::duration<double>(window_s))) {
        ++tally.sent_in_window;
      }
      if (connections[slot]->send(messages[tally.sent % messages.size()])) {
        busy[slot] = true;
        scheduled[slot] = next;
        ++in_flight;
        waiter.arm(slot, connections[slot]->fd());
      } else {
        tally.count_error([&] { return connections[slot]->error(); });
      }
      t += gap(rng);
      continue;
    }
    // Wait for an answer, or until the next arrival if a connection is free.
    bool until_arrival = false;
    std::chrono::nanoseconds wait = std::chrono::seconds(60);
    if (arrivals && in_flight < count) {
      if (in_flight == 0) {
        std::this_thread::sleep_until(next);  // nothing to read until then
        continue;
      }
      until_arrival = true;
      wait = std::max(std::chrono::nanoseconds(0),
                      std::chrono::duration_cast<std::chrono::nanoseconds>(next - now));
    }
    const std::vector<size_t>& ready = waiter.wait(until_arrival ? &wait : nullptr);
    if (ready.empty() && !until_arrival) {
      for (size_t slot = 0; slot < count; ++slot) {
        if (busy[slot]) count_answer(slot);  // each fails on its own timeout
      }
    }
    for (size_t slot : ready) {
      if (busy[slot]) count_answer(slot);
    }
  }
  tally.cpu_s = thread_cpu_seconds() - cpu_before;
  return tally;
}

}  // namespace grove::benchmarks
