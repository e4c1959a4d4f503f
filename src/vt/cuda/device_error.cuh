// Device side of device_error.h: how a kernel records an index error.
#pragma once

#include <cuda_runtime.h>

#include "vt/cuda/device_error.h"

namespace vt::cuda {

// Records the first error on this device (later ones are dropped).
__device__ __forceinline__ void RecordIndexError(IndexErrorRecord* r, IndexError code, long long index,
                                                 long long value, long long bound, long long aux = 0) {
  if (atomicCAS(&r->code, 0ull, static_cast<unsigned long long>(code)) == 0ull) {
    r->index = index;
    r->value = value;
    r->bound = bound;
    r->aux = aux;
  }
}

}  // namespace vt::cuda
