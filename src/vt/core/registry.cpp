#include "vt/registry.h"

#include <atomic>
#include <mutex>

#include "vt/cpu/backend.h"
#ifdef VT_WITH_CUDA
#include "vt/cuda/runtime.h"
#endif

namespace vt {

namespace {
struct RegistryState {
  std::atomic<bool> registered[kNumOps][kNumDeviceTypes] = {};
  std::atomic<int64_t> dispatches[kNumOps][kNumDeviceTypes] = {};
};
RegistryState& State() {
  static RegistryState state;
  return state;
}
}  // namespace

void EnsureBackendsRegistered() {
  static std::once_flag once;
  std::call_once(once, [] {
    cpu::RegisterKernels();
#ifdef VT_WITH_CUDA
    cuda::RegisterKernels();
#endif
  });
}

bool OpRegistered(OpId op, DeviceType device) {
  EnsureBackendsRegistered();
  return State().registered[static_cast<int>(op)][static_cast<int>(device)].load();
}

int64_t DispatchCount(OpId op, DeviceType device) {
  return State().dispatches[static_cast<int>(op)][static_cast<int>(device)].load();
}

namespace detail {

void MarkRegistered(OpId op, DeviceType device) {
  State().registered[static_cast<int>(op)][static_cast<int>(device)].store(true);
}

void CountDispatch(OpId op, DeviceType device) {
  State().dispatches[static_cast<int>(op)][static_cast<int>(device)].fetch_add(1, std::memory_order_relaxed);
}

void ThrowNoKernel(OpId op, DeviceType device) {
  std::string have;
  for (int d = 0; d < kNumDeviceTypes; ++d) {
    if (State().registered[static_cast<int>(op)][d].load()) {
      if (!have.empty()) have += ", ";
      have += DeviceTypeName(static_cast<DeviceType>(d));
    }
  }
  if (have.empty()) have = "none";
  throw Error(StrCat(OpName(op), ": no kernel for ", DeviceTypeName(device), " (registered: ", have, ")"));
}

}  // namespace detail
}  // namespace vt
