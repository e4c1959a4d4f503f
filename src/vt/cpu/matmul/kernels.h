// The pieces a CPU matmul kernel set provides to the shared blocked driver (matmul.cpp).
//
// The driver computes out[M, N] = scale · a[M, K] · b[N, K]ᵀ (+ bias) in three steps:
//   1. pack every row of a once into the set's compute format (BF16 or F32), K padded
//      with zeros to a multiple of `kvec`;
//   2. per thread, for a block of NC rows of b and a block of KC columns, pack the block
//      into a panel of the same format (each weight byte is read and decoded once per
//      call), then `gemm` accumulates c[m, n] += Σ_k a[m, k]·panel[n, k] in f32;
//   3. the epilogue applies alpha (and the sets' fp8 unscale), adds the bias and rounds
//      once to the output dtype.
// The reduction runs along K inside vector lanes (the on-disk [N, K] layout needs no
// transposition); lanes are summed when a K block ends.
//
// Only plain data and function pointers cross between the files compiled for different
// ISAs, so no inline function is ever shared between them.
#pragma once

#include <cstddef>
#include <cstdint>

#include "vt/dtype.h"

namespace vt::cpu::matmul {

// The inner path a kernel takes where it has several, answered by the same predicate its
// own branch uses: the driver records it once per call (the test counters below), so the
// kernels carry no instrumentation.
enum class Inner : uint8_t {
  kPlain,
  kF32Bits,   // the AVX2 fp8 decode into f32 bits (Fp8StreamDecode::kF32Bits)
  kAmxTiles,  // the AMX tiles
};

// Rows of b handled by one micro-tile; the driver pads panels to a multiple of it.
inline constexpr int kPanelRows = 4;

// A GEMM on weights re-laid out once into blocks of `block_cols` weight rows, for kernels
// that keep one output column per vector lane (matmul/packed_avx512.cpp and
// matmul/packed_avx2.cpp describe their layouts): fp8 x fp8, or BF16 x BF16 where `dtype`
// says so (a and b both of it; "fp8" below reads as that dtype's elements then). The driver
// uses it only for weights prepared for it (vt::PrepareWeight), whose re-laid-out copy,
// made once, their storage keeps as the CPU's backend layout; the weight's own bytes are
// then no longer read.
struct PackedKernels {
  const char* name;
  int64_t block_cols;  // weight rows (output columns) per block
  int a_elt_size;      // bytes per element of a's packed rows
  int a_align;         // a's packed rows are a multiple of this many elements apart
  // Packed weight values are value / unscale exactly (a power of two); a's are exact.
  float unscale;
  // false: the decode makes NaN codes finite, so a weight holding any is not laid out.
  bool keeps_nan;
  // Bytes of the re-laid-out copy of an [N, K] fp8 weight.
  size_t (*bytes)(int64_t N, int64_t K);
  // Writes blocks [block0, block1) of the copy of b [N, K] into dst (the whole copy's
  // base); blocks are independent, so threads may write different ones. Returns the NaN
  // codes it met where !keeps_nan (0 otherwise).
  int64_t (*pack)(const uint8_t* b, int64_t N, int64_t K, int64_t block0, int64_t block1, uint8_t* dst);
  // Rows of fp8 a [rows, K] in K order into dst (lda elements apart, zero from K to lda).
  void (*pack_a)(const uint8_t* a, int64_t K, int64_t rows, void* dst, int64_t lda);
  // c[m * ldc + n - block_cols * block0] = Σ_k a[m, k]·b[n, k] / unscale for m < M and
  // every column n of blocks [block0, block1) (also the padding columns past N). Up to
  // kPackedPartsMaxRows rows the blocks are read as a few long sequential streams (see
  // ForEachPackedTile), so callers pass a thread's whole range there.
  void (*gemm)(const void* a, int64_t lda, int64_t M, const uint8_t* packed, int64_t K, int64_t block0,
               int64_t block1, float* c, int64_t ldc);
  // Optional: the inner path gemm takes now (nullptr: kPlain).
  Inner (*inner)() = nullptr;
  // The dtype of a and of the weights (kF8E4M3 or kBF16).
  DType dtype = DType::kF8E4M3;
};
// Rows of a up to which PackedKernels::gemm reads its blocks in parts (decode).
inline constexpr int64_t kPackedPartsMaxRows = 16;

struct KernelSet {
  const char* name;
  int kvec;        // K padding of packed rows (elements); block starts are multiples of it
  int elt_size;    // bytes per packed element (2: BF16, 4: F32)
  // Packed fp8 values hold value / fp8_unscale exactly (a power of two), so the result
  // is multiplied by fp8_unscale once per fp8 operand.
  float fp8_unscale;
  // Accepted source dtypes: true if pack handles `d` with this set.
  bool (*accepts)(DType d);
  // dst[r * ld + k] = src[r * src_ld + k0 + k] for r < rows, k < kc (as the packed format),
  // zero for kc <= k < kcp. kcp is a multiple of kvec; ld >= kcp.
  void (*pack)(DType src_dtype, const void* src, int64_t src_ld, int64_t rows, int64_t k0, int64_t kc,
               void* dst, int64_t ld, int64_t kcp);
  // c[m * ldc + n] += Σ_{k < kcp} a[m * lda + k] · p[n * ldp + k] for m < M, n < nrows.
  // nrows is a multiple of kPanelRows; a, p 64-byte aligned with lda, ldp multiples of kvec.
  void (*gemm)(const void* a, int64_t lda, int64_t M, const void* p, int64_t ldp, int64_t nrows, int64_t kcp,
               float* c, int64_t ldc);
  // Optional direct path for small M (nullptr: the blocked path only). Weight rows stream
  // from memory straight into the multiply without a panel:
  // c[m * ldc + n] = Σ_{k < K} a[m * lda + k] · b[n, k] for m < M, n < nrows, where a holds
  // rows packed as by `pack` (zero from K to lda, lda a multiple of kvec) and b is the raw
  // [nrows, K] operand of dtype `b_dtype`, packed by `pack` from that same dtype.
  void (*stream)(DType b_dtype, const void* a, int64_t lda, int64_t M, const void* b, int64_t K, int64_t nrows,
                 float* c, int64_t ldc);
  // Largest M that takes `stream`: past it, decoding each weight group once per few rows
  // of a costs more than packing a panel once (chosen per set; bench/kernel_notes.md).
  int64_t stream_max_m = 0;
  // Optional, with stream: a's packed rows rearranged once per call into the layout the
  // stream path reads, so that its calls (one per block of weight rows and thread) do not
  // each redo it. stream_a_bytes(b_dtype, lda, M) is 0 where stream reads the packed rows
  // as they are; otherwise prepare_stream_a fills that many bytes at dst for the row blocks
  // [block0, block1) (kStreamABlockRows rows each; blocks are independent, so threads
  // may fill different ones), and stream receives dst as its a.
  size_t (*stream_a_bytes)(DType b_dtype, int64_t lda, int64_t M) = nullptr;
  void (*prepare_stream_a)(const void* a, int64_t lda, int64_t M, int64_t block0, int64_t block1, void* dst) = nullptr;
  // Optional: the fp8 x fp8 GEMM on re-laid-out weights, for read-only weights (every M).
  const PackedKernels* packed = nullptr;
  // Optional, with stream: the inner path stream takes for b_dtype and M rows of a
  // (nullptr: kPlain).
  Inner (*stream_inner)(DType b_dtype, int64_t M) = nullptr;
  // Optional, with stream: the set whose `stream` (with its stream_a_bytes and
  // prepare_stream_a), called with any number of rows of a, gives every row exactly the
  // sums this set's stream gives that row alone (M = 1), reading each weight row from
  // memory once for all of them; its pack and kvec are this set's. The set itself where
  // its stream's rows never depend on M (AVX2 and AVX-512 F32, AVX-512 BF16, NEON BF16);
  // the AVX-512 BF16 set for AMX (its one-row calls run that set's stream); a variant that
  // runs the rows one at a time against each group of weight rows (still in L1) for NEON
  // F32, whose pairs of rows sum differently from one row. nullptr: none established, and
  // GemmRowsAsOne (matmul/rows.h) multiplies such a set's rows one call each.
  const KernelSet* rows_as_one = nullptr;
  // Optional: the panel packing of the blocked path (nullptr: `pack`), for a gemm that reads
  // panel rows in another layout than a's rows. It fills `rows` rows rounded up to an even
  // count (the odd row's partner zero); the driver zeroes the panel from there to the
  // multiple of kPanelRows.
  void (*pack_panel)(DType src_dtype, const void* src, int64_t src_ld, int64_t rows, int64_t k0, int64_t kc,
                     void* dst, int64_t ld, int64_t kcp) = nullptr;
  // Optional: the BF16 x BF16 GEMM on re-laid-out weights (PackedKernels of dtype kBF16),
  // for read-only weights (every M).
  const PackedKernels* packed_bf16 = nullptr;
};
// Every set's `gemm` gives row m of a the same sums whatever M and the other rows are
// (each row's accumulators see the same operations in the same order for every tile
// height), and so does every PackedKernels::gemm (one f32 lane per output column,
// summing all of K in order); matmul/rows.h relies on both (matmul_rows_test.cpp and
// moe_test.cpp check them on every level the test binary runs).
inline constexpr int64_t kStreamABlockRows = 16;

// Throws vt::Error for a dtype a set's pack does not handle (defined in the portable
// code: ISA-specific files construct no exceptions or shared inline functions, which the
// linker could otherwise pick for code meant to run on any processor).
[[noreturn]] void ThrowUnsupportedPack(const char* set, DType dtype);

// The kernel set and path of the calling thread's last CPU Matmul/MatmulFp8 (for tests:
// which code a queue's ISA level really ran); set nullptr before any call.
struct LastGemm {
  const char* set = nullptr;
  bool stream = false;
  bool packed = false;  // the re-laid-out weight's kernels (PackedKernels) ran
  const char* epilogue = nullptr;  // the vector width the results were stored with
};
LastGemm LastGemmOnThisThread();
// Every distinct (set, path, weight dtype) the calling thread's CPU Matmul/MatmulFp8 calls
// ran since ResetGemmsSeenOnThisThread (at most 16 kept; for tests that run a whole model
// step, e.g. the engine's, whose last GEMM is not its FP8 one).
struct GemmSeen {
  const char* set = nullptr;
  bool stream = false;
  bool packed = false;
  DType b_dtype = DType::kF32;
};
void ResetGemmsSeenOnThisThread();
int GemmsSeenOnThisThread(GemmSeen* out, int capacity);  // fills up to capacity; returns the count kept
// Tests: the epilogue a queue at ISA level `isa` (a vt::CpuIsa) stores with, on f32 sums
// acc [rows, cols]: out[r * cols + j] = alpha * (acc[r * cols + j] * unscale) [+ bias[j]]
// rounded once to out_dtype (kF32 or kBF16). Returns the variant's name.
const char* StoreRowsForTest(int isa, const float* acc, int64_t rows, int64_t cols, float unscale, float alpha,
                             const float* bias, DType out_dtype, void* out);
// Calls of Matmul/MatmulFp8 in this process that ran a PackedKernels gemm.
int64_t PackedGemmCalls();
// Re-laid-out weight copies made in this process, all by vt::PrepareWeight: one per weight
// (its row slices that start on a block read it), one more per named slice that does not.
int64_t PackedCopiesMade();
// Calls that streamed on the AMX tiles in this process (0 where they are not built).
int64_t AmxStreamCalls();

// The operands of MatmulFp8GroupScaled's x86 rows (matmul/fp8_group_scaled_avx512.cpp,
// matmul/fp8_group_scaled_avx2.cpp; the driver is matmul/fp8_group_scaled.cpp). a's rows
// are laid out per group of K: group g's values start at g * gstride (gstride a multiple
// of the kernel's step, zero from the group's end to it), in the order and format the
// kernel's decode gives the weights in.
struct GroupScaledRows {
  const void* a;   // M rows, lda elements apart (lda = G * gstride)
  int64_t lda, M, K, G, block_k, gstride;
  const uint8_t* b;      // the weight's codes [N, K]
  const float* scales;   // [M, NB, G]: s_a[m, g] · s_b[nb, g] (times the decode's unscale)
  int64_t NB, block_n;   // weight row n reads scale row n / block_n
};
// Every kernel below gives row m of a and weight row n the same sums whatever M is and
// whichever of its paths runs them (each file's header says how), so MoE experts may
// multiply all their tokens at once (cpu/moe.cpp).

// AVX-512 BF16 (with AVX512-VBMI): a's rows as BF16 in the fp8 table's order (64-value
// steps), packed by PackAGroupScaledAvx512 (rows of fp8 codes [rows, K] into dst).
// GroupScaledSumsAvx512 writes c[m * ldc + n - n0] = Σ_g (Σ_{k in g} a[m, k]·b[n, k]) ·
// scales[m, n / block_n, g] for every m < M and n in [n0, n1); scratch: GroupScaledScaleFloats(G)
// floats, then 4 * lda BF16 (64-byte aligned).
inline int64_t GroupScaledScaleFloats(int64_t G) { return (16 * G + 15) / 16 * 16; }
void PackAGroupScaledAvx512(const uint8_t* a, int64_t K, int64_t rows, int64_t block_k, int64_t gstride, int64_t lda,
                            void* dst);
void GroupScaledSumsAvx512(const GroupScaledRows& p, int64_t n0, int64_t n1, void* scratch, float* c, int64_t ldc);
// AVX2: a's rows as f32 in 16-value steps, for the kF32Bits decode (`bits`) times 2^112 with
// each step's even K offsets first, otherwise as they are; scales times 2^8. The same sums
// into c, except for weight rows holding a NaN code: nan_rows[n - n0] = 1 and their sums
// unset (the decodes make NaN finite; the driver computes those rows the portable way).
// wbuf: 2 * lda floats of scratch. Returns the weight rows it decoded in registers: four at a
// time for a decode step (M = 1), in pairs for 2 to 8 rows of a.
int64_t GroupScaledSumsAvx2(const GroupScaledRows& p, bool bits, int64_t n0, int64_t n1, float* wbuf, float* c,
                            int64_t ldc, uint8_t* nan_rows);
// AVX2 (and the AVX-512 F32 level) on a weight prepared for MatmulFp8GroupScaled
// (vt::PrepareWeight, WeightUse::kMatmulGroupScaledB): the weight laid out as MatmulFp8's
// (Avx2PackedKernels: blocks of 8 columns, K in interleaved pairs), multiplied by the
// outer-product tiles of matmul/packed_avx2.cpp with each group's sums scaled into the
// output: c[m * ldc + n - 8 * block0] = Σ_g (Σ_{k in g} a[m, k]·b[n, k]) · (s_a[m, g] ·
// s_b(n, g) · 2^8) for m < M and every column n of blocks [block0, block1) (the padding
// columns past N too), a's rows as Avx2PackedKernels().pack_a lays them out. The groups
// must start on pairs of K (GroupScaledPackable). Each (row, column) is summed in K order
// in one lane whatever M and the tile are, so a row's sums are those it gets alone.
struct GroupScaledPacked {
  const void* a;  // M rows, lda elements apart (f32 for AVX2, BF16 for AVX-512)
  int64_t lda, M, K, G, block_k;
  const float* sa;  // a's group scales, G per row
  const float* sb;  // the weight's [NB, G]: column n reads row n / block_n
  int64_t block_n;
  // Where block_n is not a multiple of 8: [blocks, G, 8] column scales (0 past N); else null
  // (each block's 8 columns share one scale row).
  const float* sb_lanes;
};
// k_step: the K values of one step of the layout (2 for AVX2, 4 for AVX-512).
inline bool GroupScaledPackable(int64_t K, int64_t block_k, int64_t k_step) {
  return block_k % k_step == 0 || block_k >= K;
}
void GroupScaledPackedAvx2(const GroupScaledPacked& p, const uint8_t* packed, int64_t block0, int64_t block1, float* c,
                           int64_t ldc);
// The same on the AVX-512 BF16 level (with VBMI): the weight laid out as Avx512Bf16PackedKernels
// lays out static FP8 (blocks of 16 columns, K in steps of 4), a's rows as its pack_a lays
// them out (BF16), the scale s_a · s_b (its decode is exact); groups start on steps of 4.
void GroupScaledPackedAvx512(const GroupScaledPacked& p, const uint8_t* packed, int64_t block0, int64_t block1,
                             float* c, int64_t ldc);
// AVX2 calls of MatmulFp8GroupScaled on such a laid-out weight, and weights laid out for it.
int64_t Fp8GroupScaledPackedCalls();
int64_t Fp8GroupScaledPackedWeights();
// Calls of MatmulFp8GroupScaled in this process that took the AVX2 rows, and the AVX-512
// ones; weight rows of AVX2 calls that went four at a time in registers with the kF32Bits
// decode, and with the half trick.
int64_t Fp8GroupScaledAvx2Calls();
int64_t Fp8GroupScaledAvx512Calls();
int64_t Fp8GroupScaledRows4(bool bits);
// Weight rows of AVX2 calls with 2 to 8 rows of a that went in pairs in registers.
int64_t Fp8GroupScaledPairRows();

// How the AVX2 streaming path (also the AVX-512 F32 set's) decodes fp8 weights:
//  - kHalf: the half trick (value * 2^-8 as an IEEE half, then vcvtph2ps);
//  - kF32Bits: the code's bits placed straight into f32 bits (value * 2^-120, five integer
//    instructions per 16 codes), against rows of a prepared once per call. fp8 subnormals
//    become f32 subnormals, which AMD cores multiply at full speed and Intel cores through
//    microcode assists, which make this decode far slower than kHalf there and faster on
//    AMD (bench/kernel_notes.md);
//  - kAuto (the default): kF32Bits on AMD processors, kHalf elsewhere.
// Both give results within the DESIGN bound; the lanes sum the K values in a different
// order, so the bits may differ. Set for tests and benchmarks; not thread-safe with calls.
enum class Fp8StreamDecode { kAuto, kHalf, kF32Bits };
void SetFp8StreamDecode(Fp8StreamDecode decode);
// Calls whose AVX2 streaming path decoded fp8 as kF32Bits (0 where it is not built).
int64_t F32BitsStreamCalls();
// Calls whose AVX2 outer-product kernel (Avx2PackedKernels) decoded as kF32Bits.
int64_t F32BitsPackedCalls();
// From this many rows of a, that kernel (and GroupScaledPackedAvx2 on its layout) decodes
// each pair of weight blocks once into an f32 panel that all the rows read
// (matmul/packed_avx2.cpp); their calls (one per thread's range of blocks) that did (0
// where they are not built).
inline constexpr int64_t kAvx2PanelMinRows = 9;
int64_t Avx2PanelGemms();

// The streaming path of the F32 sets (AVX2 code, also used by the AVX-512 F32 set; the NEON
// sets' own): a packed as their packs do, b fp8, BF16 or F32. It takes M <= kStreamMaxMF32:
// it decodes the weights again for every pair of rows of a, so past a few rows packing a
// panel once costs less (bench/kernel_notes.md has the x86 measurements; the NEON sets take
// the same bound, unmeasured on ARM hardware).
inline constexpr int64_t kStreamMaxMF32 = 4;

// The portable set (plain C++ the compiler vectorizes); always available.
const KernelSet& ScalarKernels();
#if defined(VT_CPU_X86)
const KernelSet& Avx2Kernels();        // F32 FMA on 8 lanes
const KernelSet& Avx512Kernels();      // F32 FMA on 16 lanes
const KernelSet& Avx512Bf16Kernels();  // BF16 pairs, vdpbf16ps (F32 accumulation)
const KernelSet& AmxKernels();         // the BF16-pairs set, GEMMs of 4..4096 rows of a on AMX tiles
const PackedKernels& Avx512Bf16PackedKernels();  // vdpbf16ps, 16 columns per block
const PackedKernels& Avx512Bf16PackedBf16Kernels();  // the same blocks for BF16 weights
const PackedKernels& Avx2PackedKernels();        // F32 FMA, 8 columns per block
void StreamF32Avx2(DType b_dtype, const void* a, int64_t lda, int64_t M, const void* b, int64_t K, int64_t nrows,
                   float* c, int64_t ldc);
// Its stream_inner: kF32Bits where it decodes fp8 that way.
Inner StreamInnerF32Avx2(DType b_dtype, int64_t M);
// Its stream_a_bytes and prepare_stream_a (the rows of a for the kF32Bits decode).
size_t StreamABytesF32Avx2(DType b_dtype, int64_t lda, int64_t M);
void PrepareStreamAF32Avx2(const void* a, int64_t lda, int64_t M, int64_t block0, int64_t block1, void* dst);
// Whether the AVX2 decodes use kF32Bits now (SetFp8StreamDecode, kAuto: on AMD).
bool Fp8DecodeAsF32Bits();
#endif
#if defined(VT_CPU_ARM)
const KernelSet& NeonKernels();      // F32 FMLA on 4 lanes (matmul/gemm_neon.cpp)
const KernelSet& NeonBf16Kernels();  // BF16 pairs, BFDOT (matmul/gemm_neonbf16.cpp)
#endif

// Registers MatmulFp8GroupScaled (fp8_group_scaled.cpp); called by RegisterMatmulKernels.
void RegisterFp8GroupScaledKernel();

}  // namespace vt::cpu::matmul
