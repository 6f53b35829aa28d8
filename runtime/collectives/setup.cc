#include "runtime/collectives/setup.h"

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <mutex>
#include <optional>
#include <sstream>
#include <thread>

#include "runtime/collectives/host_communicator.h"
#include "runtime/collectives/socket_host_group.h"
#include "runtime/collectives/tcp_rendezvous.h"
#include "runtime/environment.h"
#include "runtime/platform_factory.h"

namespace grove::runtime::collectives {
namespace {

constexpr const char* kGroveVariables = "GROVE_RANK, GROVE_WORLD_SIZE and GROVE_NCCL_ID_FILE";
constexpr const char* kTorchrunVariables =
    "RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT (as torchrun sets them)";

bool is_set(const char* name) {
  const char* text = std::getenv(name);
  return text != nullptr && *text != '\0';
}

// `required` names the variables every rank needs, for the message; nullptr
// when the variable is optional.
int env_int(const char* name, int fallback, const char* required) {
  const std::optional<long> value =
      integer_from_environment(name, 0, (1L << 30) - 1, " is not a non-negative integer");
  if (!value) {
    GROVE_CHECK_AS(ConfigError, required == nullptr, name, " is not set; every rank needs ",
                   required == nullptr ? "" : required);
    return fallback;
  }
  return static_cast<int>(*value);
}

// Rank 0 writes the id next to the file and renames it, so a reader never sees
// a partial id.
void write_id_file(const std::string& path, const std::string& id) {
  std::string temporary = path + ".tmp";
  {
    std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
    GROVE_CHECK_AS(CommunicationError, out.good(), "rank 0 cannot write the group id file '",
                   temporary, "'; point GROVE_NCCL_ID_FILE at a writable path all ranks can read");
    out.write(id.data(), static_cast<std::streamsize>(id.size()));
  }
  GROVE_CHECK_AS(CommunicationError, std::rename(temporary.c_str(), path.c_str()) == 0,
                 "rank 0 cannot rename '", temporary, "' to '", path, "'");
}

std::string read_id_file(const std::string& path, int rank, std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    std::ifstream in(path, std::ios::binary);
    if (in.good()) {
      std::ostringstream bytes;
      bytes << in.rdbuf();
      return bytes.str();
    }
    GROVE_CHECK_AS(CommunicationError, std::chrono::steady_clock::now() < deadline, "rank ", rank,
                   " waited ", timeout.count(), " ms for the group id file '", path,
                   "' that rank 0 writes; start rank 0 with the same GROVE_NCCL_ID_FILE (and "
                   "remove stale files from earlier runs before starting)");
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

std::shared_ptr<Communicator> make(Device device, int rank, int world_size,
                                   const std::string& group, const std::string& group_id,
                                   std::chrono::milliseconds timeout) {
  std::shared_ptr<Communicator> communicator;
  if (CollectiveLibrary* library = platform_collective_library(device)) {
    communicator = library->join(device, rank, world_size, group_id, timeout);
  } else {
    communicator = std::make_shared<HostCommunicator>(host_rendezvous(group, world_size, timeout),
                                                      rank, device);
  }
  set_communicator(device, communicator);
  return communicator;
}

// The TCP scheme: rank 0 listens and hands out the group id; NCCL (cuda) then
// makes its own connections, host ranks (sim, cpu) keep these.
std::shared_ptr<Communicator> join_tcp_group(Device device, const RankConfig& config) {
  GROVE_CHECK_AS(ConfigError, config.master_port >= 1 && config.master_port <= 65535,
                 "join_group: MASTER_PORT=", config.master_port,
                 " is not a TCP port; give every rank the same free port in 1 .. 65535");
  CollectiveLibrary* library = platform_collective_library(device);
  TcpGroup links;
  if (config.rank == 0) {
    TcpListener listener = TcpListener::listen(config.master_addr, config.master_port,
                                               str_cat("MASTER_PORT=", config.master_port));
    std::function<std::string()> make_group_id;
    if (library != nullptr) {
      make_group_id = [library] { return library->unique_id(); };
    }
    links = accept_ranks(listener, str_cat(config.master_addr, ":", config.master_port),
                         config.world_size, make_group_id, config.timeout);
  } else {
    links = connect_to_rank_zero(config.master_addr, config.master_port, config.rank,
                                 config.world_size, config.timeout);
  }
  std::shared_ptr<Communicator> communicator;
  if (library != nullptr) {
    communicator =
        library->join(device, config.rank, config.world_size, links.group_id, config.timeout);
  } else {
    communicator = make_socket_communicator(std::move(links), device, config.timeout);
  }
  set_communicator(device, communicator);
  return communicator;
}

}  // namespace

std::chrono::milliseconds default_collective_timeout() {
  return std::chrono::milliseconds(env_int("GROVE_COLLECTIVE_TIMEOUT_MS", 120000, nullptr));
}

RankConfig RankConfig::from_environment() {
  RankConfig config;
  config.local_rank = env_int("LOCAL_RANK", -1, nullptr);
  if (is_set("GROVE_RANK") || is_set("GROVE_WORLD_SIZE") || is_set("GROVE_NCCL_ID_FILE")) {
    config.rank = env_int("GROVE_RANK", 0, kGroveVariables);
    config.world_size = env_int("GROVE_WORLD_SIZE", 1, kGroveVariables);
    GROVE_CHECK_AS(ConfigError, is_set("GROVE_NCCL_ID_FILE"),
                   "GROVE_NCCL_ID_FILE is not set; give every rank the same path (rank 0 writes "
                   "the group id there)");
    config.id_file = std::getenv("GROVE_NCCL_ID_FILE");
    GROVE_CHECK_AS(ConfigError, config.world_size >= 1 && config.rank < config.world_size,
                   "GROVE_RANK=", config.rank,
                   " must be below GROVE_WORLD_SIZE=", config.world_size);
    return config;
  }
  const std::string needs = str_cat(kTorchrunVariables, ", or ", kGroveVariables);
  config.rank = env_int("RANK", 0, needs.c_str());
  config.world_size = env_int("WORLD_SIZE", 1, needs.c_str());
  GROVE_CHECK_AS(ConfigError, config.world_size >= 1 && config.rank < config.world_size,
                 "RANK=", config.rank, " must be below WORLD_SIZE=", config.world_size,
                 "; number the ranks 0 .. WORLD_SIZE - 1");
  GROVE_CHECK_AS(ConfigError, is_set("MASTER_ADDR"),
                 "MASTER_ADDR is not set; give every rank the address of rank 0's machine "
                 "(127.0.0.1 on one machine)");
  config.master_addr = std::getenv("MASTER_ADDR");
  config.master_port = env_int("MASTER_PORT", 0, needs.c_str());
  GROVE_CHECK_AS(ConfigError, config.master_port >= 1 && config.master_port <= 65535,
                 "MASTER_PORT=", config.master_port,
                 " is not a TCP port; give every rank the same free port in 1 .. 65535");
  return config;
}

bool launched_as_rank() {
  return is_set("RANK") || is_set("WORLD_SIZE") || is_set("GROVE_RANK") ||
         is_set("GROVE_WORLD_SIZE");
}

std::shared_ptr<Communicator> join_group(Device device, const RankConfig& config) {
  GROVE_CHECK_AS(ConfigError,
                 config.world_size >= 1 && config.rank >= 0 && config.rank < config.world_size,
                 "join_group: rank ", config.rank, " is outside [0, ", config.world_size, ")");
  if (!config.master_addr.empty()) {
    return join_tcp_group(device, config);
  }
  GROVE_CHECK_AS(ConfigError, !config.id_file.empty(),
                 "join_group: RankConfig has neither master_addr nor id_file; set MASTER_ADDR "
                 "and MASTER_PORT, or GROVE_NCCL_ID_FILE");
  std::string group_id;
  if (CollectiveLibrary* library = platform_collective_library(device)) {
    if (config.rank == 0) {
      group_id = library->unique_id();
      write_id_file(config.id_file, group_id);
    } else {
      group_id = read_id_file(config.id_file, config.rank, config.timeout);
    }
  }
  return make(device, config.rank, config.world_size, "file:" + config.id_file, group_id,
              config.timeout);
}

std::shared_ptr<Communicator> join_local_group(Device device, int rank, int world_size,
                                               const std::string& group_name,
                                               std::chrono::milliseconds timeout) {
  std::string group_id;
  if (CollectiveLibrary* library = platform_collective_library(device)) {
    static std::mutex mutex;
    static auto* ids = new std::map<std::pair<std::string, int>, std::string>();
    std::lock_guard<std::mutex> lock(mutex);
    std::string& id = (*ids)[{group_name, world_size}];
    if (id.empty()) id = library->unique_id();
    group_id = id;
  }
  return make(device, rank, world_size, "local:" + group_name, group_id, timeout);
}

std::string new_group_id(Device device) {
  if (CollectiveLibrary* library = platform_collective_library(device)) return library->unique_id();
  const char* master = std::getenv("MASTER_ADDR");
  const std::string address = master != nullptr && *master != '\0' ? master : "127.0.0.1";
  // Note [Group ids handed out by the caller]. The port is free now; rank 0
  // listens on it again when it joins (a port another process takes in
  // between fails the join with the port's name).
  const int port = TcpListener::listen(address, 0, "a free port for the group id").port();
  return str_cat("tcp:", address, ":", port);
}

std::shared_ptr<Communicator> join_group_by_id(Device device, int rank, int world_size,
                                               const std::string& group_id,
                                               std::chrono::milliseconds timeout) {
  GROVE_CHECK_AS(ConfigError, world_size >= 1 && rank >= 0 && rank < world_size,
                 "join_group_by_id: rank ", rank, " is outside [0, ", world_size, ")");
  if (CollectiveLibrary* library = platform_collective_library(device)) {
    GROVE_CHECK_AS(ConfigError, group_id.rfind("tcp:", 0) != 0, "join_group_by_id: the group id '",
                   group_id, "' was made for sim or cpu, but ", device.str(),
                   " needs the collective library's id; make it with "
                   "new_group_id on the same device type");
    std::shared_ptr<Communicator> communicator =
        library->join(device, rank, world_size, group_id, timeout);
    set_communicator(device, communicator);
    return communicator;
  }
  const size_t colon = group_id.rfind(':');
  GROVE_CHECK_AS(ConfigError, group_id.rfind("tcp:", 0) == 0 && colon > 4,
                 "join_group_by_id: ", device.str(),
                 " needs a group id \"tcp:ADDRESS:PORT\" from new_group_id on a sim or cpu "
                 "device; found ",
                 group_id.size(), " bytes that are not one");
  RankConfig config;
  config.rank = rank;
  config.world_size = world_size;
  config.timeout = timeout;
  config.master_addr = group_id.substr(4, colon - 4);
  char* end = nullptr;
  config.master_port = static_cast<int>(std::strtol(group_id.c_str() + colon + 1, &end, 10));
  return join_tcp_group(device, config);
}

void leave_group(Device device) { set_communicator(device, nullptr); }

}  // namespace grove::runtime::collectives
