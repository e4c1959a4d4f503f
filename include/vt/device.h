// Devices: where a tensor's bytes live and where a queue runs its kernels.
#pragma once

#include <cstdint>
#include <string>

namespace vt {

enum class DeviceType : int8_t { kCPU = 0, kCUDA = 1 };
inline constexpr int kNumDeviceTypes = 2;

// "cpu" / "cuda".
const char* DeviceTypeName(DeviceType type);

struct Device {
  DeviceType type = DeviceType::kCPU;
  int index = 0;

  static constexpr Device Cpu() { return {DeviceType::kCPU, 0}; }
  static constexpr Device Cuda(int index = 0) { return {DeviceType::kCUDA, index}; }
  bool is_cpu() const { return type == DeviceType::kCPU; }
  bool is_cuda() const { return type == DeviceType::kCUDA; }
  friend bool operator==(const Device&, const Device&) = default;
};

// "cpu" or "cuda:0".
std::string ToString(Device device);

}  // namespace vt
