// `grove run --train` as one process per rank, torchrun-style (RANK,
// WORLD_SIZE, MASTER_ADDR, MASTER_PORT, LOCAL_RANK): two processes on sim
// reach the losses of the threaded `--gpus 2` run bitwise, and a rank that is
// misconfigured, alone, or left by its peer fails with a message naming why.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <nlohmann/json.hpp>
#include <thread>

#include "tests/cli/command_runner.h"

namespace grove::cli::testing {
namespace {

const char* const kGrove = "cli/grove";
const char* const kMlp = "benchmarks/models/mlp16x512.json";

// A loopback port the kernel picks and that nobody listens on once this returns.
int free_port() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof(address);
  EXPECT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&address), length), 0);
  EXPECT_EQ(getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length), 0);
  close(fd);
  return ntohs(address.sin_port);
}

std::vector<std::string> rank_env(int rank, int world, int port) {
  return {"RANK=" + std::to_string(rank), "WORLD_SIZE=" + std::to_string(world),
          "MASTER_ADDR=127.0.0.1", "MASTER_PORT=" + std::to_string(port),
          // A stuck rank fails the test in seconds, not in the default two minutes.
          "GROVE_COLLECTIVE_TIMEOUT_MS=20000"};
}

struct GroupRun {
  std::vector<CommandResult> ranks;
};

// Starts one `grove` per entry of `args` at once, as ranks 0, 1, ... of one
// group on a fresh port (again on another port when the first was taken
// between choosing it and rank 0 listening).
GroupRun run_group(const std::vector<std::vector<std::string>>& args,
                   const std::vector<std::vector<std::string>>& extra_env = {}) {
  const int world = static_cast<int>(args.size());
  GroupRun run;
  for (int attempt = 0; attempt < 3; ++attempt) {
    const int port = free_port();
    run.ranks.assign(args.size(), CommandResult{});
    std::vector<std::thread> threads;
    threads.reserve(world);
    for (int rank = 0; rank < world; ++rank) {
      threads.emplace_back([&, rank] {
        CommandOptions options;
        options.env = rank_env(rank, world, port);
        if (rank < static_cast<int>(extra_env.size())) {
          for (const std::string& assignment : extra_env[rank]) {
            options.env.push_back(assignment);
          }
        }
        run.ranks[rank] = run_command(kGrove, args[rank], options);
      });
    }
    for (std::thread& thread : threads) {
      thread.join();
    }
    if (run.ranks[0].err.find("in use") == std::string::npos) {
      break;
    }
  }
  return run;
}

std::vector<std::string> train_args(const std::string& backend, int iters) {
  return {"run",      kMlp,      "--device",
          "sim",      "--batch", "2",
          "--train",  "--iters", std::to_string(iters),
          "--warmup", "2",       "--backend",
          backend};
}

std::vector<std::string> with(std::vector<std::string> args, const std::vector<std::string>& more) {
  args.insert(args.end(), more.begin(), more.end());
  return args;
}

// Note [Host reduction order] (runtime/collectives/host_reduction.h) across processes.
TEST(GroveRunProcesses, TwoRankProcessesReachTheThreadedLosses) {
  for (const std::string backend : {"eager", "cudagraphs"}) {
    SCOPED_TRACE(backend);
    const std::string threaded_stats = scratch_path("threaded_" + backend + ".json");
    CommandResult threaded = run_command(
        kGrove, with(train_args(backend, 3), {"--gpus", "2", "--stats-json", threaded_stats}));
    ASSERT_EQ(threaded.status, 0) << threaded.out << threaded.err;

    const std::string rank_stats = scratch_path("rank0_" + backend + ".json");
    // LOCAL_RANK picks the device on the cudagraphs run; RANK does on the eager one.
    std::vector<std::vector<std::string>> local_ranks;
    if (backend == "cudagraphs") {
      local_ranks = {{"LOCAL_RANK=0"}, {"LOCAL_RANK=1"}};
    }
    GroupRun group = run_group(
        {with(train_args(backend, 3), {"--stats-json", rank_stats}), train_args(backend, 3)},
        local_ranks);
    ASSERT_EQ(group.ranks[0].status, 0) << group.ranks[0].out << group.ranks[0].err;
    ASSERT_EQ(group.ranks[1].status, 0) << group.ranks[1].out << group.ranks[1].err;
    EXPECT_NE(group.ranks[0].out.find("data-parallel on 2 processes, this one rank 0 on sim:0"),
              std::string::npos)
        << group.ranks[0].out;
    // Rank 1 reports in one line.
    EXPECT_NE(group.ranks[1].out.find("rank 1 of 2 on sim:1 done, 5 steps"), std::string::npos)
        << group.ranks[1].out;
    EXPECT_EQ(group.ranks[1].out.find("step median"), std::string::npos) << group.ranks[1].out;

    nlohmann::json expected = nlohmann::json::parse(read_text(threaded_stats));
    nlohmann::json got = nlohmann::json::parse(read_text(rank_stats));
    std::vector<double> expected_losses = expected["losses"];
    std::vector<double> losses = got["losses"];
    ASSERT_EQ(losses.size(), 5u);
    EXPECT_EQ(losses, expected_losses);  // bitwise: JSON keeps doubles exactly
    EXPECT_EQ(got["devices"], 2);
    EXPECT_EQ(got["buckets"], expected["buckets"]);
    if (backend == "cudagraphs") {
      // The backward (all-reduces included) replays from a graph in both runs.
      EXPECT_EQ(got["tree"]["replays"], expected["tree"]["replays"]);
      EXPECT_GT(got["tree"]["replays"].get<int>(), 0);
    }
  }
}

TEST(GroveRunProcesses, ARankWithoutMasterAddrIsToldTheVariable) {
  CommandOptions options;
  options.env = {"RANK=0", "WORLD_SIZE=2",
                 "MASTER_ADDR=", "MASTER_PORT=" + std::to_string(free_port())};
  CommandResult result = run_command(kGrove, train_args("eager", 1), options);
  EXPECT_EQ(result.status, 1) << result.out << result.err;
  EXPECT_NE(result.err.find("MASTER_ADDR is not set"), std::string::npos) << result.err;
}

TEST(GroveRunProcesses, GpusUnderRankVariablesIsAUsageError) {
  CommandOptions options;
  options.env = rank_env(0, 2, free_port());
  CommandResult result =
      run_command(kGrove, with(train_args("eager", 1), {"--gpus", "2"}), options);
  EXPECT_EQ(result.status, 2) << result.out << result.err;
  EXPECT_NE(result.err.find("drop --gpus and start one process per device"), std::string::npos)
      << result.err;
}

TEST(GroveRunProcesses, GroveIdFileVariablesOnSimAreAUsageError) {
  CommandOptions options;
  options.env = {"GROVE_RANK=0", "GROVE_WORLD_SIZE=2",
                 "GROVE_NCCL_ID_FILE=" + scratch_path("unused.id")};
  CommandResult result = run_command(kGrove, train_args("eager", 1), options);
  EXPECT_EQ(result.status, 2) << result.out << result.err;
  EXPECT_NE(result.err.find("on sim, ranks that are processes meet over TCP"), std::string::npos)
      << result.err;
}

TEST(GroveRunProcesses, ARankAloneGivesUpNamingRankZero) {
  const int port = free_port();
  CommandOptions options;
  options.env = rank_env(1, 2, port);
  options.env.push_back("GROVE_COLLECTIVE_TIMEOUT_MS=500");
  const auto start = std::chrono::steady_clock::now();
  CommandResult result = run_command(kGrove, train_args("eager", 1), options);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(20));
  EXPECT_EQ(result.status, 1) << result.out << result.err;
  EXPECT_NE(result.err.find("rank 1 could not reach rank 0 at 127.0.0.1:" + std::to_string(port)),
            std::string::npos)
      << result.err;
}

// Rank 1 runs fewer steps and exits: rank 0's next all-reduce names it instead of waiting.
TEST(GroveRunProcesses, ARankThatLeavesEarlyIsNamedByRankZero) {
  GroupRun group = run_group({train_args("eager", 5), train_args("eager", 1)});
  EXPECT_EQ(group.ranks[1].status, 0) << group.ranks[1].out << group.ranks[1].err;
  EXPECT_EQ(group.ranks[0].status, 1) << group.ranks[0].out << group.ranks[0].err;
  EXPECT_NE(group.ranks[0].err.find("rank 1 closed its connection"), std::string::npos)
      << group.ranks[0].err;
}

}  // namespace
}  // namespace grove::cli::testing
