// A Device names where memory lives and work runs: plain host compute (cpu),
// the host emulation of CUDA semantics (sim), or a real GPU (cuda).
#pragma once

#include <compare>
#include <cstdint>
#include <functional>
#include <ostream>
#include <string>

namespace grove::runtime {

enum class DeviceType : uint8_t { kCpu = 0, kSim = 1, kCuda = 2 };
inline constexpr int kNumDeviceTypes = 3;

struct Device {
  DeviceType type = DeviceType::kCpu;
  int index = 0;

  bool is_cpu() const { return type == DeviceType::kCpu; }
  bool is_sim() const { return type == DeviceType::kSim; }
  bool is_cuda() const { return type == DeviceType::kCuda; }
  // Devices whose streams, capture and graphs follow CUDA's rules.
  bool supports_graphs() const { return type != DeviceType::kCpu; }

  friend bool operator==(const Device&, const Device&) = default;
  friend auto operator<=>(const Device&, const Device&) = default;

  std::string str() const;  // "cuda:0", "sim:0", "cpu"
  // Parses "cpu", "sim", "sim:1", "cuda", "cuda:0"; throws DeviceError otherwise.
  static Device parse(const std::string& text);
};

inline constexpr Device kCpuDevice{DeviceType::kCpu, 0};
inline constexpr Device kSimDevice{DeviceType::kSim, 0};
inline constexpr Device kCudaDevice{DeviceType::kCuda, 0};

const char* device_type_name(DeviceType type);
std::ostream& operator<<(std::ostream& stream, const Device& device);

}  // namespace grove::runtime

template <>
struct std::hash<grove::runtime::Device> {
  size_t operator()(const grove::runtime::Device& device) const noexcept {
    return (static_cast<size_t>(device.type) << 16) ^ static_cast<size_t>(device.index);
  }
};
