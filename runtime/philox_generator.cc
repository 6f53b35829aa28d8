#include "runtime/philox_generator.h"

#include <deque>
#include <map>

#include "runtime/device_context.h"

namespace grove::runtime {
namespace {

constexpr const char* kName = "grove_store_generator_state";
constexpr const char* kPtx =
#include "runtime/generator_state_kernel_ptx.inc"
    ;

void host_store_generator_state(const LaunchDims*, const uint64_t* args) {
  *reinterpret_cast<int64_t*>(args[0]) = static_cast<int64_t>(args[2]);
  *reinterpret_cast<int64_t*>(args[1]) = static_cast<int64_t>(args[3]);
}

KernelHandle generator_state_kernel(Device device) {
  KernelSource source;
  source.name = kName;
  if (device.is_cuda()) {
    source.ptx = kPtx;
  } else {
    source.host_function = &host_store_generator_state;
  }
  return load_kernel_once(device, source);
}

void check_i64_scalar(const Tensor& tensor, const char* what) {
  GROVE_CHECK_AS(DTypeError, tensor.defined() && tensor.dtype() == DType::kI64,
                 "store_generator_state: the ", what, " tensor must be an i64 scalar, found ",
                 tensor.defined() ? tensor.str() : std::string("an undefined tensor"));
  GROVE_CHECK_AS(ShapeError, tensor.numel() == 1, "store_generator_state: the ", what,
                 " tensor must hold one element, found ", tensor.str());
}

}  // namespace

void PhiloxGenerator::manual_seed(uint64_t seed) {
  std::lock_guard<std::mutex> lock(mutex_);
  seed_ = seed;
  offset_ = 0;
}

uint64_t PhiloxGenerator::seed() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return seed_;
}

uint64_t PhiloxGenerator::offset() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return offset_;
}

PhiloxGenerator::Draw PhiloxGenerator::reserve(uint64_t count) {
  std::lock_guard<std::mutex> lock(mutex_);
  GROVE_CHECK(count <= (uint64_t{1} << 63) - offset_, "the Philox generator's offset ", offset_,
              " cannot advance by ", count, " more counters; call manual_seed() to restart it");
  Draw draw{seed_, offset_};
  offset_ += count;
  return draw;
}

PhiloxGenerator& default_generator(Device device) {
  static std::mutex mutex;
  static std::map<Device, std::unique_ptr<PhiloxGenerator>> generators;
  std::lock_guard<std::mutex> lock(mutex);
  std::unique_ptr<PhiloxGenerator>& generator = generators[device];
  if (generator == nullptr) generator = std::make_unique<PhiloxGenerator>();
  return *generator;
}

void store_generator_state(const Tensor& seed, const Tensor& offset, PhiloxGenerator::Draw draw) {
  check_i64_scalar(seed, "seed");
  check_i64_scalar(offset, "offset");
  GROVE_CHECK_AS(DeviceError, seed.device() == offset.device(),
                 "store_generator_state: the seed is on ", seed.device().str(),
                 " and the offset on ", offset.device().str());
  KernelArgs args;
  args.add_pointer(seed.data_ptr())
      .add_pointer(offset.data_ptr())
      .add_i64(static_cast<int64_t>(draw.seed))
      .add_i64(static_cast<int64_t>(draw.offset));
  LaunchDims dims;
  dims.grid.x = 1;
  dims.block.x = 1;
  DeviceContext& context = device_context(seed.device());
  context.platform().launch_kernel(generator_state_kernel(seed.device()), dims, args,
                                   context.current_stream());
}

const char* generator_state_ptx() { return kPtx; }

}  // namespace grove::runtime
