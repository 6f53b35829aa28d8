#include "runtime/device.h"

#include "runtime/error.h"

namespace grove::runtime {

const char* device_type_name(DeviceType type) {
  switch (type) {
    case DeviceType::kCpu:
      return "cpu";
    case DeviceType::kSim:
      return "sim";
    case DeviceType::kCuda:
      return "cuda";
  }
  return "?";
}

std::string Device::str() const {
  if (type == DeviceType::kCpu) return "cpu";
  return std::string(device_type_name(type)) + ":" + std::to_string(index);
}

Device Device::parse(const std::string& text) {
  std::string kind = text;
  int index = 0;
  if (auto colon = text.find(':'); colon != std::string::npos) {
    kind = text.substr(0, colon);
    std::string digits = text.substr(colon + 1);
    bool numeric = !digits.empty() && digits.size() < 6 &&
                   digits.find_first_not_of("0123456789") == std::string::npos;
    GROVE_CHECK_AS(DeviceError, numeric, "device '", text,
                   "': expected an index after ':' such as 'cuda:0'");
    index = std::stoi(digits);
  }
  if (kind == "cpu") return Device{DeviceType::kCpu, index};
  if (kind == "sim") return Device{DeviceType::kSim, index};
  if (kind == "cuda") return Device{DeviceType::kCuda, index};
  throw DeviceError(
      str_cat("unknown device '", text, "': expected cpu, sim, sim:N, cuda or cuda:N"));
}

std::ostream& operator<<(std::ostream& stream, const Device& device) {
  return stream << device.str();
}

}  // namespace grove::runtime
