// CPU MatmulFp8 and Matmul: a blocked driver shared by every ISA level, and the choice of
// kernel set (matmul/kernels.h) from the queue's effective ISA and the operand dtypes.
//
// fp8 weights prepared for a level with an outer-product kernel (PackedKernels: AVX2,
// AVX-512, vdpbf16ps), and BF16 ones on the vdpbf16ps level, as a model prepares its
// weights after loading (vt::PrepareWeight, PrepareMatmulWeightCpu here), are multiplied,
// at every M, from the copy laid out for that kernel that their storage keeps (RunPacked).
//
// Otherwise: decode (small M) is bound by streaming the weights: where the kernel set has
// a direct path (`stream`), each thread reads its weight rows once straight into the
// multiply, with no panel; otherwise each weight byte is decoded once into an L2-resident
// panel and multiplied with every row of a. Prefill (large M) reuses each decoded panel
// across all rows of a, with a's packed rows in L1.
#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <utility>
#include <vector>

#include "vt/cpu/backend.h"
#include "vt/cpu/elem.h"
#include "vt/cpu/matmul/kernels.h"
#include "vt/cpu/matmul/packed_copy.h"
#include "vt/cpu/matmul/rows.h"
#include "vt/ops/matmul.h"
#include "vt/prepared.h"

namespace vt::cpu {

void matmul::ThrowUnsupportedPack(const char* set, DType dtype) {
  throw Error(StrCat("internal: the ", set, " matmul kernels cannot pack ", DTypeName(dtype)));
}

namespace {

using matmul::KernelSet;
using matmul::kPanelRows;

int64_t RoundUp(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

// Scratch memory that grows and is kept per thread, so that a decode step does not pay
// for page faults on every call.
class Scratch {
 public:
  void* Get(size_t bytes) {
    if (bytes > size_) {
      size_ = std::max<size_t>(RoundUp(static_cast<int64_t>(bytes), 4096), 2 * size_);
      ptr_.reset(static_cast<std::byte*>(std::aligned_alloc(64, size_)));
      VT_CHECK(ptr_ != nullptr, "Matmul: cannot allocate ", size_, " bytes of scratch memory");
    }
    return ptr_.get();
  }

 private:
  struct Free {
    void operator()(std::byte* p) const { std::free(p); }
  };
  std::unique_ptr<std::byte, Free> ptr_;
  size_t size_ = 0;
};

Scratch& PanelScratch() {
  thread_local Scratch s;
  return s;
}
Scratch& AccScratch() {
  thread_local Scratch s;
  return s;
}
Scratch& ARowsScratch() {
  thread_local Scratch s;
  return s;
}
Scratch& StreamAScratch() {
  thread_local Scratch s;
  return s;
}

struct Gemm {
  int64_t M, N, K;
  const void* a;
  DType a_dtype;
  const void* b;
  DType b_dtype;
  void* out;
  DType out_dtype;
  const Tensor* bias;
  float alpha;
  const Tensor* b_tensor;  // b as a tensor (its backend layout, vt::PrepareWeight)
  // The epilogue for the queue's ISA level (StoreRowsFor, set by RunGemm).
  void (*store_rows)(const Gemm& g, float unscale, const float* acc, int64_t ldc, int64_t m0, int64_t rows_m,
                     int64_t nb, int64_t rows) = nullptr;
  const char* store_rows_name = nullptr;
};
using StoreRowsFn = decltype(Gemm::store_rows);

thread_local matmul::LastGemm t_last_gemm;
constexpr int kGemmsSeenMax = 16;
thread_local matmul::GemmSeen t_gemms_seen[kGemmsSeenMax];
thread_local int t_gemms_seen_count = 0;

// Records this thread's GEMM: the last one, and among the distinct ones seen.
void NoteGemm(const matmul::LastGemm& last, DType b_dtype) {
  t_last_gemm = last;
  for (int i = 0; i < t_gemms_seen_count; ++i) {
    const matmul::GemmSeen& s = t_gemms_seen[i];
    if (s.set == last.set && s.stream == last.stream && s.packed == last.packed && s.b_dtype == b_dtype) return;
  }
  if (t_gemms_seen_count < kGemmsSeenMax)
    t_gemms_seen[t_gemms_seen_count++] = matmul::GemmSeen{last.set, last.stream, last.packed, b_dtype};
}

const KernelSet& ChooseKernels(CpuIsa isa, DType a, DType b) {
#if defined(VT_CPU_X86)
  // BF16 pairs only where that loses nothing: fp8 and BF16 operands are exact in BF16.
  if (isa >= CpuIsa::kAvx512Bf16) {
    const KernelSet& bf16 = isa >= CpuIsa::kAmx ? matmul::AmxKernels() : matmul::Avx512Bf16Kernels();
    if (bf16.accepts(a) && bf16.accepts(b)) return bf16;
  }
  if (isa >= CpuIsa::kAvx512) return matmul::Avx512Kernels();
  if (isa >= CpuIsa::kAvx2) return matmul::Avx2Kernels();
#elif defined(VT_CPU_ARM)
  if (isa >= CpuIsa::kNeonBf16) {
    const KernelSet& bf16 = matmul::NeonBf16Kernels();
    if (bf16.accepts(a) && bf16.accepts(b)) return bf16;
  }
  if (isa >= CpuIsa::kNeon) return matmul::NeonKernels();
#else
  (void)isa;
#endif
  (void)a;
  (void)b;
  return matmul::ScalarKernels();
}

// Block sizes: a K block of a packed row is ~4 KiB (L1 holds a's rows of one micro-tile
// and the panel rows it meets); panels stay within a share of L2. Small M takes all of K
// at once so every weight row is read as one sequential stream.

struct Blocking {
  int64_t kp, kc, nc;
};

Blocking ChooseBlocking(const KernelSet& ks, int64_t M, int64_t K) {
  Blocking bl;
  bl.kp = RoundUp(K, ks.kvec);
  const int64_t row_bytes_target = 4096;
  const bool decode = M <= 16;
  bl.kc = decode ? bl.kp : std::min(bl.kp, RoundUp(row_bytes_target / ks.elt_size, ks.kvec));
  bl.kc = std::max<int64_t>(bl.kc, ks.kvec);
  const int64_t panel_budget = decode ? (128 << 10) : (512 << 10);
  bl.nc = panel_budget / (bl.kc * ks.elt_size) / kPanelRows * kPanelRows;
  bl.nc = std::clamp<int64_t>(bl.nc, kPanelRows, 128);
  return bl;
}

// Epilogue for out rows [m0, m0 + rows_m) x columns [nb, nb + rows) from f32 sums
// c[m * ldc + j]: alpha and the packing unscale, bias, one rounding to the output dtype.
// Branch-free inner loops over columns (the bias converted to f32 once per chunk), so the
// compiler vectorizes them: a prefill GEMM stores M x N of these. Compiled for each vector
// width (StoreRowsFor); the operations are elementwise IEEE multiplies and adds (no
// contraction) and integer rounding, so every width gives the same bytes.
__attribute__((always_inline)) inline void StoreRowsBody(const Gemm& g, float unscale, const float* acc, int64_t ldc,
                                                         int64_t m0, int64_t rows_m, int64_t nb, int64_t rows) {
  constexpr int64_t kChunk = 256;
  float bias[kChunk];
  const float alpha = g.alpha;
  for (int64_t j0 = 0; j0 < rows; j0 += kChunk) {
    const int64_t n = std::min(kChunk, rows - j0);
    if (g.bias != nullptr)
      for (int64_t j = 0; j < n; ++j) bias[j] = LoadFloat(g.bias->data(), g.bias->dtype(), nb + j0 + j);
    for (int64_t m = 0; m < rows_m; ++m) {
      const float* c = acc + m * ldc + j0;
      const int64_t o = (m0 + m) * g.N + nb + j0;
      // v = alpha * (c * unscale) [+ bias]: no bias adds nothing (not even +0, which
      // would turn a -0 sum into +0).
      if (g.out_dtype == DType::kF32) {
        float* dst = static_cast<float*>(g.out) + o;
        if (g.bias != nullptr)
          for (int64_t j = 0; j < n; ++j) dst[j] = alpha * (c[j] * unscale) + bias[j];
        else
          for (int64_t j = 0; j < n; ++j) dst[j] = alpha * (c[j] * unscale);
      } else {
        uint16_t* dst = static_cast<uint16_t*>(g.out) + o;
        if (g.bias != nullptr)
          for (int64_t j = 0; j < n; ++j) dst[j] = FloatToBf16(alpha * (c[j] * unscale) + bias[j]);
        else
          for (int64_t j = 0; j < n; ++j) dst[j] = FloatToBf16(alpha * (c[j] * unscale));
      }
    }
  }
}
void StoreRowsPortable(const Gemm& g, float unscale, const float* acc, int64_t ldc, int64_t m0, int64_t rows_m,
                       int64_t nb, int64_t rows) {
  StoreRowsBody(g, unscale, acc, ldc, m0, rows_m, nb, rows);
}
#if defined(VT_CPU_X86)
// 4-wide SSE2 took 0.67 ns per output, 16-wide 0.3 (1 thread, 2048 columns x 16 rows with
// K = 4, where the epilogue is most of the call).
__attribute__((target("avx2"))) void StoreRowsAvx2(const Gemm& g, float unscale, const float* acc, int64_t ldc,
                                                   int64_t m0, int64_t rows_m, int64_t nb, int64_t rows) {
  StoreRowsBody(g, unscale, acc, ldc, m0, rows_m, nb, rows);
}
__attribute__((target("avx512f,avx512bw,avx512vl"))) void StoreRowsAvx512(const Gemm& g, float unscale,
                                                                        const float* acc, int64_t ldc, int64_t m0,
                                                                        int64_t rows_m, int64_t nb, int64_t rows) {
  StoreRowsBody(g, unscale, acc, ldc, m0, rows_m, nb, rows);
}
#endif
struct StoreRowsVariant {
  const char* name;
  StoreRowsFn fn;
};
StoreRowsVariant StoreRowsFor(CpuIsa isa) {
#if defined(VT_CPU_X86)
  if (isa >= CpuIsa::kAvx512) return {"avx512", &StoreRowsAvx512};
  if (isa >= CpuIsa::kAvx2) return {"avx2", &StoreRowsAvx2};
#endif
  (void)isa;
  return {"portable", &StoreRowsPortable};
}

// out rows [m0, m1) x columns [n0, n1) from packed a rows `ap` (stride bl.kp).
void RunTile(const KernelSet& ks, const Gemm& g, const Blocking& bl, const std::byte* ap, int64_t m0, int64_t m1,
             int64_t n0, int64_t n1) {
  const int64_t rows_m = m1 - m0;
  const float unscale = (g.a_dtype == DType::kF8E4M3 ? ks.fp8_unscale : 1.0f) *
                        (g.b_dtype == DType::kF8E4M3 ? ks.fp8_unscale : 1.0f);
  const size_t b_elt = DTypeSize(g.b_dtype);
  auto* panel = static_cast<std::byte*>(PanelScratch().Get(static_cast<size_t>(bl.nc * bl.kc * ks.elt_size)));
  auto* acc = static_cast<float*>(AccScratch().Get(static_cast<size_t>(rows_m * bl.nc) * sizeof(float)));
  for (int64_t nb = n0; nb < n1; nb += bl.nc) {
    const int64_t rows = std::min(bl.nc, n1 - nb);
    const int64_t rows_p = RoundUp(rows, kPanelRows);
    std::memset(acc, 0, static_cast<size_t>(rows_m * rows_p) * sizeof(float));
    for (int64_t k0 = 0; k0 < g.K; k0 += bl.kc) {
      const int64_t kc = std::min(bl.kc, g.K - k0);
      const int64_t kcp = RoundUp(kc, ks.kvec);
      const auto* bsrc = static_cast<const std::byte*>(g.b) + static_cast<size_t>(nb * g.K) * b_elt;
      int64_t filled = rows;
      if (ks.pack_panel != nullptr) {
        ks.pack_panel(g.b_dtype, bsrc, g.K, rows, k0, kc, panel, kcp, kcp);
        filled = RoundUp(rows, 2);
      } else {
        ks.pack(g.b_dtype, bsrc, g.K, rows, k0, kc, panel, kcp, kcp);
      }
      if (rows_p > filled)
        std::memset(panel + filled * kcp * ks.elt_size, 0, static_cast<size_t>((rows_p - filled) * kcp * ks.elt_size));
      ks.gemm(ap + (m0 * bl.kp + k0) * ks.elt_size, bl.kp, rows_m, panel, kcp, rows_p, kcp, acc, rows_p);
    }
    g.store_rows(g, unscale, acc, rows_p, m0, rows_m, nb, rows);
  }
}

// Small M: each thread streams its weight rows once through the set's direct path, in
// blocks of output columns that keep the f32 sums in L1.
void RunStream(const KernelSet& ks, const Gemm& g, const Blocking& bl, const std::byte* ap, int64_t n0,
               int64_t n1) {
  constexpr int64_t kCols = 256;
  const float unscale = (g.a_dtype == DType::kF8E4M3 ? ks.fp8_unscale : 1.0f) *
                        (g.b_dtype == DType::kF8E4M3 ? ks.fp8_unscale : 1.0f);
  const size_t b_elt = DTypeSize(g.b_dtype);
  auto* acc = static_cast<float*>(AccScratch().Get(static_cast<size_t>(g.M * kCols) * sizeof(float)));
  for (int64_t nb = n0; nb < n1; nb += kCols) {
    const int64_t rows = std::min(kCols, n1 - nb);
    const auto* bsrc = static_cast<const std::byte*>(g.b) + static_cast<size_t>(nb * g.K) * b_elt;
    ks.stream(g.b_dtype, ap, bl.kp, g.M, bsrc, g.K, rows, acc, rows);
    g.store_rows(g, unscale, acc, rows, 0, g.M, nb, rows);
  }
}

// The CPU's prepared form of a read-only fp8 weight [N, K] for MatmulFp8, or of a BF16 one
// for Matmul (vt::PrepareWeight, WeightUse::kMatmulB): copies laid out for one kernel set's
// outer-product kernel. `whole`
// holds all N rows; a row slice of the weight that starts on one of its blocks (a merged
// q/k/v or gate/up weight's shards, mostly) reads it from that block on, so a weight is not
// laid out twice. A slice named at preparation that starts inside a block has a copy of its
// own in `parts`.
struct PackedWeight final : BackendLayout {
  const matmul::PackedKernels* kernels = nullptr;
  int64_t K = 0;
  matmul::PackedCopy whole;
  struct Part {
    int64_t row0 = 0, rows = 0;
    matmul::PackedCopy copy;
  };
  std::vector<Part> parts;
};
// Per call, for tests (matmul/kernels.h): which paths the calls took.
std::atomic<int64_t> g_packed_gemm_calls{0}, g_f32bits_stream_calls{0}, g_f32bits_packed_calls{0},
    g_amx_stream_calls{0}, g_rows_as_one_calls{0}, g_rows_as_one_rows{0};

// The CPU's preparer for WeightUse::kMatmulB: fp8 and BF16 weights on a level with an
// outer-product kernel for them are laid out for it; anything else is left as it is.
Tensor PrepareMatmulWeightCpu(const Queue& q, const Tensor& w, WeightUse, std::span<const int64_t> row_starts) {
  CpuQueue& cq = Cpu(q);
  if (w.dtype() != DType::kF8E4M3 && w.dtype() != DType::kBF16) return w;
  const KernelSet& ks = ChooseKernels(cq.isa, w.dtype(), w.dtype());
  const matmul::PackedKernels* packed = w.dtype() == DType::kBF16 ? ks.packed_bf16 : ks.packed;
  const int64_t N = w.dim(0), K = w.dim(1);
  if (packed == nullptr || N == 0 || K == 0) return w;
  const matmul::PackedKernels& pk = *packed;
  auto layout = std::make_shared<PackedWeight>();
  layout->kernels = &pk;
  layout->K = K;
  const auto* src = static_cast<const uint8_t*>(w.data());
  const int64_t elt = static_cast<int64_t>(DTypeSize(w.dtype()));
  if (!matmul::PackRows(cq, pk, src, N, K, layout->whole)) return w;  // multiplied as stored
  for (size_t i = 0; i < row_starts.size(); ++i) {
    const int64_t row0 = row_starts[i], end = i + 1 < row_starts.size() ? row_starts[i + 1] : N;
    if (end == row0 || row0 % pk.block_cols == 0) continue;  // empty, or read from `whole`
    PackedWeight::Part part;
    part.row0 = row0;
    part.rows = end - row0;
    // Rows of a weight without NaN codes have none either.
    VT_CHECK(matmul::PackRows(cq, pk, src + row0 * K * elt, part.rows, K, part.copy), "internal: PrepareWeight: rows ",
             row0, "..", end, " of ", w.Describe(), " hold NaN codes the whole weight does not");
    layout->parts.push_back(std::move(part));
  }
  return w.WithBackendLayout(std::move(layout));
}

// The first block of b's rows in the copies of b's prepared weight laid out for `pk`; null
// where b is not a prepared weight (or a row slice of one), was prepared for another
// kernel set, or is a slice starting inside a block that no copy of its own holds.
// Allocates nothing: MatmulFp8 asks on every call.
const uint8_t* PackedBlocksOf(const matmul::PackedKernels& pk, const Tensor& b) {
  const auto* w = dynamic_cast<const PackedWeight*>(b.backend_layout());
  if (w == nullptr || w->kernels != &pk || b.dim(1) != w->K) return nullptr;
  const size_t row_bytes = static_cast<size_t>(w->K) * DTypeSize(pk.dtype);
  if (b.storage_offset() % row_bytes != 0) return nullptr;
  const int64_t row0 = static_cast<int64_t>(b.storage_offset() / row_bytes);
  if (row0 % pk.block_cols == 0) return w->whole.bytes() + (row0 / pk.block_cols) * pk.bytes(pk.block_cols, w->K);
  for (const PackedWeight::Part& part : w->parts)
    if (part.row0 == row0 && b.dim(0) <= part.rows) return part.copy.bytes();
  return nullptr;
}

// fp8 x fp8 on a read-only weight's re-laid-out copy: a's rows packed once, then the
// threads split the weight's blocks (or, for many rows of a and few blocks, the rows).
// Each thread takes its rows of a in passes of `mc` (all of them up to 16; past that as
// many as keep ~512 KiB of packed rows in L2 while its blocks meet them, so each pass
// reads its weights from memory once), and its blocks in chunks of 256 columns (f32 sums,
// then the epilogue).
void RunPacked(CpuQueue& cq, const matmul::PackedKernels& pk, const Gemm& g, const uint8_t* blocks_of_b) {
  constexpr int64_t kChunkCols = 256;
  const int64_t chunk_blocks = kChunkCols / pk.block_cols;
  const int64_t kPartsPieceBlocks = 4096 / pk.block_cols;
  const int64_t lda = RoundUp(g.K, pk.a_align);
  auto* ap = static_cast<std::byte*>(ARowsScratch().Get(static_cast<size_t>(g.M * lda) * pk.a_elt_size));
  cq.pool.ParallelFor(g.M, 16, [&](int64_t m0, int64_t m1) {
    pk.pack_a(static_cast<const uint8_t*>(g.a) + m0 * g.K * static_cast<int64_t>(DTypeSize(pk.dtype)), g.K, m1 - m0,
              ap + m0 * lda * pk.a_elt_size, lda);
  });
  const int64_t blocks = (g.N + pk.block_cols - 1) / pk.block_cols;
  const int64_t mc =
      g.M <= 16 ? g.M : std::clamp<int64_t>((512 << 10) / (lda * pk.a_elt_size) / 8 * 8, 8, RoundUp(g.M, 8));
  auto run = [&](int64_t m_begin, int64_t m_end, int64_t j0, int64_t j1) {
    // Up to kPackedPartsMaxRows rows the kernel reads its blocks in long streams: the
    // thread's range in as few even pieces of up to 4096 columns as it takes.
    const int64_t pieces = (j1 - j0 + kPartsPieceBlocks - 1) / kPartsPieceBlocks;
    const int64_t chunk = g.M <= matmul::kPackedPartsMaxRows ? (j1 - j0 + pieces - 1) / pieces : chunk_blocks;
    const int64_t ldc = chunk * pk.block_cols;
    auto* acc = static_cast<float*>(AccScratch().Get(static_cast<size_t>(mc * ldc) * sizeof(float)));
    for (int64_t m0 = m_begin; m0 < m_end; m0 += mc) {
      const int64_t rows_m = std::min(mc, m_end - m0);
      for (int64_t jb = j0; jb < j1; jb += chunk) {
        const int64_t je = std::min(jb + chunk, j1);
        pk.gemm(ap + m0 * lda * pk.a_elt_size, lda, rows_m, blocks_of_b, g.K, jb, je, acc, ldc);
        const int64_t n0 = jb * pk.block_cols;
        g.store_rows(g, pk.unscale, acc, ldc, m0, rows_m, n0, std::min(je * pk.block_cols, g.N) - n0);
      }
    }
  };
  const int threads = cq.pool.size();
  if (g.M <= 16 || blocks >= 2 * static_cast<int64_t>(threads)) {
    cq.pool.ParallelFor(blocks, 4, [&](int64_t j0, int64_t j1) { run(0, g.M, j0, j1); });
  } else {
    cq.pool.ParallelFor(g.M, 8, [&](int64_t m0, int64_t m1) { run(m0, m1, 0, blocks); });
  }
}

// rows_as_one: every row as a one-row call computes it (matmul/rows.h), whatever M is.
void RunGemm(const Queue& q, Gemm g, bool rows_as_one = false) {
  CpuQueue& cq = Cpu(q);
  const StoreRowsVariant store = StoreRowsFor(cq.isa);
  g.store_rows = store.fn;
  g.store_rows_name = store.name;
  const KernelSet& ks = ChooseKernels(cq.isa, g.a_dtype, g.b_dtype);
  if (g.M == 0 || g.N == 0) return;
  if (rows_as_one && g.M > 1) {
    g_rows_as_one_calls.fetch_add(1, std::memory_order_relaxed);
    g_rows_as_one_rows.fetch_add(g.M, std::memory_order_relaxed);
  } else {
    rows_as_one = false;
  }
  const matmul::PackedKernels* packed =
      g.a_dtype != g.b_dtype ? nullptr
      : g.b_dtype == DType::kF8E4M3 ? ks.packed
      : g.b_dtype == DType::kBF16  ? ks.packed_bf16
                                   : nullptr;
  if (packed != nullptr && g.b_tensor != nullptr) {
    if (const uint8_t* blocks = PackedBlocksOf(*packed, *g.b_tensor); blocks != nullptr) {
      // Every M: the packed kernels' rows never depend on it (matmul/kernels.h).
      NoteGemm(matmul::LastGemm{packed->name, false, true, g.store_rows_name}, g.b_dtype);
      RunPacked(cq, *packed, g, blocks);
      g_packed_gemm_calls.fetch_add(1, std::memory_order_relaxed);
      if (packed->inner != nullptr && packed->inner() == matmul::Inner::kF32Bits)
        g_f32bits_packed_calls.fetch_add(1, std::memory_order_relaxed);
      return;
    }
  }
  VT_CHECK(g.b != nullptr, g.a_dtype == DType::kF8E4M3 ? "MatmulFp8" : "Matmul", ": the bytes of b ",
           g.b_tensor->Describe(), " were released after it was laid out for other kernels; the ", ks.name,
           " kernels of this queue (", CpuIsaName(cq.isa), ") need them");

  // The path: streaming for small M where the set has it (for rows_as_one, where one row
  // streams), the blocked one otherwise.
  const bool streams = ks.stream != nullptr && g.a_dtype == g.b_dtype;
  const bool stream = streams && (rows_as_one ? ks.stream_max_m >= 1 : g.M <= ks.stream_max_m);
  if (rows_as_one && stream && ks.rows_as_one == nullptr) {  // one call per row
    const size_t a_row = static_cast<size_t>(g.K) * DTypeSize(g.a_dtype);
    const size_t out_row = static_cast<size_t>(g.N) * DTypeSize(g.out_dtype);
    for (int64_t m = 0; m < g.M; ++m) {
      Gemm row = g;
      row.M = 1;
      row.a = static_cast<const std::byte*>(g.a) + m * a_row;
      row.out = static_cast<std::byte*>(g.out) + m * out_row;
      RunGemm(q, row);
    }
    return;
  }
  // rows_as_one streams with the set whose stream keeps each row as it is alone, and
  // blocks K as a one-row call does (all of it at once).
  const KernelSet& rs = rows_as_one && stream ? *ks.rows_as_one : ks;
  const Blocking bl = ChooseBlocking(ks, rows_as_one ? 1 : g.M, g.K);

  // Pack every row of a once, shared by all threads.
  auto* ap = static_cast<std::byte*>(ARowsScratch().Get(static_cast<size_t>(g.M * std::max<int64_t>(bl.kp, 1)) *
                                                        ks.elt_size));
  const size_t a_elt = DTypeSize(g.a_dtype);
  cq.pool.ParallelFor(g.M, 16, [&](int64_t m0, int64_t m1) {
    ks.pack(g.a_dtype, static_cast<const std::byte*>(g.a) + static_cast<size_t>(m0 * g.K) * a_elt, g.K, m1 - m0,
            0, g.K, ap + m0 * bl.kp * ks.elt_size, bl.kp, bl.kp);
  });

  // Split N across threads (every decode, and prefill with enough weight rows); split M
  // when N is too small to feed the threads.
  const int threads = cq.pool.size();
  NoteGemm(matmul::LastGemm{rs.name, stream, false, g.store_rows_name}, g.b_dtype);
  if (stream) {
    const std::byte* as = ap;
    const size_t prepared = rs.stream_a_bytes != nullptr ? rs.stream_a_bytes(g.b_dtype, bl.kp, g.M) : 0;
    if (prepared > 0) {
      auto* dst = static_cast<std::byte*>(StreamAScratch().Get(prepared));
      const int64_t blocks = (g.M + matmul::kStreamABlockRows - 1) / matmul::kStreamABlockRows;
      cq.pool.ParallelFor(blocks, 1, [&](int64_t b0, int64_t b1) { rs.prepare_stream_a(ap, bl.kp, g.M, b0, b1, dst); });
      as = dst;
    }
    cq.pool.ParallelFor(g.N, kPanelRows, [&](int64_t n0, int64_t n1) { RunStream(rs, g, bl, as, n0, n1); });
    const matmul::Inner inner = rs.stream_inner != nullptr ? rs.stream_inner(g.b_dtype, g.M) : matmul::Inner::kPlain;
    if (inner == matmul::Inner::kF32Bits) g_f32bits_stream_calls.fetch_add(1, std::memory_order_relaxed);
    if (inner == matmul::Inner::kAmxTiles) g_amx_stream_calls.fetch_add(1, std::memory_order_relaxed);
  } else if (rows_as_one || g.N >= static_cast<int64_t>(threads) * 4 * kPanelRows || g.M < 64) {
    cq.pool.ParallelFor(g.N, kPanelRows, [&](int64_t n0, int64_t n1) { RunTile(ks, g, bl, ap, 0, g.M, n0, n1); });
  } else {
    cq.pool.ParallelFor(g.M, 16, [&](int64_t m0, int64_t m1) { RunTile(ks, g, bl, ap, m0, m1, 0, g.N); });
  }
}

void MatmulFp8Cpu(const Queue& q, const Tensor& out, const Tensor& a, const Tensor& b, float alpha,
                  const Tensor* bias) {
  // A weight whose bytes were released is multiplied from its re-laid-out copy only.
  const void* b_bytes = b.bytes_released() ? nullptr : b.data();
  RunGemm(q, Gemm{a.dim(0), b.dim(0), a.dim(1), a.data(), a.dtype(), b_bytes, b.dtype(), out.data(), out.dtype(),
                  bias, alpha, &b});
}

void MatmulCpu(const Queue& q, const Tensor& out, const Tensor& a, const Tensor& b, const Tensor* bias) {
  // A weight whose bytes were released is multiplied from its re-laid-out copy only.
  const void* b_bytes = b.bytes_released() ? nullptr : b.data();
  RunGemm(q, Gemm{a.dim(0), b.dim(0), a.dim(1), a.data(), a.dtype(), b_bytes, b.dtype(), out.data(), out.dtype(),
                  bias, 1.0f, &b});
}

}  // namespace

void matmul::GemmRowsAsOne(const Queue& q, const Tensor& out, const Tensor& a, const Tensor& b, float alpha) {
  const void* b_bytes = b.bytes_released() ? nullptr : b.data();
  RunGemm(q,
          Gemm{a.dim(0), b.dim(0), a.dim(1), a.data(), a.dtype(), b_bytes, b.dtype(), out.data(), out.dtype(), nullptr,
               alpha, &b},
          true);
}
int64_t matmul::RowsAsOneCalls() { return g_rows_as_one_calls.load(std::memory_order_relaxed); }
int64_t matmul::RowsAsOneRows() { return g_rows_as_one_rows.load(std::memory_order_relaxed); }

matmul::LastGemm matmul::LastGemmOnThisThread() { return t_last_gemm; }
void matmul::ResetGemmsSeenOnThisThread() { t_gemms_seen_count = 0; }
int matmul::GemmsSeenOnThisThread(GemmSeen* out, int capacity) {
  for (int i = 0; i < t_gemms_seen_count && i < capacity; ++i) out[i] = t_gemms_seen[i];
  return t_gemms_seen_count;
}
const char* matmul::StoreRowsForTest(int isa, const float* acc, int64_t rows, int64_t cols, float unscale,
                                     float alpha, const float* bias, DType out_dtype, void* out) {
  const Tensor bias_t = bias != nullptr ? Tensor::FromHost(bias, {cols}, DType::kF32) : Tensor();
  const StoreRowsVariant store = StoreRowsFor(static_cast<CpuIsa>(isa));
  const Gemm g{rows,    cols,      1,     nullptr, DType::kF8E4M3, nullptr, DType::kF8E4M3, out, out_dtype,
               bias != nullptr ? &bias_t : nullptr, alpha, nullptr, store.fn, store.name};
  store.fn(g, unscale, acc, cols, 0, rows, 0, cols);
  return store.name;
}
int64_t matmul::PackedGemmCalls() { return g_packed_gemm_calls.load(std::memory_order_relaxed); }
int64_t matmul::AmxStreamCalls() { return g_amx_stream_calls.load(std::memory_order_relaxed); }
int64_t matmul::F32BitsStreamCalls() { return g_f32bits_stream_calls.load(std::memory_order_relaxed); }
int64_t matmul::F32BitsPackedCalls() { return g_f32bits_packed_calls.load(std::memory_order_relaxed); }
#if !defined(VT_CPU_X86)
int64_t matmul::Avx2PanelGemms() { return 0; }
void matmul::SetFp8StreamDecode(Fp8StreamDecode) {}
#endif

void RegisterMatmulKernels() {
  Register<OpId::kMatmulFp8>(DeviceType::kCPU, &MatmulFp8Cpu);
  Register<OpId::kMatmul>(DeviceType::kCPU, &MatmulCpu);
  RegisterWeightPreparer(DeviceType::kCPU, WeightUse::kMatmulB, &PrepareMatmulWeightCpu);
  matmul::RegisterFp8GroupScaledKernel();
}

}  // namespace vt::cpu
