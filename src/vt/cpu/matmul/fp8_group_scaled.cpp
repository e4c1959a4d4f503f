// CPU MatmulFp8GroupScaled (vt/ops/matmul.h): block-wise and per-channel scaled fp8 GEMM.
//
// a is laid out once per call for the kernel in use, with each group of K padded to the
// kernel's step, and every (row of a, block of rows of b, group) pair's scale s_a · s_b is
// formed once; the threads split the rows of b and each writes its f32 sums, then rounds
// them (bias added) into out. The kernels:
//  - on x86 from AVX2, a weight prepared by vt::PrepareWeight is laid out at load as static
//    FP8's prepared weights are, and multiplied by the outer-product tiles of
//    matmul/packed_avx2.cpp or, on AVX-512 BF16 with VBMI, matmul/packed_avx512.cpp
//    (RunPackedGroupScaled below); weights that are not laid out take the rows below;
//  - AVX-512 BF16 levels (with AVX512-VBMI): matmul/fp8_group_scaled_avx512.cpp (the fp8
//    table into vdpbf16ps);
//  - AVX2 and AVX-512 F32 levels: matmul/fp8_group_scaled_avx2.cpp (either fp8 decode of
//    Fp8StreamDecode into FMAs), and the portable rows below for weight rows holding a NaN
//    code;
//  - the portable rows (ARM): each weight row decoded once (a 256-entry table) and
//    multiplied with every row of a: within a group of K the dot product runs in 8
//    independent f32 partial sums, the groups' sums scaled and added in ascending order;
//  - the scalar level: the plain reference (cpu/reference.cpp).
// On each level a row of a gets the same sums whatever M is (the kernels' headers say
// why), which the MoE experts rely on to multiply all of an expert's tokens at once
// (cpu/moe.cpp). Decode steps stream each weight row once, from four sequential streams per
// thread (matmul/local.h's quarters); more rows of a decode each weight row once for all.
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <vector>

#if defined(VT_CPU_X86)
#include <xmmintrin.h>  // _mm_getcsr
#endif

#include "vt/cpu/backend.h"
#include "vt/cpu/elem.h"
#include "vt/cpu/matmul/kernels.h"
#include "vt/cpu/matmul/packed_copy.h"
#include "vt/cpu/reference.h"
#include "vt/ops/matmul.h"
#include "vt/prepared.h"

namespace vt::cpu {

namespace {

std::atomic<int64_t> g_avx2_calls{0}, g_avx512_calls{0}, g_rows4_bits{0}, g_rows4_half{0}, g_pair_rows{0},
    g_packed_calls{0}, g_packed_weights{0};

// The CPU's prepared form of a weight [N, K] for MatmulFp8GroupScaled on x86 from AVX2
// (vt::PrepareWeight, WeightUse::kMatmulGroupScaledB): the codes laid out as MatmulFp8's
// prepared weights of the level (Avx2PackedKernels, or Avx512Bf16PackedKernels on AVX-512
// BF16 with VBMI), which GroupScaledPackedAvx2 / GroupScaledPackedAvx512 multiply, for the
// whole weight or a row slice of it. The kernels read only this copy, so
// the weight's own bytes may go (ReleaseBytes); a call that cannot use the copy (another
// level, groups that split a step of K) reads the codes back out of it.
struct PackedGroupScaledWeight final : BackendLayout {
  int64_t N = 0, K = 0;
  const matmul::PackedKernels* kernels = nullptr;  // the layout: Avx2PackedKernels or Avx512Bf16PackedKernels
  int64_t k_step = 2;                                 // K values per step of that layout
  matmul::PackedCopy whole;
};

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

// Per-thread scratch that only grows, so that decode steps do not fault pages in; 64-byte
// aligned (the kernels' 64-byte loads would otherwise each span two cache lines).
template <typename T>
T* Grow(std::vector<T>& v, int64_t n) {
  constexpr int64_t kPad = 64 / sizeof(T);
  if (static_cast<int64_t>(v.size()) < n + kPad) v.resize(static_cast<size_t>(n + kPad));
  const auto p = reinterpret_cast<uintptr_t>(v.data());
  return reinterpret_cast<T*>((p + 63) / 64 * 64);
}
#if defined(VT_CPU_X86)
int64_t RoundUp(int64_t x, int64_t m) { return (x + m - 1) / m * m; }
std::vector<float>& ARows() {
  thread_local std::vector<float> v;
  return v;
}
std::vector<float>& ScaleTable() {
  thread_local std::vector<float> v;
  return v;
}
#endif

float Dot8(const float* x, const float* y, int64_t n) {
  float s[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t k = 0;
  for (; k + 8 <= n; k += 8)
    for (int j = 0; j < 8; ++j) s[j] += x[k + j] * y[k + j];
  for (; k < n; ++k) s[k & 7] += x[k] * y[k];
  return ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
}

// The portable sums of weight row n against every row of a: c[m * ldc] for m < M. a as f32
// values (af, K apart), or where af is null as its codes, decoded here row by row into arow.
void PortableRow(const float* af, const uint8_t* a8, int64_t M, int64_t K, const uint8_t* br, const float* sa,
                 int64_t G, const float* sbr, int64_t block_k, float* brow, float* arow, float* c, int64_t ldc) {
  const float* lut = Table().v;
  for (int64_t k = 0; k < K; ++k) brow[k] = lut[br[k]];
  for (int64_t m = 0; m < M; ++m) {
    const float* ar = af != nullptr ? af + m * K : arow;
    if (af == nullptr)
      for (int64_t k = 0; k < K; ++k) arow[k] = lut[a8[m * K + k]];
    float acc = 0.0f;
    for (int64_t g = 0; g < G; ++g) {
      const int64_t k0 = g * block_k, len = std::min(K, k0 + block_k) - k0;
      acc += Dot8(ar + k0, brow + k0, len) * sa[m * G + g] * sbr[g];
    }
    c[m * ldc] = acc;
  }
}

// out[m, n] = round(c[m * ldc + n - n0] (+ bias[n])) for rows m < M, columns [n0, n1).
// Branch-free column loops (the compiler vectorizes them); no bias adds nothing (not even
// +0, which would turn a -0 sum into +0).
void StoreSums(const Tensor& out, const Tensor* bias, const float* c, int64_t ldc, int64_t M, int64_t n0,
               int64_t n1, std::vector<float>& bias_f32) {
  const int64_t N = out.dim(1), n = n1 - n0;
  const float* bv = nullptr;
  if (bias != nullptr) {
    float* b = Grow(bias_f32, n);
    for (int64_t j = 0; j < n; ++j) b[j] = LoadFloat(bias->data(), bias->dtype(), n0 + j);
    bv = b;
  }
  for (int64_t m = 0; m < M; ++m) {
    const float* cr = c + m * ldc;
    if (out.dtype() == DType::kF32) {
      float* d = out.data_as<float>() + m * N + n0;
      if (bv != nullptr)
        for (int64_t j = 0; j < n; ++j) d[j] = cr[j] + bv[j];
      else
        std::memcpy(d, cr, static_cast<size_t>(n) * sizeof(float));
    } else {
      uint16_t* d = out.data_as<uint16_t>() + m * N + n0;
      if (bv != nullptr)
        for (int64_t j = 0; j < n; ++j) d[j] = FloatToBf16(cr[j] + bv[j]);
      else
        for (int64_t j = 0; j < n; ++j) d[j] = FloatToBf16(cr[j]);
    }
  }
}

enum class Path { kPortable, kAvx2, kAvx512 };

Path ChoosePath(CpuIsa isa) {
#if defined(VT_CPU_X86)
  static const bool vbmi = __builtin_cpu_supports("avx512vbmi");
  if (isa >= CpuIsa::kAvx512Bf16 && isa <= CpuIsa::kAmx && vbmi) return Path::kAvx512;
  if (isa >= CpuIsa::kAvx2 && isa <= CpuIsa::kAmx) return Path::kAvx2;
#else
  (void)isa;
#endif
  return Path::kPortable;
}

#if defined(VT_CPU_X86)
// Rows [row0, row0 + rows) of a laid-out weight's codes, read back out of its copy
// (Avx2PackedKernels' layout, packed_avx2.cpp: a block of block_cols columns is one step of
// 2 · block_cols bytes per pair of K values, column c's codes at k and k + 1 at bytes 2c and
// 2c + 1 of the step).
// On the AVX-512 layout (packed_avx512.cpp) a block of 16 columns is one step of 64 bytes per
// 4 K values, column c's code at k = 4s + t at byte 16 (c / 4) + 8 (t / 2) + 2 (c % 4) + t % 2.
Tensor UnpackedRows(const PackedGroupScaledWeight& w, int64_t row0, int64_t rows) {
  const matmul::PackedKernels& pk = *w.kernels;
  const int64_t K = w.K, cols = pk.block_cols, step = w.k_step * cols;
  const auto block_bytes = static_cast<int64_t>(pk.bytes(cols, K));
  Tensor t = Tensor::Empty({rows, K}, DType::kF8E4M3);
  auto* d = t.data_as<uint8_t>();
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t n = row0 + r, col = n % cols;
    const uint8_t* block = w.whole.bytes() + (n / cols) * block_bytes;
    for (int64_t k = 0; k < K; ++k) {
      const int64_t t4 = k % 4;
      d[r * K + k] = w.k_step == 2 ? block[(k / 2) * step + 2 * col + k % 2]
                                   : block[(k / 4) * step + 16 * (col / 4) + 8 * (t4 / 2) + 2 * (col % 4) + t4 % 2];
    }
  }
  return t;
}

// MatmulFp8GroupScaled on a laid-out weight's rows [row0, row0 + N) (the level it was laid
// out for): the blocks of 8 (AVX2) or 16 (AVX-512) rows that hold them, each column summed as the whole weight's (so a row slice,
// a merged q/k/v or gate/up weight's shard, gives the whole product's bytes); a slice
// starting inside a block computes that block's other columns too and keeps its own. a's
// rows are packed once, then, as MatmulFp8's prepared weights run (matmul.cpp, RunPacked),
// the threads split the blocks (or, for many rows of a and few blocks, the rows), each
// taking its rows of a in passes that keep ~512 KiB of them in L2 and its blocks in chunks
// of 256 columns (f32 sums, then rounded into out).
void RunPackedGroupScaled(CpuQueue& cq, const PackedGroupScaledWeight& w, int64_t row0, const Tensor& out,
                          const Tensor& a, const Tensor& a_scales, const Tensor& b, const Tensor& b_scales,
                          int64_t block_n, int64_t block_k, const Tensor* bias) {
  const matmul::PackedKernels& pk = *w.kernels;
  const bool avx512 = w.k_step == 4;
  const int64_t M = a.dim(0), N = b.dim(0), K = w.K, G = a_scales.dim(1), cols = pk.block_cols;
  const int64_t off = row0 % cols;  // the slice's first column in its first block
  const uint8_t* packed = w.whole.bytes() + (row0 / cols) * pk.bytes(cols, K);
  const int64_t lda = RoundUp(K, pk.a_align), blocks = (off + N + cols - 1) / cols;
  float* ap = Grow(ARows(), M * lda);
  cq.pool.ParallelFor(M, 16, [&](int64_t m0, int64_t m1) {
    pk.pack_a(a.data_as<uint8_t>() + m0 * K, K, m1 - m0, reinterpret_cast<char*>(ap) + m0 * lda * pk.a_elt_size, lda);
  });
  // The slice's column n reads scale row n / block_n of b_scales (the op's definition).
  const float* sb = b_scales.data_as<float>();
  const float* lanes = nullptr;
  if (block_n % cols != 0 || off != 0) {  // a block's columns may read different scale rows
    float* t = Grow(ScaleTable(), blocks * G * cols);
    for (int64_t j = 0; j < blocks; ++j)
      for (int64_t g = 0; g < G; ++g)
        for (int64_t l = 0; l < cols; ++l) {
          const int64_t n = j * cols + l - off;
          t[(j * G + g) * cols + l] = n >= 0 && n < N ? sb[(n / block_n) * G + g] : 0.0f;
        }
    lanes = t;
  }
  const matmul::GroupScaledPacked base{ap, lda, M, K, G, block_k, a_scales.data_as<float>(), sb, block_n, lanes};
  const int64_t mc = M <= 16 ? M : std::clamp<int64_t>((512 << 10) / (lda * 4) / 8 * 8, 8, RoundUp(M, 8));
  auto run = [&](int64_t m_begin, int64_t m_end, int64_t j0, int64_t j1) {
    thread_local std::vector<float> sums, bias_f32;
    // Up to 16 rows the kernel reads its blocks in long streams: the thread's range in as
    // few even pieces of up to 4096 columns as it takes; else chunks of 256 columns.
    const int64_t kPieceBlocks = 4096 / cols, kChunkBlocks = 256 / cols;
    const int64_t pieces = (j1 - j0 + kPieceBlocks - 1) / kPieceBlocks;
    const int64_t chunk = M <= matmul::kPackedPartsMaxRows ? (j1 - j0 + pieces - 1) / pieces : kChunkBlocks;
    const int64_t ldc = chunk * cols;
    float* c = Grow(sums, mc * ldc);
    for (int64_t m0 = m_begin; m0 < m_end; m0 += mc) {
      matmul::GroupScaledPacked p = base;
      p.M = std::min(mc, m_end - m0);
      p.a = reinterpret_cast<const char*>(ap) + m0 * lda * pk.a_elt_size;
      p.sa = base.sa + m0 * G;
      const Tensor rows_out = out.Slice(0, m0, m0 + p.M);
      for (int64_t jb = j0; jb < j1; jb += chunk) {
        const int64_t je = std::min(jb + chunk, j1);
        if (avx512) {
          matmul::GroupScaledPackedAvx512(p, packed, jb, je, c, ldc);
        } else {
          matmul::GroupScaledPackedAvx2(p, packed, jb, je, c, ldc);
        }
        // The slice's columns among these blocks' (c's column i is the blocks' column jb * 8 + i).
        const int64_t n0 = std::max<int64_t>(0, jb * cols - off), n1 = std::min(N, je * cols - off);
        if (n1 > n0) StoreSums(rows_out, bias, c + (n0 + off - jb * cols), ldc, p.M, n0, n1, bias_f32);
      }
    }
  };
  if (M <= 16 || blocks >= 2 * static_cast<int64_t>(cq.pool.size())) {
    cq.pool.ParallelFor(blocks, 4, [&](int64_t j0, int64_t j1) { run(0, M, j0, j1); });
  } else {
    cq.pool.ParallelFor(M, 8, [&](int64_t m0, int64_t m1) { run(m0, m1, 0, blocks); });
  }
  g_packed_calls.fetch_add(1, std::memory_order_relaxed);
}
#endif

void MatmulFp8GroupScaledCpu(const Queue& q, const Tensor& out, const Tensor& a, const Tensor& a_scales,
                             const Tensor& b, const Tensor& b_scales, int64_t block_n, int64_t block_k,
                             const Tensor* bias) {
  CpuQueue& cpu = Cpu(q);
  const int64_t M = a.dim(0), N = b.dim(0), K = a.dim(1), G = a_scales.dim(1);
  if (M == 0 || N == 0) return;
  const Path path = ChoosePath(cpu.isa);
#if defined(VT_CPU_X86)
  // A weight laid out at preparation (only ever on x86: PrepareGroupScaledWeightCpu).
  if (const auto* w = dynamic_cast<const PackedGroupScaledWeight*>(b.backend_layout()); w != nullptr) {
    const int64_t row0 = static_cast<int64_t>(b.storage_offset()) / w->K;
    // The weight or a row slice of it (a merged q/k/v or gate/up weight's shards).
    const Path laid_out_for = w->k_step == 4 ? Path::kAvx512 : Path::kAvx2;
    if (path == laid_out_for && matmul::GroupScaledPackable(K, block_k, w->k_step)) {
      RunPackedGroupScaled(cpu, *w, row0, out, a, a_scales, b, b_scales, block_n, block_k, bias);
      return;
    }
    if (b.bytes_released()) {  // the codes read back out of the laid-out copy, then as stored
      const Tensor plain = UnpackedRows(*w, row0, N);
      MatmulFp8GroupScaledCpu(q, out, a, a_scales, plain, b_scales, block_n, block_k, bias);
      return;
    }
  }
#endif
  if (cpu.isa == CpuIsa::kScalar) {  // the scalar level runs the plain reference
    cpu.pool.ParallelFor(M, 1, [&](int64_t m0, int64_t m1) {
      ref::MatmulFp8GroupScaled(out, a, a_scales, b, b_scales, block_n, block_k, bias, m0, m1);
    });
    return;
  }
  const float* lut = Table().v;
  const auto* pa = a.data_as<uint8_t>();
  const auto* pb = b.data_as<uint8_t>();
  const auto* sa = a_scales.data_as<float>();
  const auto* sb = b_scales.data_as<float>();
  // f32 rows of a for the portable path.
  std::vector<float> af;
  if (path == Path::kPortable) {
    af.resize(static_cast<size_t>(M * K));
    for (int64_t i = 0; i < M * K; ++i) af[i] = lut[pa[i]];
  }
#if defined(VT_CPU_X86)
  const int64_t NB = b_scales.dim(0);
  matmul::GroupScaledRows p{nullptr, 0, M, K, G, block_k, 0, pb, nullptr, NB, block_n};
  const bool bits = path == Path::kAvx2 && matmul::Fp8DecodeAsF32Bits();
  if (path != Path::kPortable) {
    const int64_t step = path == Path::kAvx512 ? 64 : 16;
    p.gstride = RoundUp(std::min(block_k, K), step);
    p.lda = G * p.gstride;
    // a's rows (BF16 for AVX-512: half the floats' bytes) and the scale of every (row of a,
    // block of b, group), times 2^8 for the AVX2 decodes' value * 2^-8.
    float* ar = Grow(ARows(), M * p.lda);
    if (path == Path::kAvx512) {
      cpu.pool.ParallelFor(M, 16, [&](int64_t m0, int64_t m1) {
        matmul::PackAGroupScaledAvx512(pa + m0 * K, K, m1 - m0, block_k, p.gstride, p.lda,
                                       reinterpret_cast<uint16_t*>(ar) + m0 * p.lda);
      });
      g_avx512_calls.fetch_add(1, std::memory_order_relaxed);
    } else {
      // kF32Bits: times 2^112 (the decode gives value * 2^-120), each step's even K offsets first.
      const float mul = bits ? 0x1p112f : 1.0f;
      std::fill(ar, ar + M * p.lda, 0.0f);
      for (int64_t m = 0; m < M; ++m)
        for (int64_t g = 0; g < G; ++g) {
          const int64_t k0 = g * block_k, len = std::min(K, k0 + block_k) - k0;
          const uint8_t* src = pa + m * K + k0;
          float* dst = ar + m * p.lda + g * p.gstride;
          for (int64_t s = 0; s < len; ++s) {
            const int64_t j = s % 16;
            dst[bits ? s - j + (j % 2) * 8 + j / 2 : s] = lut[src[s]] * mul;
          }
        }
      g_avx2_calls.fetch_add(1, std::memory_order_relaxed);
    }
    p.a = ar;
    const float unscale = path == Path::kAvx2 ? 256.0f : 1.0f;
    float* sc = Grow(ScaleTable(), M * NB * G);
    for (int64_t m = 0; m < M; ++m)
      for (int64_t nb = 0; nb < NB; ++nb)
        for (int64_t g = 0; g < G; ++g) sc[(m * NB + nb) * G + g] = sa[m * G + g] * sb[nb * G + g] * unscale;
    p.scales = sc;
  }
#endif
  // Up to 16 rows of a a thread takes its whole range at once (long weight streams); more
  // go in pieces of columns whose f32 sums stay small.
  const int64_t piece = M <= 16 ? N : std::max<int64_t>(matmul::kPanelRows, (64 << 10) / (4 * M) / 16 * 16);
  cpu.pool.ParallelFor(N, 16, [&](int64_t n0, int64_t n1) {
    thread_local std::vector<float> sums, wbuf, brow, arow, bias_f32;
    thread_local std::vector<uint8_t> nan_rows;
    for (int64_t c0 = n0; c0 < n1; c0 += piece) {
      const int64_t c1 = std::min(n1, c0 + piece), ldc = c1 - c0;
      float* c = Grow(sums, M * ldc);
      const bool portable = path == Path::kPortable;
#if defined(VT_CPU_X86)
      if (path == Path::kAvx512) {
        matmul::GroupScaledSumsAvx512(p, c0, c1, Grow(wbuf, matmul::GroupScaledScaleFloats(G) + 2 * p.lda), c,
                                      ldc);
      } else if (path == Path::kAvx2) {
        // IEEE arithmetic whatever this thread's MXCSR: with denormals-are-zero set,
        // kF32Bits would count the subnormal weights as 0.
        const unsigned csr = _mm_getcsr();
        constexpr unsigned kDazFtz = 0x8040;
        if (bits && (csr & kDazFtz) != 0) _mm_setcsr(csr & ~kDazFtz);
        uint8_t* nan = Grow(nan_rows, ldc);
        const int64_t in_registers = matmul::GroupScaledSumsAvx2(p, bits, c0, c1, Grow(wbuf, 2 * p.lda), c, ldc, nan);
        if (bits && (csr & kDazFtz) != 0) _mm_setcsr(csr);
        (M == 1 ? (bits ? g_rows4_bits : g_rows4_half) : g_pair_rows).fetch_add(in_registers, std::memory_order_relaxed);
        for (int64_t n = c0; n < c1; ++n)
          if (nan[n - c0] != 0)
            PortableRow(nullptr, pa, M, K, pb + n * K, sa, G, sb + (n / block_n) * G, block_k, Grow(brow, K),
                        Grow(arow, K), c + (n - c0), ldc);
      }
#endif
      if (portable)
        for (int64_t n = c0; n < c1; ++n)
          PortableRow(af.data(), pa, M, K, pb + n * K, sa, G, sb + (n / block_n) * G, block_k, Grow(brow, K),
                      nullptr, c + (n - c0), ldc);
      StoreSums(out, bias, c, ldc, M, c0, c1, bias_f32);
    }
  });
}

}  // namespace

int64_t matmul::Fp8GroupScaledAvx2Calls() { return g_avx2_calls.load(std::memory_order_relaxed); }
int64_t matmul::Fp8GroupScaledAvx512Calls() { return g_avx512_calls.load(std::memory_order_relaxed); }
int64_t matmul::Fp8GroupScaledRows4(bool bits) {
  return (bits ? g_rows4_bits : g_rows4_half).load(std::memory_order_relaxed);
}

int64_t matmul::Fp8GroupScaledPairRows() { return g_pair_rows.load(std::memory_order_relaxed); }
int64_t matmul::Fp8GroupScaledPackedCalls() { return g_packed_calls.load(std::memory_order_relaxed); }
int64_t matmul::Fp8GroupScaledPackedWeights() { return g_packed_weights.load(std::memory_order_relaxed); }

namespace {
// The CPU's preparer for WeightUse::kMatmulGroupScaledB: on x86 from AVX2, an fp8 weight
// whose codes the layout can hold is laid out for GroupScaledPackedAvx2 (the AVX2 and
// AVX-512 F32 levels) or GroupScaledPackedAvx512 (AVX-512 BF16 with VBMI)
// (PackedGroupScaledWeight), whichever row slices it will be multiplied in; anything else is
// left as it is.
Tensor PrepareGroupScaledWeightCpu(const Queue& q, const Tensor& w, WeightUse, std::span<const int64_t>) {
  CpuQueue& cq = Cpu(q);
  const Path path = ChoosePath(cq.isa);
  if (w.dtype() != DType::kF8E4M3 || path == Path::kPortable || w.numel() == 0) return w;
#if defined(VT_CPU_X86)
  auto layout = std::make_shared<PackedGroupScaledWeight>();
  layout->N = w.dim(0);
  layout->K = w.dim(1);
  layout->kernels = path == Path::kAvx512 ? &matmul::Avx512Bf16PackedKernels() : &matmul::Avx2PackedKernels();
  layout->k_step = path == Path::kAvx512 ? 4 : 2;
  if (!matmul::PackRows(cq, *layout->kernels, static_cast<const uint8_t*>(w.data()), layout->N, layout->K,
                        layout->whole))
    return w;  // NaN codes, which the layout's decode would make finite: multiplied as stored
  g_packed_weights.fetch_add(1, std::memory_order_relaxed);
  return w.WithBackendLayout(std::move(layout));
#else
  return w;
#endif
}
}  // namespace

void matmul::RegisterFp8GroupScaledKernel() {
  Register<OpId::kMatmulFp8GroupScaled>(DeviceType::kCPU, &MatmulFp8GroupScaledCpu);
  RegisterWeightPreparer(DeviceType::kCPU, WeightUse::kMatmulGroupScaledB, &PrepareGroupScaledWeightCpu);
}

}  // namespace vt::cpu
