// CPU QuantFp8Static: the vector kernel of the queue's ISA, or the scalar reference.
#include <algorithm>
#include <cmath>

#include "vt/cpu/backend.h"
#include "vt/cpu/elementwise_kernels.h"
#include "vt/cpu/reference.h"
#include "vt/ops/quant.h"

namespace vt::cpu {

namespace {
// Elements per parallel block: large enough to amortise the hand-off, small enough to
// split a decode-sized activation across threads.
constexpr int64_t kGrain = 16384;

void QuantFp8StaticCpu(const Queue& q, const Tensor& out, const Tensor& x, float input_scale) {
  CpuQueue& cpu = Cpu(q);
  const elementwise::KernelSet* vec = elementwise::ForIsa(cpu.isa);
  cpu.pool.ParallelFor(x.numel(), kGrain, [&](int64_t b, int64_t e) {
    if (vec != nullptr)
      vec->quant_fp8(x.data(), x.dtype(), out.data_as<uint8_t>(), b, e, input_scale);
    else
      ref::QuantFp8Static(out, x, input_scale, b, e);
  });
}
// QuantFp8PerTokenGroup: rows in parallel, by the queue's vector kernels (elementwise_simd.h)
// where it has them, else here: per group one pass for amax, one to quantize, on the typed
// elements (the reference, which the scalar ISA level runs, goes through
// LoadFloat). The max of magnitudes is
// exact in any order, so the scale is the same whatever the loop order.
template <typename T, float (*Load)(T)>
void QuantGroupsRows(const T* x, uint8_t* out, float* scales, int64_t K, int64_t G, int64_t group_size,
                     float amax_floor, float scale_floor, int64_t m0, int64_t m1) {
  for (int64_t m = m0; m < m1; ++m) {
    const T* xr = x + m * K;
    uint8_t* orow = out + m * K;
    for (int64_t g = 0; g < G; ++g) {
      const int64_t k0 = g * group_size, n = std::min(K, k0 + group_size) - k0;
      // Four independent maxima (NaN fails the comparison and is left out).
      float mx[4] = {0.0f, 0.0f, 0.0f, 0.0f};
      int64_t k = 0;
      for (; k + 4 <= n; k += 4)
        for (int j = 0; j < 4; ++j) {
          const float v = std::fabs(Load(xr[k0 + k + j]));
          mx[j] = v > mx[j] ? v : mx[j];
        }
      for (; k < n; ++k) {
        const float v = std::fabs(Load(xr[k0 + k]));
        mx[0] = v > mx[0] ? v : mx[0];
      }
      const float amax = std::max(std::max(mx[0], mx[1]), std::max(mx[2], mx[3]));
      const float s = Fp8GroupScale(amax, amax_floor, scale_floor);
      scales[m * G + g] = s;
      for (k = 0; k < n; ++k) orow[k0 + k] = Fp8QuantizeDiv(Load(xr[k0 + k]), s);
    }
  }
}

float LoadF32(float v) { return v; }
float LoadBf16(uint16_t v) { return Bf16ToFloat(v); }
float LoadF16(uint16_t v) { return F16ToFloat(v); }

void QuantFp8PerTokenGroupCpu(const Queue& q, const Tensor& out, const Tensor& scales, const Tensor& x,
                              int64_t group_size, float amax_floor, float scale_floor) {
  CpuQueue& cpu = Cpu(q);
  const int64_t M = x.dim(0), K = x.dim(1), G = scales.dim(1);
  if (M == 0 || K == 0) return;
  const int64_t grain = std::max<int64_t>(1, kGrain / K);
  const elementwise::KernelSet* vec = cpu.isa == CpuIsa::kScalar ? nullptr : elementwise::ForIsa(cpu.isa);
  cpu.pool.ParallelFor(M, grain, [&](int64_t m0, int64_t m1) {
    if (cpu.isa == CpuIsa::kScalar) {  // the scalar level runs the plain reference
      ref::QuantFp8PerTokenGroup(out, scales, x, group_size, amax_floor, scale_floor, m0, m1);
      return;
    }
    auto* o = out.data_as<uint8_t>();
    auto* s = scales.data_as<float>();
    if (vec != nullptr && (x.dtype() == DType::kF32 || x.dtype() == DType::kBF16 || x.dtype() == DType::kF16)) {
      vec->quant_fp8_group(x.data(), x.dtype(), o, s, K, G, group_size, amax_floor, scale_floor, m0, m1);
      return;
    }
    switch (x.dtype()) {
      case DType::kF32:
        QuantGroupsRows<float, LoadF32>(x.data_as<float>(), o, s, K, G, group_size, amax_floor, scale_floor, m0, m1);
        return;
      case DType::kBF16:
        QuantGroupsRows<uint16_t, LoadBf16>(x.data_as<uint16_t>(), o, s, K, G, group_size, amax_floor, scale_floor,
                                            m0, m1);
        return;
      case DType::kF16:
        QuantGroupsRows<uint16_t, LoadF16>(x.data_as<uint16_t>(), o, s, K, G, group_size, amax_floor, scale_floor,
                                           m0, m1);
        return;
      default: ref::QuantFp8PerTokenGroup(out, scales, x, group_size, amax_floor, scale_floor, m0, m1);
    }
  });
}
}  // namespace

void RegisterQuantKernels() {
  Register<OpId::kQuantFp8Static>(DeviceType::kCPU, &QuantFp8StaticCpu);
  Register<OpId::kQuantFp8PerTokenGroup>(DeviceType::kCPU, &QuantFp8PerTokenGroupCpu);
}

}  // namespace vt::cpu
