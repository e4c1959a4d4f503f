// Portable matmul kernel set: operands packed to F32 (fp8 through the exact 256-entry
// table), eight independent partial sums per output so the compiler can vectorize the
// K loop without reassociating anything.
#include <cstring>

#include "vt/cpu/matmul/kernels.h"
#include "vt/cpu/matmul/local.h"

namespace vt::cpu::matmul {

namespace {

constexpr int kLanes = 8;
constexpr int kRowsA = 2;

const float* Fp8Table() {
  static const auto table = [] {
    struct T {
      float v[256];
    } t;
    for (int i = 0; i < 256; ++i) t.v[i] = Fp8E4M3ToFloat(static_cast<uint8_t>(i));
    return t;
  }();
  return table.v;
}

bool Accepts(DType d) { return d == DType::kF8E4M3 || d == DType::kBF16 || d == DType::kF32; }

void Pack(DType dt, const void* src, int64_t src_ld, int64_t rows, int64_t k0, int64_t kc, void* dst, int64_t ld,
          int64_t kcp) {
  const float* lut = Fp8Table();
  for (int64_t r = 0; r < rows; ++r) {
    float* d = static_cast<float*>(dst) + r * ld;
    const int64_t s = r * src_ld + k0;
    switch (dt) {
      case DType::kF8E4M3: {
        const auto* p = static_cast<const uint8_t*>(src) + s;
        for (int64_t k = 0; k < kc; ++k) d[k] = lut[p[k]];
        break;
      }
      case DType::kBF16: {
        const auto* p = static_cast<const uint16_t*>(src) + s;
        for (int64_t k = 0; k < kc; ++k) d[k] = Bf16ToFloat(p[k]);
        break;
      }
      case DType::kF32:
        std::memcpy(d, static_cast<const float*>(src) + s, static_cast<size_t>(kc) * sizeof(float));
        break;
      default: ThrowUnsupportedPack("scalar", dt);
    }
    for (int64_t k = kc; k < kcp; ++k) d[k] = 0.0f;
  }
}

template <int MR>
void Tile(const float* a, int64_t lda, const float* p, int64_t ldp, int64_t kcp, float* c, int64_t ldc) {
  float acc[MR][kPanelRows][kLanes] = {};
  for (int64_t k = 0; k < kcp; k += kLanes)
    for (int i = 0; i < MR; ++i)
      for (int j = 0; j < kPanelRows; ++j)
        for (int l = 0; l < kLanes; ++l) acc[i][j][l] += a[i * lda + k + l] * p[j * ldp + k + l];
  for (int i = 0; i < MR; ++i)
    for (int j = 0; j < kPanelRows; ++j) {
      float s = 0.0f;
      for (int l = 0; l < kLanes; ++l) s += acc[i][j][l];
      c[i * ldc + j] += s;
    }
}

void Gemm(const void* av, int64_t lda, int64_t M, const void* pv, int64_t ldp, int64_t nrows, int64_t kcp, float* c,
          int64_t ldc) {
  const auto* a = static_cast<const float*>(av);
  const auto* p = static_cast<const float*>(pv);
  ForEachTile<kRowsA>(M, nrows, [&](auto rows, int64_t m, int64_t n) {
    Tile<decltype(rows)::value>(a + m * lda, lda, p + n * ldp, ldp, kcp, c + m * ldc + n, ldc);
  });
}

}  // namespace

const KernelSet& ScalarKernels() {
  static const KernelSet ks{"scalar-f32", kLanes, 4, 1.0f, &Accepts, &Pack, &Gemm, nullptr};
  return ks;
}

}  // namespace vt::cpu::matmul
