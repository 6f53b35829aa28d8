// The socket communicator (a HostCommunicator over a SocketHostGroup): ranks
// with their own TCP endpoints on loopback, here threads of this process
// standing in for processes (tests/cli/run_processes_test.cc runs real ones).
// Its results must equal the threaded HostRendezvous's bitwise, in eager
// stream order and recorded into a sim graph, and every failure must name the
// rank.
#include "runtime/collectives/socket_host_group.h"

#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <thread>

#include "runtime/collectives/host_communicator.h"
#include "runtime/collectives/setup.h"
#include "runtime/collectives/tcp_rendezvous.h"
#include "runtime/device_context.h"
#include "runtime/graph_recording.h"
#include "runtime/tensor.h"
#include "tests/common/test_util.h"

namespace grove::runtime::collectives {
namespace {

constexpr std::chrono::milliseconds kPatient(30000);

// Runs fn(rank) on `world` threads and rethrows the first failure.
void run_ranks(int world, const std::function<void(int)>& fn) {
  std::vector<std::exception_ptr> errors(static_cast<size_t>(world));
  std::vector<std::thread> threads;
  threads.reserve(world);
  for (int rank = 0; rank < world; ++rank) {
    threads.emplace_back([&, rank] {
      try {
        fn(rank);
      } catch (...) {
        errors[static_cast<size_t>(rank)] = std::current_exception();
      }
    });
  }
  for (std::thread& thread : threads) {
    thread.join();
  }
  for (const std::exception_ptr& error : errors) {
    if (error) {
      std::rethrow_exception(error);
    }
  }
}

// Every rank's TCP group on loopback, rank 0 on an ephemeral port.
std::vector<TcpGroup> connect_ranks(int world, std::chrono::milliseconds timeout = kPatient) {
  TcpListener listener = TcpListener::listen("127.0.0.1", 0, "the test's port");
  const int port = listener.port();
  std::vector<TcpGroup> groups(static_cast<size_t>(world));
  run_ranks(world, [&](int rank) {
    groups[static_cast<size_t>(rank)] =
        rank == 0 ? accept_ranks(listener, str_cat("127.0.0.1:", port), world, nullptr, timeout)
                  : connect_to_rank_zero("127.0.0.1", port, rank, world, timeout);
  });
  return groups;
}

// One rank's data: an f32, a bf16 and an i64 buffer.
struct RankData {
  std::vector<float> f32;
  std::vector<float> bf16;  // values, made bf16 on the device
  std::vector<int64_t> i64;
};

std::vector<RankData> random_data(int world, std::mt19937& rng) {
  std::vector<RankData> data;
  for (int r = 0; r < world; ++r) {
    // Magnitudes far apart, so that an order or precision change shows in the bits.
    std::vector<float> f32 = grove::testing::random_floats(rng, 53, -4.0f, 4.0f);
    for (size_t i = 0; i < f32.size(); i += 3) {
      f32[i] *= 1e7f;
    }
    data.push_back({f32, grove::testing::random_floats(rng, 9),
                    grove::testing::random_ints(rng, 11, -90, 90)});
  }
  return data;
}

// The bytes each rank ends with after a sum of all three buffers, then a mean
// of the f32 and bf16 ones, issued through `communicator`'s stream kernel.
std::vector<uint8_t> reduce_on_rank(Communicator& communicator, const RankData& data) {
  const Device device = communicator.device();
  Tensor f32 = Tensor::from_vector(data.f32, {static_cast<int64_t>(data.f32.size())}, device);
  std::vector<uint16_t> bf16_bits(data.bf16.size());
  for (size_t i = 0; i < data.bf16.size(); ++i) {
    store_element(&bf16_bits[i], DType::kBF16, data.bf16[i]);
  }
  Tensor bf16 = Tensor::from_host(bf16_bits.data(), {static_cast<int64_t>(bf16_bits.size())},
                                  DType::kBF16, device);
  Tensor i64 = Tensor::from_vector(data.i64, {static_cast<int64_t>(data.i64.size())}, device);
  std::vector<Buffer> all = {{f32.data_ptr(), f32.numel(), DType::kF32},
                             {bf16.data_ptr(), bf16.numel(), DType::kBF16},
                             {i64.data_ptr(), i64.numel(), DType::kI64}};
  StreamHandle stream = device_context(device).current_stream();
  communicator.all_reduce(all, ReduceOp::kSum, stream);
  communicator.all_reduce({all[0], all[1]}, ReduceOp::kMean, stream);
  std::vector<uint8_t> bytes;
  for (const Tensor& tensor : {f32, bf16, i64}) {
    std::vector<uint8_t> raw = tensor.to_host_bytes();
    bytes.insert(bytes.end(), raw.begin(), raw.end());
  }
  return bytes;
}

TEST(SocketHostGroup, AllReduceEqualsTheThreadedOneBitwise) {
  constexpr int kWorld = 3;
  GROVE_SEEDED_RNG(rng);
  std::vector<RankData> data = random_data(kWorld, rng);
  std::vector<std::vector<uint8_t>> threaded(kWorld), sockets(kWorld);
  run_ranks(kWorld, [&](int rank) {
    Device device{DeviceType::kSim, rank};
    auto communicator = join_local_group(device, rank, kWorld, "socket.bitwise", kPatient);
    threaded[static_cast<size_t>(rank)] = reduce_on_rank(*communicator, data[rank]);
    leave_group(device);
  });
  std::vector<TcpGroup> groups = connect_ranks(kWorld);
  run_ranks(kWorld, [&](int rank) {
    Device device{DeviceType::kSim, rank};
    auto communicator =
        make_socket_communicator(std::move(groups[static_cast<size_t>(rank)]), device, kPatient);
    EXPECT_EQ(communicator->kind(), "host");
    EXPECT_EQ(communicator->world_size(), kWorld);
    sockets[static_cast<size_t>(rank)] = reduce_on_rank(*communicator, data[rank]);
  });
  for (int r = 0; r < kWorld; ++r) {
    EXPECT_EQ(sockets[r], threaded[r]) << "rank " << r;
    EXPECT_EQ(sockets[r], sockets[0]) << "rank " << r;
  }
}

// Note [Host reduction order] holds inside graphs too: the collective is a
// host kernel recorded during capture, run on every replay and not before.
TEST(SocketHostGroup, CapturedAllReduceRunsOnEveryReplayLikeTheThreadedOne) {
  constexpr int kWorld = 2;
  GROVE_SEEDED_RNG(rng);
  std::vector<std::vector<float>> values;
  values.reserve(kWorld);
  for (int r = 0; r < kWorld; ++r) {
    values.push_back(grove::testing::random_floats(rng, 17));
  }
  // Per rank: after capture, after the first replay, after the second.
  using Snapshots = std::vector<std::vector<float>>;
  auto capture_and_replay = [&](Communicator& communicator) {
    const Device device = communicator.device();
    Tensor t = Tensor::from_vector(values[communicator.rank()], {17}, device);
    DeviceContext& context = device_context(device);
    StreamHandle stream = context.create_stream();
    GraphRecording recording(device);
    recording.capture_begin(stream, context.allocator().create_pool());
    communicator.all_reduce({{t.data_ptr(), 17, DType::kF32}}, ReduceOp::kSum, stream);
    recording.capture_end();
    recording.instantiate();
    Snapshots snapshots = {t.to_vector<float>()};
    for (int replay = 0; replay < 2; ++replay) {
      recording.replay(stream);
      context.platform().synchronize_stream(stream);
      snapshots.push_back(t.to_vector<float>());
    }
    return snapshots;
  };
  std::vector<Snapshots> threaded(kWorld), sockets(kWorld);
  run_ranks(kWorld, [&](int rank) {
    Device device{DeviceType::kSim, rank};
    auto communicator = join_local_group(device, rank, kWorld, "socket.capture", kPatient);
    threaded[static_cast<size_t>(rank)] = capture_and_replay(*communicator);
    leave_group(device);
  });
  std::vector<TcpGroup> groups = connect_ranks(kWorld);
  run_ranks(kWorld, [&](int rank) {
    auto communicator = make_socket_communicator(std::move(groups[static_cast<size_t>(rank)]),
                                                 Device{DeviceType::kSim, rank}, kPatient);
    sockets[static_cast<size_t>(rank)] = capture_and_replay(*communicator);
  });
  for (int r = 0; r < kWorld; ++r) {
    EXPECT_EQ(sockets[r][0], values[r]) << "the capture ran the collective on rank " << r;
    EXPECT_NE(sockets[r][1], values[r]) << "the replay skipped the collective on rank " << r;
    EXPECT_EQ(sockets[r], threaded[r]) << "rank " << r;
  }
}

TEST(SocketHostGroup, ARankThatClosesMidRunIsNamedAndTheGroupStaysFailed) {
  std::vector<TcpGroup> groups = connect_ranks(2);
  groups[1].links[0].close();  // rank 1's process exits
  auto group = std::make_shared<SocketHostGroup>(std::move(groups[0]), kPatient);
  std::vector<float> values = {1.5f, -2.0f};
  for (int attempt = 0; attempt < 2; ++attempt) {
    try {
      group->all_reduce(0, {{values.data(), 2, DType::kF32}}, ReduceOp::kSum);
      FAIL() << "expected CommunicationError";
    } catch (const CommunicationError& error) {
      EXPECT_NE(std::string(error.what()).find("rank 1 closed its connection"), std::string::npos)
          << error.what();
      EXPECT_NE(std::string(error.what()).find("collective #1"), std::string::npos) << error.what();
    }
  }
}

TEST(SocketHostGroup, ARankThatNeverArrivesTimesOutOnRankZeroAndRankOneLearnsIt) {
  constexpr std::chrono::milliseconds kShort(300);
  std::vector<TcpGroup> groups = connect_ranks(2);
  SocketHostGroup rank_zero(std::move(groups[0]), kShort);
  SocketHostGroup rank_one(std::move(groups[1]), kShort);
  std::vector<float> values = {1.0f, 2.0f, 3.0f};
  const auto start = std::chrono::steady_clock::now();
  try {
    rank_zero.all_reduce(0, {{values.data(), 3, DType::kF32}}, ReduceOp::kSum);
    FAIL() << "expected CommunicationError";
  } catch (const CommunicationError& error) {
    EXPECT_NE(std::string(error.what()).find("waited 300 ms for rank 1, which never arrived"),
              std::string::npos)
        << error.what();
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  // Rank 1 arrives late: rank 0 has closed the group.
  try {
    rank_one.all_reduce(1, {{values.data(), 3, DType::kF32}}, ReduceOp::kSum);
    FAIL() << "expected CommunicationError";
  } catch (const CommunicationError& error) {
    EXPECT_NE(std::string(error.what()).find("rank 0 closed its connection to rank 1"),
              std::string::npos)
        << error.what();
  }
}

TEST(SocketHostGroup, MismatchedBucketsFailOnEveryRank) {
  std::vector<TcpGroup> groups = connect_ranks(3);
  std::vector<std::string> messages(3);
  run_ranks(3, [&](int rank) {
    SocketHostGroup group(std::move(groups[static_cast<size_t>(rank)]), kPatient);
    std::vector<float> values(8, 0.5f);
    try {
      group.all_reduce(rank, {{values.data(), rank == 2 ? 4 : 8, DType::kF32}}, ReduceOp::kSum);
    } catch (const CommunicationError& error) {
      messages[static_cast<size_t>(rank)] = error.what();
    }
  });
  for (const std::string& message : messages) {
    EXPECT_NE(message.find("every rank must reduce buffers of the same shapes"), std::string::npos)
        << message;
    EXPECT_NE(message.find("on rank 2"), std::string::npos) << message;
  }
}

}  // namespace
}  // namespace grove::runtime::collectives
