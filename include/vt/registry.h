// The typed op registry.
//
// Each OpId carries its kernel's function type through OpTraits<id>::Fn (declared next to
// the op's public entry point in ops/<family>.h). A backend registers kernels from an
// explicit init function (cpu::RegisterKernels, cuda::RegisterKernels), called once from
// EnsureBackendsRegistered; registering with the wrong signature does not compile.
// Dispatch never falls back to another device's kernel: a missing kernel is an Error.
#pragma once

#include <array>
#include <cstdint>
#include <string>

#include "vt/device.h"
#include "vt/error.h"
#include "vt/op_id.h"

namespace vt {

template <OpId id>
struct OpTraits;  // specialised per op: `using Fn = void(Queue&, ...);`

// True when `device` has a kernel for `op` in this build.
bool OpRegistered(OpId op, DeviceType device);

// How many times `op` was dispatched to `device`'s kernel in this process. Tests use it to
// prove the kernel under test really ran (not, say, a CPU path on a CUDA test).
int64_t DispatchCount(OpId op, DeviceType device);

// Registers the kernels of every backend built into this library (idempotent, thread-safe).
void EnsureBackendsRegistered();

namespace detail {
void MarkRegistered(OpId op, DeviceType device);
void CountDispatch(OpId op, DeviceType device);
[[noreturn]] void ThrowNoKernel(OpId op, DeviceType device);

template <OpId id>
using KernelPtr = typename OpTraits<id>::Fn*;

// Function-local table of kernels for one op, one slot per device type.
template <OpId id>
std::array<KernelPtr<id>, kNumDeviceTypes>& KernelSlots() {
  static std::array<KernelPtr<id>, kNumDeviceTypes> slots{};
  return slots;
}
}  // namespace detail

template <OpId id>
void Register(DeviceType device, detail::KernelPtr<id> fn) {
  detail::KernelSlots<id>()[static_cast<int>(device)] = fn;
  detail::MarkRegistered(id, device);
}

// The kernel registered for `id` on `device`; throws "<Op>: no kernel for <device>
// (registered: ...)" when there is none.
template <OpId id>
detail::KernelPtr<id> Kernel(DeviceType device) {
  EnsureBackendsRegistered();
  auto fn = detail::KernelSlots<id>()[static_cast<int>(device)];
  if (fn == nullptr) detail::ThrowNoKernel(id, device);
  detail::CountDispatch(id, device);
  return fn;
}

}  // namespace vt
