// How the CPU norm and activation ops (norm.cpp, activation.cpp) fill their row arguments
// and run their rows. Portable code only: the ISA-specific files never include this.
#pragma once

#include "vt/cpu/backend.h"
#include "vt/cpu/elementwise_kernels.h"
#include "vt/tensor.h"

namespace vt::cpu {

// The arguments every row op sets: input x, output out, row width.
inline elementwise::RowArgs RowArgsOf(const Tensor& x, const Tensor& out, int64_t width) {
  elementwise::RowArgs a;
  a.x = x.data();
  a.x_dtype = x.dtype();
  a.out = out.data();
  a.out_dtype = out.dtype();
  a.width = width;
  return a;
}

inline void SetWeight(elementwise::RowArgs& a, const Tensor& weight, float eps) {
  a.weight = weight.data();
  a.weight_dtype = weight.dtype();
  a.eps = eps;
}

using RowKernel = void (*elementwise::KernelSet::*)(const elementwise::RowArgs&, int64_t, int64_t);

// Splits rows [0, rows) across the queue's pool; each range runs `kernel` of the vector
// set of the queue's ISA, or reference(r0, r1) where there is none.
template <typename Reference>
void RunRows(const Queue& q, int64_t rows, RowKernel kernel, const elementwise::RowArgs& a, Reference&& reference) {
  CpuQueue& cpu = Cpu(q);
  const elementwise::KernelSet* vec = elementwise::ForIsa(cpu.isa);
  cpu.pool.ParallelFor(rows, 1, [&](int64_t r0, int64_t r1) {
    if (vec != nullptr)
      (vec->*kernel)(a, r0, r1);
    else
      reference(r0, r1);
  });
}

}  // namespace vt::cpu
