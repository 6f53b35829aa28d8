#include "benchmarks/serve_http/grpc_client_process.h"

#include <absl/synchronization/mutex.h>
#include <pthread.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>

#include "benchmarks/common/flags.h"
#include "benchmarks/serve_http/connection_flood.h"
#include "benchmarks/serve_http/grpc_load_client.h"
#include "runtime/error.h"

namespace grove::benchmarks {

// Note [gRPC clients apart from the server]
// gRPC's C core polls every descriptor of a process through one epoll set,
// one thread at a time (the epoll1 engine), handing the poller role from
// thread to thread. serve_http's 64 blocking gRPC clients ran in the process
// of the server they measured, so each call's handoffs went through the
// server's own poller: on the H100 gRPC answered 13,000-15,000 calls/s where
// HTTP answered several times more. A real client is another process, so the
// gRPC clients run in child processes of 8 clients each (this binary, with
// --grpc-clients), started and connected before the window, told when it
// opens (steady_clock is CLOCK_MONOTONIC, one clock for every process), and
// send back each client's counts and latencies. Test:
// benchmarks/serve_http/serve_http_smoke_test.sh (gRPC rows, no errors).

namespace {

// Protocol on the child's stdin: "<count>\n", then each request as "<bytes>\n"
// and its serialized bytes; then "go <start ns> <window s> <rate> <clients>
// <seed> <first client>\n". On its stdout: "ready\n" (or "error <text>\n"),
// then per client "tally <sent> <answered> <rejected> <errors> <last ns>
// <latencies> <sent in window> <cpu s>\n", the latencies in microseconds on one line, and "error
// <first error>\n"; then "done\n".

std::string read_line(FILE* in) {
  std::string line;
  for (int c = std::fgetc(in); c != EOF && c != '\n'; c = std::fgetc(in)) {
    line += static_cast<char>(c);
  }
  return line;
}

int64_t since_epoch_ns(LoadClock::time_point t) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}

LoadClock::time_point from_epoch_ns(int64_t ns) {
  return LoadClock::time_point(
      std::chrono::duration_cast<LoadClock::duration>(std::chrono::nanoseconds(ns)));
}

}  // namespace

GrpcClientProcess::GrpcClientProcess(int port,
                                     const std::vector<inference::ModelInferRequest>& requests,
                                     int64_t clients, int64_t in_flight) {
  const ChildProcess child =
      spawn_this_binary({"serve_http", "--grpc-clients", std::to_string(port),
                         std::to_string(clients), std::to_string(in_flight)});
  pid_ = child.pid;
  to_child_ = child.to_child;
  from_child_ = child.from_child;
  std::string message = str_cat(requests.size(), "\n");
  for (const inference::ModelInferRequest& request : requests) {
    const std::string bytes = request.SerializeAsString();
    message += str_cat(bytes.size(), "\n");
    message += bytes;
  }
  for (size_t sent = 0; sent < message.size();) {
    const ssize_t n = ::write(to_child_, message.data() + sent, message.size() - sent);
    if (n <= 0) break;  // the child's answer says why
    sent += static_cast<size_t>(n);
  }
  std::string ready;  // read a byte at a time: nothing past its line
  char c;
  while (::read(from_child_, &c, 1) == 1 && c != '\n') ready += c;
  if (ready != "ready") {
    end();
    throw Error(str_cat("serve_http: a gRPC client process failed: ",
                        ready.empty() ? "it ended without a word" : ready));
  }
}

GrpcClientProcess::~GrpcClientProcess() { end(); }

void GrpcClientProcess::start(const LoadShare& share) {
  char line[256];
  const int length = std::snprintf(
      line, sizeof(line), "go %" PRId64 " %.17g %.17g %" PRId64 " %" PRIu64 " %" PRId64 "\n",
      since_epoch_ns(share.start), share.window_s, share.rate, share.clients, share.seed,
      share.first_client);
  if (::write(to_child_, line, static_cast<size_t>(length)) != length) {
    throw Error("serve_http: a gRPC client process is gone");
  }
}

std::vector<ClientTally> GrpcClientProcess::finish() {
  FILE* in = ::fdopen(from_child_, "r");
  from_child_ = -1;  // the FILE owns it now
  GROVE_CHECK(in != nullptr, "serve_http: fdopen: cannot read a gRPC client process");
  std::vector<ClientTally> tallies;
  for (std::string line = read_line(in); line.rfind("tally ", 0) == 0; line = read_line(in)) {
    ClientTally tally;
    int64_t last_ns = 0;
    size_t latencies = 0;
    if (std::sscanf(line.c_str(),
                    "tally %" SCNu64 " %" SCNu64 " %" SCNu64 " %" SCNu64 " %" SCNd64 " %zu %" SCNu64
                    " %lf",
                    &tally.sent, &tally.answered, &tally.rejected, &tally.errors, &last_ns,
                    &latencies, &tally.sent_in_window, &tally.cpu_s) != 8) {
      break;
    }
    tally.last_answer = from_epoch_ns(last_ns);
    tally.latencies_us.resize(latencies);
    for (double& latency : tally.latencies_us) {
      if (std::fscanf(in, "%lf", &latency) != 1) break;
    }
    read_line(in);  // the rest of the latencies' line
    const std::string error = read_line(in);
    tally.first_error = error.size() > 6 ? error.substr(6) : "";
    tallies.push_back(std::move(tally));
  }
  std::fclose(in);
  end();
  return tallies;
}

void GrpcClientProcess::end() {
  if (to_child_ >= 0) ::close(to_child_);
  to_child_ = -1;
  if (from_child_ >= 0) ::close(from_child_);
  from_child_ = -1;
  if (pid_ > 0) {
    int status = 0;
    ::waitpid(pid_, &status, 0);
  }
  pid_ = -1;
}

int grpc_clients_main(int argc, char** argv) {
  try {
    GROVE_CHECK_AS(UsageError, argc == 5,
                   "serve_http --grpc-clients: expected PORT CLIENTS IN_FLIGHT");
    // Note [gRPC without lock-order checks] (serving/grpc_server.cc) holds for
    // gRPC's client library too: with Debian's Abseil each lock in these
    // processes ran the deadlock detector (on sim, GraphCycles and
    // DeadlockCheck were ~7% of the clients' samples), and their CPU is taken
    // from the server they measure. GROVE_GRPC_CLIENT_LOCK_CHECKS=1 keeps them.
    const char* lock_checks = std::getenv("GROVE_GRPC_CLIENT_LOCK_CHECKS");
    if (lock_checks == nullptr || std::string(lock_checks) != "1") {
      absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
    }
    const int port = std::stoi(argv[2]);
    const int64_t clients = std::stoll(argv[3]);
    const int64_t in_flight = std::stoll(argv[4]);
    size_t count = 0;
    GROVE_CHECK(std::scanf("%zu", &count) == 1 && std::fgetc(stdin) == '\n' && count > 0,
                "no requests on stdin");
    std::vector<inference::ModelInferRequest> requests(count);
    for (inference::ModelInferRequest& request : requests) {
      size_t size = 0;
      GROVE_CHECK(std::scanf("%zu", &size) == 1 && std::fgetc(stdin) == '\n', "a request's size");
      std::string bytes(size, '\0');
      GROVE_CHECK(std::fread(bytes.data(), 1, size, stdin) == size, "a request's bytes");
      GROVE_CHECK(request.ParseFromString(bytes), "a request that does not parse");
    }
    std::vector<std::unique_ptr<GrpcLoadClient>> channels;
    for (int64_t c = 0; c < clients; ++c) {
      channels.push_back(std::make_unique<GrpcLoadClient>(port, requests));
    }
    std::printf("ready\n");
    std::fflush(stdout);
    int64_t start_ns = 0, all_clients = 0, first_client = 0;
    double window_s = 0, rate = 0;
    uint64_t seed = 0;
    if (std::scanf(" go %" SCNd64 " %lf %lf %" SCNd64 " %" SCNu64 " %" SCNd64, &start_ns, &window_s,
                   &rate, &all_clients, &seed, &first_client) != 6) {
      return 0;  // told to stop before a start
    }
    // Note [gRPC clients on one thread].
    pthread_setname_np(pthread_self(), "grpc-client");
    const std::vector<ClientTally> tallies =
        drive_grpc_clients(channels, in_flight, requests, from_epoch_ns(start_ns), window_s, rate,
                           all_clients, seed, first_client);
    for (const ClientTally& tally : tallies) {
      std::printf("tally %" PRIu64 " %" PRIu64 " %" PRIu64 " %" PRIu64 " %" PRId64 " %zu %" PRIu64
                  " %.6f\n",
                  tally.sent, tally.answered, tally.rejected, tally.errors,
                  since_epoch_ns(tally.last_answer), tally.latencies_us.size(),
                  tally.sent_in_window, tally.cpu_s);
      for (double latency : tally.latencies_us) std::printf("%.3f ", latency);
      std::string error = tally.first_error;
      std::replace(error.begin(), error.end(), '\n', ' ');
      std::printf("\nerror %s\n", error.c_str());
    }
    std::printf("done\n");
    std::fflush(stdout);
    return 0;
  } catch (const std::exception& error) {
    std::printf("error %s\n", error.what());
    std::fflush(stdout);
    return 1;
  }
}

}  // namespace grove::benchmarks
