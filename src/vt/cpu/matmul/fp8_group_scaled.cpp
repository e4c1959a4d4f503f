// CPU MatmulFp8GroupScaled (vt/ops/matmul.h): block-wise and per-channel scaled fp8 GEMM.
//
// a is decoded to f32 once per call; the threads split the rows of b. On the x86 levels the
// weight rows go to matmul/fp8_group_scaled_avx2.cpp (decoded in registers and streamed
// into the FMAs, so at M = 1 the weight is read exactly once, at the memory's rate; a decode
// step takes four rows at a time from four sequential streams, all against one row of a
// laid out for the fp8 decode in use, each group's sums times that row's block scale). The
// portable path (ARM, and rows holding a NaN code) decodes the row once (a 256-entry
// table) and multiplies it with every row of a: within a group of K the dot product runs
// in 8 independent f32 partial sums, the groups' sums scaled and added in ascending order.
// The scalar ISA level runs the plain reference (cpu/reference.cpp).
#include <algorithm>
#include <atomic>
#include <vector>

#if defined(VT_CPU_X86)
#include <xmmintrin.h>  // _mm_getcsr
#endif

#include "vt/cpu/backend.h"
#include "vt/cpu/elem.h"
#include "vt/cpu/matmul/kernels.h"
#include "vt/cpu/reference.h"
#include "vt/ops/matmul.h"

namespace vt::cpu {

namespace {

std::atomic<int64_t> g_avx2_calls{0}, g_rows4_bits{0}, g_rows4_half{0};

struct Fp8Table {
  float v[256];
  Fp8Table() {
    for (int i = 0; i < 256; ++i) v[i] = Fp8E4M3ToFloat(static_cast<uint8_t>(i));
  }
};
const Fp8Table& Table() {
  static const Fp8Table t;
  return t;
}

float Dot8(const float* x, const float* y, int64_t n) {
  float s[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t k = 0;
  for (; k + 8 <= n; k += 8)
    for (int j = 0; j < 8; ++j) s[j] += x[k + j] * y[k + j];
  for (; k < n; ++k) s[k & 7] += x[k] * y[k];
  return ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
}

void MatmulFp8GroupScaledCpu(const Queue& q, const Tensor& out, const Tensor& a, const Tensor& a_scales,
                             const Tensor& b, const Tensor& b_scales, int64_t block_n, int64_t block_k,
                             const Tensor* bias) {
  CpuQueue& cpu = Cpu(q);
  const int64_t M = a.dim(0), N = b.dim(0), K = a.dim(1), G = a_scales.dim(1);
  if (M == 0 || N == 0) return;
  if (cpu.isa == CpuIsa::kScalar) {  // the scalar level runs the plain reference
    cpu.pool.ParallelFor(M, 1, [&](int64_t m0, int64_t m1) {
      ref::MatmulFp8GroupScaled(out, a, a_scales, b, b_scales, block_n, block_k, bias, m0, m1);
    });
    return;
  }
  const float* lut = Table().v;
  std::vector<float> af(static_cast<size_t>(M * K));
  const auto* pa = a.data_as<uint8_t>();
  for (int64_t i = 0; i < M * K; ++i) af[i] = lut[pa[i]];
  const auto* pb = b.data_as<uint8_t>();
  const auto* sa = a_scales.data_as<float>();
  const auto* sb = b_scales.data_as<float>();
  // Enough rows of b per hand-off to amortise it, few enough to spread a decode-sized N.
  const int64_t grain = std::max<int64_t>(1, 65536 / std::max<int64_t>(1, K * M));
#if defined(VT_CPU_X86)
  const bool avx2 = cpu.isa >= CpuIsa::kAvx2 && cpu.isa <= CpuIsa::kAmx;
  if (avx2) g_avx2_calls.fetch_add(1, std::memory_order_relaxed);
  // A decode step (one row of a, whole 16-value steps in each group): a laid out once for
  // the decode in use, and each block's group scales (s_a · s_b · 2^8, the decode's 2^-8 back).
  const bool rows4 = avx2 && M == 1 && (block_k % 16 == 0 || G == 1);
  const bool bits = rows4 && matmul::Fp8DecodeAsF32Bits();
  std::vector<float> a4, s4;
  if (rows4) {
    const int64_t NB = b_scales.dim(0), kp = (K + 15) / 16 * 16;
    a4.assign(static_cast<size_t>(kp), 0.0f);
    if (bits)
      matmul::PrepareStreamAF32Avx2(af.data(), K, 1, 0, 1, a4.data());
    else
      std::copy(af.begin(), af.end(), a4.begin());
    s4.resize(static_cast<size_t>(NB * G));
    for (int64_t i = 0; i < NB * G; ++i) s4[i] = sa[i % G] * sb[i] * 256.0f;
  }
#endif
  // A row's result (bias added), rounded once into out.
  auto store = [&](int64_t m, int64_t n, float acc) {
    const float bv = bias != nullptr ? LoadFloat(bias->data(), bias->dtype(), n) : 0.0f;
    StoreFloat(out.data(), out.dtype(), m * N + n, bias != nullptr ? acc + bv : acc);
  };
  cpu.pool.ParallelFor(N, grain, [&](int64_t n0, int64_t n1) {
    std::vector<float> brow(static_cast<size_t>(K)), acc(static_cast<size_t>(std::max<int64_t>(M, 4)));
#if defined(VT_CPU_X86)
    // A decode step: four rows at a time, one from each quarter of [n0, n1). Rows left
    // over (or with a NaN code) go below.
    std::vector<bool> finished;
    if (rows4 && n1 - n0 >= 4) {
      // IEEE arithmetic whatever this thread's MXCSR: with denormals-are-zero set, kF32Bits
      // would count the subnormal weights as 0.
      const unsigned csr = _mm_getcsr();
      constexpr unsigned kDazFtz = 0x8040;
      if (bits && (csr & kDazFtz) != 0) _mm_setcsr(csr & ~kDazFtz);
      const int64_t quarter = (n1 - n0) / 4;
      finished.assign(static_cast<size_t>(n1 - n0), false);
      int64_t rows = 0;
      for (int64_t i = 0; i < quarter; ++i) {
        const uint8_t* bp[4];
        const float* sc[4];
        for (int j = 0; j < 4; ++j) {
          const int64_t n = n0 + j * quarter + i;
          bp[j] = pb + n * K;
          sc[j] = s4.data() + (n / block_n) * G;
        }
        if (!matmul::Fp8Rows4GroupDotAvx2(a4.data(), K, G, block_k, bp, sc, bits, acc.data())) continue;
        for (int j = 0; j < 4; ++j) {
          const int64_t n = n0 + j * quarter + i;
          store(0, n, acc[j]);
          finished[static_cast<size_t>(n - n0)] = true;
        }
        rows += 4;
      }
      if (bits && (csr & kDazFtz) != 0) _mm_setcsr(csr);
      (bits ? g_rows4_bits : g_rows4_half).fetch_add(rows, std::memory_order_relaxed);
    }
#endif
    for (int64_t n = n0; n < n1; ++n) {
      const uint8_t* br = pb + n * K;
      const float* sbr = sb + (n / block_n) * G;
      bool done = false;
#if defined(VT_CPU_X86)
      if (!finished.empty() && finished[static_cast<size_t>(n - n0)]) continue;
      if (avx2) done = matmul::Fp8GroupScaledRowAvx2(af.data(), M, K, br, sa, G, sbr, block_k, brow.data(), acc.data());
#endif
      if (!done) {  // portable, or a row with a NaN code
        for (int64_t k = 0; k < K; ++k) brow[k] = lut[br[k]];
        for (int64_t m = 0; m < M; ++m) {
          const float* ar = af.data() + m * K;
          acc[m] = 0.0f;
          for (int64_t g = 0; g < G; ++g) {
            const int64_t k0 = g * block_k, len = std::min(K, k0 + block_k) - k0;
            acc[m] += Dot8(ar + k0, brow.data() + k0, len) * sa[m * G + g] * sbr[g];
          }
        }
      }
      for (int64_t m = 0; m < M; ++m) store(m, n, acc[m]);
    }
  });
}

}  // namespace

int64_t matmul::Fp8GroupScaledAvx2Calls() { return g_avx2_calls.load(std::memory_order_relaxed); }
int64_t matmul::Fp8GroupScaledRows4(bool bits) {
  return (bits ? g_rows4_bits : g_rows4_half).load(std::memory_order_relaxed);
}

void matmul::RegisterFp8GroupScaledKernel() {
  Register<OpId::kMatmulFp8GroupScaled>(DeviceType::kCPU, &MatmulFp8GroupScaledCpu);
}

}  // namespace vt::cpu
