// serve_http's gRPC clients in processes of their own (Note [gRPC clients
// apart from the server]): this binary run as `serve_http --grpc-clients PORT
// CLIENTS IN_FLIGHT`, holding CLIENTS channels (benchmarks/serve_http/
// grpc_load_client.h) and running their loads on one thread when told to
// start, up to IN_FLIGHT calls per client (Note [gRPC clients on one thread]).
//
//   GrpcClientProcess process(port, requests, 8, 1);  // returns once connected
//   process.start({.start = t0, .window_s = 0.6, .rate = 128000, .clients = 64,
//                  .seed = seed, .first_client = 0});
//   std::vector<ClientTally> tallies = process.finish();
#pragma once

#include <cstdint>
#include <vector>

#include "benchmarks/serve_http/load_loop.h"
#include "serving/kserve_v2_grpc.grpc.pb.h"

namespace grove::benchmarks {

struct LoadShare {
  LoadClock::time_point start;  // the window's start (CLOCK_MONOTONIC: one clock for all processes)
  double window_s = 0;
  double rate = 0;      // of all clients together
  int64_t clients = 0;  // all clients together
  uint64_t seed = 0;
  int64_t first_client = 0;  // this process's first client among them
};

class GrpcClientProcess {
 public:
  // Starts the process, sends it `requests`, and returns once its `clients`
  // channels are connected; Error with the child's message otherwise.
  GrpcClientProcess(int port, const std::vector<inference::ModelInferRequest>& requests,
                    int64_t clients, int64_t in_flight);
  ~GrpcClientProcess();
  GrpcClientProcess(const GrpcClientProcess&) = delete;
  GrpcClientProcess& operator=(const GrpcClientProcess&) = delete;

  void start(const LoadShare& share);
  // Waits for the clients' load to end; one tally per client.
  std::vector<ClientTally> finish();

 private:
  void end();
  int pid_ = -1;
  int to_child_ = -1;
  int from_child_ = -1;
};

// The child's main(): argv as above; requests and orders on stdin, results on stdout.
int grpc_clients_main(int argc, char** argv);

}  // namespace grove::benchmarks
