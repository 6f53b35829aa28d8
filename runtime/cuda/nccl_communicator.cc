#include "runtime/cuda/nccl_communicator.h"

#include <cuda_runtime_api.h>

#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>

#include "runtime/cuda/nccl_library.h"
#include "runtime/logging.h"

namespace grove::runtime::collectives {
namespace {

using nccl_detail::nccl_library;

ncclComm_t as_comm(void* comm) { return static_cast<ncclComm_t>(comm); }

void check_cuda(cudaError_t status, const std::string& doing) {
  if (status == cudaSuccess) return;
  cudaGetLastError();
  throw DeviceError(
      str_cat(doing, ": ", cudaGetErrorName(status), " (", cudaGetErrorString(status), ")"));
}

std::string nccl_message(ncclResult_t result, ncclComm_t comm) {
  const nccl_detail::NcclLibrary& nccl = nccl_library();
  std::string text =
      str_cat(nccl.error_string(result), " (ncclResult ", static_cast<int>(result), ")");
  const char* last = nccl.last_error(comm);
  if (last != nullptr && *last != '\0') text += str_cat(": ", last);
  return text;
}

// Note [One thread per GPU]: never NVLink multicast; connect when the group forms.
void prepare_environment() {
  static std::once_flag once;
  std::call_once(once, [] {
    const char* nvls = std::getenv("NCCL_NVLS_ENABLE");
    if (nvls == nullptr || std::strcmp(nvls, "0") != 0) {
      if (nvls != nullptr) {
        log(LogLevel::kWarn, str_cat("NCCL_NVLS_ENABLE=", nvls,
                                     " ignored: grove never enables NVLink multicast; using 0"));
      }
      setenv("NCCL_NVLS_ENABLE", "0", 1);
    }
    if (std::getenv("NCCL_RUNTIME_CONNECT") == nullptr) setenv("NCCL_RUNTIME_CONNECT", "0", 1);
  });
}

ncclDataType_t nccl_dtype(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return ncclFloat32;
    case DType::kF16:
      return ncclFloat16;
    case DType::kBF16:
      return ncclBfloat16;
    case DType::kF64:
      return ncclFloat64;
    case DType::kI32:
      return ncclInt32;
    case DType::kI64:
      return ncclInt64;
    case DType::kBool:
      break;
  }
  throw DTypeError("all_reduce: bool buffers cannot be reduced; cast to an integer dtype first");
}

}  // namespace

bool nccl_available() { return nccl_detail::nccl_available(); }

std::string nccl_unique_id() {
  const nccl_detail::NcclLibrary& nccl = nccl_library();
  ncclUniqueId id;
  ncclResult_t result = nccl.get_unique_id(&id);
  GROVE_CHECK_AS(CommunicationError, result == ncclSuccess,
                 "ncclGetUniqueId failed: ", nccl.error_string(result),
                 "; check that the network interfaces NCCL bootstraps over are up "
                 "(NCCL_SOCKET_IFNAME)");
  return std::string(id.internal, sizeof(id.internal));
}

NcclCommunicator::NcclCommunicator(Device device, int rank, int world_size,
                                   const std::string& unique_id, std::chrono::milliseconds timeout)
    : device_(device), rank_(rank), world_size_(world_size), timeout_(timeout) {
  GROVE_CHECK_AS(DeviceError, device.is_cuda(), "the NCCL communicator serves cuda devices; ",
                 device.str(), " uses the host communicator");
  GROVE_CHECK_AS(CommunicationError, world_size >= 1 && rank >= 0 && rank < world_size,
                 "NCCL rank ", rank, " is outside [0, ", world_size,
                 "); set GROVE_RANK below GROVE_WORLD_SIZE");
  GROVE_CHECK_AS(CommunicationError, unique_id.size() == sizeof(ncclUniqueId), "NCCL unique id of ",
                 unique_id.size(), " bytes, expected ", sizeof(ncclUniqueId),
                 "; pass the id rank 0 made with nccl_unique_id() unchanged");
  const nccl_detail::NcclLibrary& nccl = nccl_library();
  prepare_environment();
  check_cuda(cudaSetDevice(device.index), str_cat("making ", device.str(), " current for NCCL"));
  ncclUniqueId id;
  std::memcpy(id.internal, unique_id.data(), sizeof(id.internal));
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  ncclComm_t comm = nullptr;
  ncclResult_t result = nccl.comm_init_rank_config(&comm, world_size, id, rank, &config);
  comm_ = comm;
  GROVE_CHECK_AS(CommunicationError, result == ncclSuccess || result == ncclInProgress,
                 "ncclCommInitRankConfig (rank ", rank, " of ", world_size, " on ", device.str(),
                 ") failed: ", nccl_message(result, comm));
  wait_ready(str_cat("joining the NCCL group as rank ", rank, " of ", world_size));
  int version = 0;
  nccl.get_version(&version);
  log(LogLevel::kInfo, str_cat("NCCL ", version, ": rank ", rank, " of ", world_size, " on ",
                               device.str(), " joined (NVLS off)"));
}

namespace {

class NcclCollectiveLibrary final : public CollectiveLibrary {
 public:
  bool available() override { return nccl_available(); }
  std::string unique_id() override { return nccl_unique_id(); }
  std::shared_ptr<Communicator> join(Device device, int rank, int world_size,
                                     const std::string& unique_id,
                                     std::chrono::milliseconds timeout) override {
    return std::make_shared<NcclCommunicator>(device, rank, world_size, unique_id, timeout);
  }
};

}  // namespace

CollectiveLibrary& nccl_collective_library() {
  static auto* instance = new NcclCollectiveLibrary();  // lives until exit
  return *instance;
}

NcclCommunicator::~NcclCommunicator() {
  if (comm_ == nullptr) return;
  const nccl_detail::NcclLibrary& nccl = nccl_library();
  cudaSetDevice(device_.index);
  nccl.comm_destroy(as_comm(comm_));
}

void NcclCommunicator::wait_ready(const std::string& what) {
  const nccl_detail::NcclLibrary& nccl = nccl_library();
  auto deadline = std::chrono::steady_clock::now() + timeout_;
  for (;;) {
    ncclResult_t state = ncclSuccess;
    ncclResult_t result = nccl.comm_get_async_error(as_comm(comm_), &state);
    if (result != ncclSuccess) state = result;
    if (state == ncclSuccess) return;
    if (state != ncclInProgress) {
      std::string message = nccl_message(state, as_comm(comm_));
      nccl.comm_abort(as_comm(comm_));
      comm_ = nullptr;
      throw CommunicationError(str_cat(device_.str(), ": NCCL failed while ", what, ": ", message,
                                       ". Run with NCCL_DEBUG=WARN for NCCL's own report"));
    }
    if (std::chrono::steady_clock::now() > deadline) {
      nccl.comm_abort(as_comm(comm_));
      comm_ = nullptr;
      throw CommunicationError(str_cat(
          device_.str(), ": rank ", rank_, " of ", world_size_, " waited ", timeout_.count(),
          " ms while ", what, "; a rank is missing or stuck. Start all ", world_size_,
          " ranks with the same id (GROVE_NCCL_ID_FILE) and distinct GROVE_RANK values, or "
          "raise GROVE_COLLECTIVE_TIMEOUT_MS"));
    }
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}

void NcclCommunicator::all_reduce(const std::vector<Buffer>& buffers, ReduceOp op,
                                  StreamHandle stream) {
  GROVE_CHECK_AS(CommunicationError, comm_ != nullptr, device_.str(),
                 ": this NCCL communicator failed earlier and was aborted; make a new group");
  const nccl_detail::NcclLibrary& nccl = nccl_library();
  const ncclRedOp_t nccl_op = op == ReduceOp::kSum ? ncclSum : ncclAvg;
  auto cuda_stream = static_cast<cudaStream_t>(stream.impl);
  std::vector<ncclDataType_t> dtypes;  // checked before the group opens
  for (const Buffer& buffer : buffers) dtypes.push_back(nccl_dtype(buffer.dtype));
  ncclResult_t result = nccl.group_start();
  for (size_t b = 0; b < buffers.size() && result == ncclSuccess; ++b) {
    result =
        nccl.all_reduce(buffers[b].data, buffers[b].data, static_cast<size_t>(buffers[b].count),
                        dtypes[b], nccl_op, as_comm(comm_), cuda_stream);
  }
  ncclResult_t ended = nccl.group_end();
  if (result == ncclSuccess) result = ended;
  if (result == ncclInProgress) {
    wait_ready(str_cat("enqueueing an all_reduce of ", buffers.size(), " buffers"));
    return;
  }
  GROVE_CHECK_AS(CommunicationError, result == ncclSuccess, device_.str(), ": ncclAllReduce of ",
                 buffers.size(), " buffers (rank ", rank_, " of ", world_size_,
                 ") failed: ", nccl_message(result, as_comm(comm_)));
}

}  // namespace grove::runtime::collectives
