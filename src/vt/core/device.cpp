#include "vt/device.h"

namespace vt {

const char* DeviceTypeName(DeviceType type) {
  switch (type) {
    case DeviceType::kCPU: return "cpu";
    case DeviceType::kCUDA: return "cuda";
  }
  return "?";
}

std::string ToString(Device device) {
  if (device.is_cpu()) return "cpu";
  return std::string(DeviceTypeName(device.type)) + ":" + std::to_string(device.index);
}

}  // namespace vt
