// The TCP rendezvous of ranks that are processes (here threads, each with its
// own endpoint on loopback) and RankConfig from the torchrun-style
// environment: every failure is an error naming the variable or the rank, and
// none waits past its timeout.
#include "runtime/collectives/tcp_rendezvous.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <functional>
#include <optional>
#include <thread>

#include "runtime/collectives/setup.h"
#include "runtime/device_context.h"
#include "runtime/tensor.h"
#include "tests/common/test_util.h"

namespace grove::runtime::collectives {
namespace {

constexpr std::chrono::milliseconds kPatient(30000);
constexpr std::chrono::milliseconds kShort(300);

// A port nobody listens on (the kernel's ephemeral choice, released again).
int free_port() { return TcpListener::listen("127.0.0.1", 0, "a free port").port(); }

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& error) {
    return error.what();
  }
  return "<no error>";
}

void expect_contains(const std::string& text, const std::string& part) {
  EXPECT_NE(text.find(part), std::string::npos) << "'" << part << "' not in: " << text;
}

// Sets the variables for one test and restores the environment after it.
class Environment {
 public:
  Environment(std::initializer_list<std::pair<const char*, const char*>> values) {
    for (const char* name : kNames) {
      const char* old = std::getenv(name);
      saved_.emplace_back(name, old ? std::optional<std::string>(old) : std::nullopt);
      unsetenv(name);
    }
    for (const auto& [name, value] : values) {
      setenv(name, value, 1);
    }
  }
  ~Environment() {
    for (const auto& [name, value] : saved_) {
      if (value) {
        setenv(name, value->c_str(), 1);
      } else {
        unsetenv(name);
      }
    }
  }

 private:
  static constexpr const char* kNames[] = {
      "RANK",       "WORLD_SIZE", "MASTER_ADDR",      "MASTER_PORT",
      "LOCAL_RANK", "GROVE_RANK", "GROVE_WORLD_SIZE", "GROVE_NCCL_ID_FILE"};
  std::vector<std::pair<const char*, std::optional<std::string>>> saved_;
};

TEST(RankConfig, ReadsTheTorchrunVariables) {
  Environment environment({{"RANK", "1"},
                           {"WORLD_SIZE", "4"},
                           {"MASTER_ADDR", "10.1.2.3"},
                           {"MASTER_PORT", "29500"},
                           {"LOCAL_RANK", "0"}});
  EXPECT_TRUE(launched_as_rank());
  RankConfig config = RankConfig::from_environment();
  EXPECT_EQ(config.rank, 1);
  EXPECT_EQ(config.world_size, 4);
  EXPECT_EQ(config.master_addr, "10.1.2.3");
  EXPECT_EQ(config.master_port, 29500);
  EXPECT_EQ(config.device_index(), 0);  // LOCAL_RANK picks the device
  unsetenv("LOCAL_RANK");
  EXPECT_EQ(RankConfig::from_environment().device_index(), 1);  // else RANK
}

TEST(RankConfig, TorchrunErrorsNameTheVariable) {
  {
    Environment environment({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "127.0.0.1"}});
    std::string message = error_of([] { RankConfig::from_environment(); });
    expect_contains(message, "MASTER_PORT is not set");
    setenv("MASTER_PORT", "70000", 1);
    expect_contains(error_of([] { RankConfig::from_environment(); }),
                    "MASTER_PORT=70000 is not a TCP port");
    setenv("MASTER_PORT", "29x", 1);
    expect_contains(error_of([] { RankConfig::from_environment(); }),
                    "MASTER_PORT='29x' is not a non-negative integer");
    setenv("MASTER_PORT", "29500", 1);
    setenv("RANK", "two", 1);
    expect_contains(error_of([] { RankConfig::from_environment(); }),
                    "RANK='two' is not a non-negative integer");
    setenv("RANK", "2", 1);
    expect_contains(error_of([] { RankConfig::from_environment(); }),
                    "RANK=2 must be below WORLD_SIZE=2");
    setenv("RANK", "1", 1);
    unsetenv("MASTER_ADDR");
    expect_contains(error_of([] { RankConfig::from_environment(); }), "MASTER_ADDR is not set");
    setenv("MASTER_ADDR", "127.0.0.1", 1);
    setenv("LOCAL_RANK", "-1", 1);
    expect_contains(error_of([] { RankConfig::from_environment(); }),
                    "LOCAL_RANK='-1' is not a non-negative integer");
  }
  {
    Environment environment({{"WORLD_SIZE", "2"}});
    expect_contains(error_of([] { RankConfig::from_environment(); }), "RANK is not set");
  }
  {
    Environment nothing({});
    EXPECT_FALSE(launched_as_rank());
    std::string message = error_of([] { RankConfig::from_environment(); });
    expect_contains(message, "RANK is not set");
    expect_contains(message, "MASTER_ADDR");
    EXPECT_THROW(RankConfig::from_environment(), ConfigError);
  }
}

TEST(RankConfig, GroveVariablesWinOverTorchrunOnes) {
  Environment environment({{"RANK", "0"},
                           {"WORLD_SIZE", "8"},
                           {"MASTER_ADDR", "127.0.0.1"},
                           {"MASTER_PORT", "29500"},
                           {"GROVE_RANK", "1"},
                           {"GROVE_WORLD_SIZE", "2"},
                           {"GROVE_NCCL_ID_FILE", "/tmp/grove_unused.id"}});
  RankConfig config = RankConfig::from_environment();
  EXPECT_EQ(config.rank, 1);
  EXPECT_EQ(config.world_size, 2);
  EXPECT_EQ(config.id_file, "/tmp/grove_unused.id");
  EXPECT_TRUE(config.master_addr.empty());
}

TEST(TcpRendezvous, RankZeroHandsEveryRankTheGroupIdBytes) {
  constexpr int kWorld = 4;
  GROVE_SEEDED_RNG(rng);
  std::string id(128, '\0');  // an NCCL unique id's size, zero bytes included
  for (size_t i = 0; i < id.size(); i += 2) {
    id[i] = static_cast<char>(rng() & 0xff);
  }
  TcpListener listener = TcpListener::listen("127.0.0.1", 0, "the test's port");
  const int port = listener.port();
  std::vector<TcpGroup> groups(kWorld);
  std::vector<std::thread> threads;
  // Ranks 3, 2, 1 start first and retry until rank 0 listens... it already
  // does here; what matters is that arrival order does not.
  for (int rank = kWorld - 1; rank >= 0; --rank) {
    threads.emplace_back([&, rank] {
      groups[rank] = rank == 0 ? accept_ranks(
                                     listener, str_cat("127.0.0.1:", port), kWorld,
                                     [&] { return id; }, kPatient)
                               : connect_to_rank_zero("127.0.0.1", port, rank, kWorld, kPatient);
    });
  }
  for (std::thread& thread : threads) {
    thread.join();
  }
  for (int rank = 0; rank < kWorld; ++rank) {
    EXPECT_EQ(groups[rank].group_id, id) << "rank " << rank;
    EXPECT_EQ(groups[rank].rank, rank);
    EXPECT_EQ(groups[rank].links.size(), rank == 0 ? size_t{kWorld} : size_t{1});
  }
}

// On cuda rank 0 makes NCCL's id once every rank has come; where it cannot
// (no libnccl), the waiting ranks get its reason instead of a timeout.
TEST(TcpRendezvous, AGroupIdRankZeroCannotMakeFailsEveryRankWithTheReason) {
  TcpListener listener = TcpListener::listen("127.0.0.1", 0, "the test's port");
  const int port = listener.port();
  std::string rank_one;
  std::thread one([&] {
    rank_one = error_of([&] { connect_to_rank_zero("127.0.0.1", port, 1, 2, kPatient); });
  });
  std::string rank_zero = error_of([&] {
    accept_ranks(
        listener, "127.0.0.1:p", 2,
        []() -> std::string { throw CommunicationError("libnccl.so.2 cannot be opened"); },
        kPatient);
  });
  one.join();
  expect_contains(rank_zero, "rank 0 could not make the group id: libnccl.so.2 cannot be opened");
  expect_contains(rank_one, "rank 0 could not make the group id: libnccl.so.2 cannot be opened");
}

TEST(TcpRendezvous, RanksThatStartBeforeRankZeroWaitForIt) {
  const int port = free_port();
  RankConfig config;
  config.world_size = 2;
  config.master_addr = "127.0.0.1";
  config.master_port = port;
  config.timeout = kPatient;
  std::vector<std::vector<float>> got(2);
  std::vector<std::thread> threads;
  for (int rank : {1, 0}) {
    threads.emplace_back([&, rank] {
      if (rank == 0) {
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
      }
      RankConfig mine = config;
      mine.rank = rank;
      Device device{DeviceType::kSim, 20 + rank};
      std::shared_ptr<Communicator> communicator = join_group(device, mine);
      EXPECT_EQ(communicator->kind(), "host");
      EXPECT_EQ(&communicator_for(device), communicator.get());
      Tensor t = Tensor::from_vector(std::vector<float>{1.0f + rank, 10.0f * rank}, {2}, device);
      communicator->all_reduce({{t.data_ptr(), 2, DType::kF32}}, ReduceOp::kSum,
                               device_context(device).current_stream());
      got[rank] = t.to_vector<float>();
      leave_group(device);
    });
  }
  for (std::thread& thread : threads) {
    thread.join();
  }
  EXPECT_EQ(got[0], (std::vector<float>{3.0f, 10.0f}));
  EXPECT_EQ(got[1], got[0]);
}

TEST(TcpRendezvous, APortInUseNamesMasterPort) {
  TcpListener taken = TcpListener::listen("127.0.0.1", 0, "the test's port");
  RankConfig config;
  config.world_size = 2;
  config.master_addr = "127.0.0.1";
  config.master_port = taken.port();
  config.timeout = kShort;
  std::string message = error_of([&] { join_group(Device{DeviceType::kSim, 30}, config); });
  expect_contains(message, str_cat("MASTER_PORT=", taken.port()));
  expect_contains(message, "in use");
}

TEST(TcpRendezvous, RankZeroNamesTheRanksThatNeverCameAndTellsTheOthers) {
  TcpListener listener = TcpListener::listen("127.0.0.1", 0, "the test's port");
  const int port = listener.port();
  std::string rank_zero, rank_one;
  const auto start = std::chrono::steady_clock::now();
  std::thread one([&] {
    rank_one = error_of(
        [&] { connect_to_rank_zero("127.0.0.1", port, 1, 3, std::chrono::milliseconds(5000)); });
  });
  {
    // Rank 0 waits 1 s for ranks 1 and 2 (rank 1 comes at once), then its port closes.
    TcpListener owned = std::move(listener);
    rank_zero = error_of(
        [&] { accept_ranks(owned, "127.0.0.1:p", 3, nullptr, std::chrono::milliseconds(1000)); });
  }
  one.join();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
  expect_contains(rank_zero,
                  "rank 0 of 3 waited 1000 ms at 127.0.0.1:p for rank(s) 2, which "
                  "never connected");
  expect_contains(rank_one, "the group failed at rank 0");
  expect_contains(rank_one, "for rank(s) 2, which never connected");
}

TEST(TcpRendezvous, ARankWithoutRankZeroGivesUpAtItsTimeout) {
  const int port = free_port();
  const auto start = std::chrono::steady_clock::now();
  std::string message = error_of([&] { connect_to_rank_zero("127.0.0.1", port, 1, 2, kShort); });
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  expect_contains(message,
                  str_cat("rank 1 could not reach rank 0 at 127.0.0.1:", port, " within 300 ms"));
}

TEST(TcpRendezvous, DisagreeingWorldSizesAndDuplicateRanksFailTheGroup) {
  for (bool duplicate : {false, true}) {
    TcpListener listener = TcpListener::listen("127.0.0.1", 0, "the test's port");
    const int port = listener.port();
    const auto start = std::chrono::steady_clock::now();
    std::string rank_zero;
    std::vector<std::string> others(2);
    // Rank 0's process owns the port: it closes when the rendezvous fails.
    std::thread zero([&, owned = std::move(listener)]() mutable {
      rank_zero = error_of([&] { accept_ranks(owned, "127.0.0.1:p", 3, nullptr, kPatient); });
    });
    std::vector<std::thread> threads;
    threads.reserve(2);
    for (int i = 0; i < 2; ++i) {
      // The well-configured rank comes first (the second one's mistake fails
      // the group). Duplicate: two ranks 1. Otherwise: the second believes in 4 ranks.
      if (i == 1) {
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
      }
      threads.emplace_back([&, i] {
        others[i] = error_of([&] {
          connect_to_rank_zero("127.0.0.1", port, duplicate ? 1 : 1 + i,
                               !duplicate && i == 1 ? 4 : 3, std::chrono::milliseconds(3000));
        });
      });
    }
    for (std::thread& thread : threads) {
      thread.join();
    }
    zero.join();
    EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
    const std::string expected =
        duplicate ? "two processes connected to 127.0.0.1:p as rank 1" : "WORLD_SIZE=4";
    expect_contains(rank_zero, expected);
    // Both ranks are told why. Only on a machine so loaded that the first rank
    // came after the failure does it find the port closed (and, as a rank that
    // starts before rank 0 would, retry until its timeout).
    expect_contains(others[1], expected);
    EXPECT_TRUE(others[0].find(expected) != std::string::npos ||
                others[0].find("could not reach rank 0") != std::string::npos)
        << others[0];
  }
}

}  // namespace
}  // namespace grove::runtime::collectives
