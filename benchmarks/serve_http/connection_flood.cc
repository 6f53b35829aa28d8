#include "benchmarks/serve_http/connection_flood.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>

#include "benchmarks/common/flags.h"

namespace grove::benchmarks {

void ensure_file_limit(int64_t descriptors) {
  const rlim_t need = static_cast<rlim_t>(descriptors) + 1024;  // + the process's own
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) != 0) return;
  if (limit.rlim_cur >= need) return;
  rlimit raised = limit;
  raised.rlim_cur = std::max(limit.rlim_max, need);
  raised.rlim_max = std::max(limit.rlim_max, need);
  if (::setrlimit(RLIMIT_NOFILE, &raised) == 0) return;
  raised = limit;
  raised.rlim_cur = limit.rlim_max;
  ::setrlimit(RLIMIT_NOFILE, &raised);
  throw UsageError(str_cat("serve_http: ", descriptors, " connection ends need about ", need,
                           " open files in one process; the limit is ", limit.rlim_max,
                           " and could not be raised: run `ulimit -n ", need,
                           "` as root first, or ask for fewer"));
}

ConnectionFlood::ConnectionFlood(int port, FloodConfig config)
    : port_(port), config_(std::move(config)) {
  epoll_ = ::epoll_create1(EPOLL_CLOEXEC);
  if (epoll_ < 0) throw Error(str_cat("serve_http: epoll_create1: ", std::strerror(errno)));
  held_.resize(static_cast<size_t>(config_.idle + config_.slowloris));
  for (size_t i = 0; i < held_.size(); ++i) {
    held_[i].slow = static_cast<int64_t>(i) >= config_.idle;
    open_one(held_[i]);
    if (held_[i].fd < 0) {
      const std::string why = std::strerror(errno);
      stop();
      throw UsageError(str_cat("serve_http: could not open connection ", i + 1, " of ",
                               held_.size(), " to 127.0.0.1:", port_, ": ", why));
    }
  }
  thread_ = std::thread([this] { run(); });
}

ConnectionFlood::~ConnectionFlood() { stop(); }

void ConnectionFlood::open_one(Held& held) {
  held.sent = 0;
  held.fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (held.fd < 0) return;
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port_));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(held.fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0) {
    const int saved = errno;
    ::close(held.fd);
    held.fd = -1;
    errno = saved;
    return;
  }
  epoll_event event{};
  event.events = EPOLLIN | EPOLLRDHUP;
  event.data.ptr = &held;
  ::epoll_ctl(epoll_, EPOLL_CTL_ADD, held.fd, &event);
}

void ConnectionFlood::run() {
  std::vector<epoll_event> events(1024);
  auto next_trickle = std::chrono::steady_clock::now();
  const int groups = std::max(1, config_.trickle_groups);
  size_t tick = 0;
  char sink[4096];
  while (!stopping_) {
    const auto wait = std::chrono::duration_cast<std::chrono::milliseconds>(
        next_trickle - std::chrono::steady_clock::now());
    const int timeout_ms = static_cast<int>(std::clamp<int64_t>(wait.count(), 0, 50));
    const int ready =
        ::epoll_wait(epoll_, events.data(), static_cast<int>(events.size()), timeout_ms);
    for (int e = 0; e < ready; ++e) {
      Held& held = *static_cast<Held*>(events[static_cast<size_t>(e)].data.ptr);
      // The server answered (a 408 or 503) or closed: read it away; at its end, reopen.
      const ssize_t n = ::recv(held.fd, sink, sizeof(sink), MSG_DONTWAIT);
      if (n > 0 && !(events[static_cast<size_t>(e)].events & (EPOLLRDHUP | EPOLLHUP))) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) continue;
      ::epoll_ctl(epoll_, EPOLL_CTL_DEL, held.fd, nullptr);
      ::close(held.fd);
      ++reopened_;
      open_one(held);
    }
    const auto now = std::chrono::steady_clock::now();
    if (now < next_trickle) continue;
    next_trickle = now + std::chrono::microseconds(int64_t{config_.trickle_ms} * 1000 / groups);
    trickle_ns_.push_back(
        std::chrono::duration_cast<std::chrono::nanoseconds>(now.time_since_epoch()).count());
    const size_t group = tick++ % static_cast<size_t>(groups);
    size_t slow_index = 0;
    for (Held& held : held_) {
      if (!held.slow || held.fd < 0) continue;
      if (slow_index++ % static_cast<size_t>(groups) != group) continue;
      // One byte of the endless header: the request line, then header-value bytes.
      const char byte =
          held.sent < config_.trickle_bytes.size() ? config_.trickle_bytes[held.sent] : 'a';
      if (::send(held.fd, &byte, 1, MSG_NOSIGNAL | MSG_DONTWAIT) == 1) ++held.sent;
    }
  }
}

void ConnectionFlood::stop() {
  stopping_ = true;
  if (thread_.joinable()) thread_.join();
  for (Held& held : held_) {
    if (held.fd >= 0) ::close(held.fd);
    held.fd = -1;
  }
  if (epoll_ >= 0) ::close(epoll_);
  epoll_ = -1;
}

namespace {

constexpr const char* kHttp2Preface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

// A line from `fd` (without its newline); "" at end of file.
std::string read_line(int fd) {
  std::string line;
  char c;
  while (::read(fd, &c, 1) == 1 && c != '\n') line += c;
  return line;
}

}  // namespace

ChildProcess spawn_this_binary(const std::vector<std::string>& args) {
  int in[2], out[2];
  if (::pipe2(in, O_CLOEXEC) != 0 || ::pipe2(out, O_CLOEXEC) != 0) {
    throw Error(str_cat("serve_http: pipe: ", std::strerror(errno)));
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, in[0], 0);
  posix_spawn_file_actions_adddup2(&actions, out[1], 1);
  std::vector<char*> argv;
  for (const std::string& arg : args) argv.push_back(const_cast<char*>(arg.c_str()));
  argv.push_back(nullptr);
  ChildProcess child;
  const int spawned =
      ::posix_spawn(&child.pid, "/proc/self/exe", &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  ::close(in[0]);
  ::close(out[1]);
  if (spawned != 0) {
    ::close(in[1]);
    ::close(out[0]);
    throw Error(str_cat("serve_http: cannot start ", args.at(1), ": ", std::strerror(spawned)));
  }
  child.to_child = in[1];
  child.from_child = out[0];
  return child;
}

FloodProcess::FloodProcess(int port, const FloodConfig& config, bool http2) {
  const ChildProcess child = spawn_this_binary(
      {"serve_http", "--hold-connections", std::to_string(port), std::to_string(config.idle),
       std::to_string(config.slowloris), std::to_string(config.trickle_ms), http2 ? "h2" : "http",
       std::to_string(config.trickle_groups)});
  pid_ = child.pid;
  to_child_ = child.to_child;
  from_child_ = child.from_child;
  const std::string ready = read_line(from_child_);
  if (ready.rfind("holding ", 0) != 0) {
    stop();
    throw UsageError(str_cat("serve_http: the connection holder failed: ",
                             ready.empty() ? "it ended without a word" : ready));
  }
}

FloodProcess::~FloodProcess() { stop(); }

double FloodProcess::cpu_s() const {
  if (pid_ < 0) return -1;
  // /proc/PID/stat: utime and stime are fields 14 and 15, after the ")" that ends the name.
  std::ifstream stat(str_cat("/proc/", pid_, "/stat"));
  std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  const size_t name_end = text.rfind(')');
  if (name_end == std::string::npos) return -1;
  std::istringstream fields(text.substr(name_end + 2));
  std::string field;
  double user = 0, system = 0;
  for (int index = 3; index <= 15 && fields >> field; ++index) {
    if (index == 14) user = std::atof(field.c_str());
    if (index == 15) system = std::atof(field.c_str());
  }
  return (user + system) / static_cast<double>(::sysconf(_SC_CLK_TCK));
}

uint64_t FloodProcess::stop() {
  if (pid_ < 0) return 0;
  ::close(to_child_);
  const std::string last = read_line(from_child_);
  const std::string ticks = read_line(from_child_);
  if (ticks.rfind("ticks", 0) == 0) {
    size_t at = 5;
    while (at < ticks.size()) {
      size_t used = 0;
      try {
        trickle_ns_.push_back(std::stoll(ticks.substr(at), &used));
      } catch (const std::exception&) {
        break;
      }
      at += used;
    }
  }
  ::close(from_child_);
  int status = 0;
  ::waitpid(pid_, &status, 0);
  pid_ = -1;
  return last.rfind("reopened ", 0) == 0 ? std::stoull(last.substr(9)) : 0;
}

int hold_connections_main(int argc, char** argv) {
  try {
    if (argc != 7 && argc != 8) {
      throw UsageError("serve_http --hold-connections: expected 5 or 6 arguments");
    }
    FloodConfig config;
    const int port = std::stoi(argv[2]);
    config.idle = std::stoll(argv[3]);
    config.slowloris = std::stoll(argv[4]);
    config.trickle_ms = std::stoi(argv[5]);
    if (std::string(argv[6]) == "h2") config.trickle_bytes = kHttp2Preface;
    if (argc == 8) config.trickle_groups = std::stoi(argv[7]);
    ensure_file_limit(config.idle + config.slowloris);
    ConnectionFlood flood(port, config);
    std::printf("holding %lld\n", static_cast<long long>(config.idle + config.slowloris));
    std::fflush(stdout);
    char byte;
    while (::read(0, &byte, 1) > 0) {
    }
    flood.stop();
    std::printf("reopened %llu\nticks", static_cast<unsigned long long>(flood.reopened()));
    for (int64_t tick : flood.trickle_ns()) std::printf(" %lld", static_cast<long long>(tick));
    std::printf("\n");
    std::fflush(stdout);
    return 0;
  } catch (const std::exception& error) {
    std::printf("%s\n", error.what());
    std::fflush(stdout);
    return 1;
  }
}

}  // namespace grove::benchmarks
