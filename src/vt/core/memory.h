// Allocation and copies of raw bytes on any device. The CUDA side lives in the CUDA
// backend; a build without it refuses CUDA devices here, by name.
#pragma once

#include <cstddef>
#include <memory>

#include "vt/device.h"
#include "vt/tensor.h"

namespace vt::detail {

// Owned bytes on `device` (64-byte aligned on the CPU).
std::shared_ptr<Storage> AllocateStorage(Device device, size_t nbytes);

// Copies n bytes between any two devices; returns when the copy is complete.
void CopyBytes(void* dst, Device dst_device, const void* src, Device src_device, size_t n);

// Returns when every write already issued to `device` (by any queue or copy) is complete.
void FinishWrites(Device device);

}  // namespace vt::detail
