// The vector kernels of CPU PagedAttention (attention.cpp): query vectors against the keys
// of one cache block with the online-softmax update, one set per ISA (attention_avx512.cpp,
// attention_avx2.cpp, attention_neon.cpp). Only plain data and function pointers cross
// between those files and the portable code.
#pragma once

#include <cstdint>

#include "vt/dtype.h"
#include "vt/queue.h"

namespace vt::cpu::attention {

// Bytes a decode call pulls toward the core's L2 while it works (the next cache block's
// share of rows, RunDecodePiece): `lines` 64-byte lines from each of a and b, the requests
// spread among the call's loads instead of issued together before it (a burst of them held
// the core's miss buffers while its own rows waited; bench/README.md).
struct PrefetchSpan {
  const char* a = nullptr;
  const char* b = nullptr;
  int64_t lines = 0;
};

struct KernelSet {
  const char* name;
  int lanes;  // D must be a multiple of it
  // For keys j < valid (f32 rows k + j·D, v + j·D) and a query q already multiplied by the
  // softmax scale: s_j = q·k_j; m' = max(m, max_j s_j); acc and l scaled by e^(m - m');
  // p_j = e^(s_j - m'); l += Σ p_j; acc += Σ p_j·v_j (in j order); m = m'. (Prefill chunks.)
  void (*attend_block)(const float* q, const float* k, const float* v, int64_t valid, int64_t D, float* acc, float& m,
                       float& l);
  // For `heads` query vectors (q + h·D, already multiplied by the softmax scale) and keys
  // j < valid of one cache block (rows k + j·stride, v + j·stride elements of `dtype`:
  // F32, BF16, F16, or F8E4M3 read as KvCacheDequantizeFp8(code, k_scale / v_scale)), per
  // head h: s_j = q·k_j; m' = max(m[h], max_j s_j); acc + h·D and l[h] scaled by
  // e^(m[h] - m'); p_j = e^(s_j - m'); l[h] += Σ p_j; acc += Σ p_j·v_j (in j order);
  // m[h] = m'. Each key and value row is read once for up to four heads. (Decode steps,
  // reading the cache in place.) F8E4M3: the kernel may apply the scales to the queries and
  // to the p_j instead of to each element (the same math, rounded in another order).
  // `ahead` (nullable): lines to prefetch into L2 during the call (PrefetchSpan).
  void (*attend_rows)(const float* q, int64_t heads, const void* k, const void* v, int64_t stride, DType dtype,
                      float k_scale, float v_scale, int64_t valid, int64_t D, float* acc, float* m, float* l,
                      const PrefetchSpan* ahead);
  // attend_rows for a BF16 query q (heads rows of D, as stored: not yet multiplied by the
  // softmax scale) over a BF16 or F8E4M3 cache, the scores by BF16 dot products, each
  // multiplied by `scale` (and k_scale) after its sum, and acc kept in the kernel's own
  // order of each head's D floats across calls (acc_to_natural puts it back; m and l are
  // as attend_rows's); nullptr where the set has none. Only where DotBf16Fits: the queue's
  // level has AVX-512 BF16 and the processor VBMI.
  void (*attend_rows_bf16)(const uint16_t* q, float scale, int64_t heads, const void* k, const void* v,
                           int64_t stride, DType dtype, float k_scale, float v_scale, int64_t valid, int64_t D,
                           float* acc, float* m, float* l, const PrefetchSpan* ahead);
  // heads accumulators of D floats that attend_rows_bf16 left over a `cache` dtype cache, into
  // the natural order (nullptr with attend_rows_bf16).
  void (*acc_to_natural)(float* acc, int64_t heads, int64_t D, DType cache);
  // n cache elements of `dtype` -> f32, the same floats attend_rows reads (F8E4M3: the
  // exact value, then one IEEE multiply by scale, as KvCacheDequantizeFp8).
  void (*cache_to_f32)(float* dst, const void* src, DType dtype, int64_t n, float scale);
  // Prefill items (attention_prefill_simd.h): queries i in [q0, q1) (multiples of lanes),
  // stored transposed and already multiplied by the softmax scale (element d of query i at
  // qt[d·ldq + i]), query i at position pos[i] (ascending in i), against keys j < n of one
  // block at positions tok0 + j (f32 rows k + j·D, v + j·D): per query, the keys at or
  // before its position take the update of attend_block (s_j = q·k_j; m' = max; acc and
  // l[i] scaled by e^(m[i] - m'); l[i] += Σ p_j; acc + i·D += Σ p_j·v_j in j order). A
  // query must have had key 0 by its first call with keys it cannot see. k holds at least
  // ⌈n / 32⌉·32 rows: rows past n are read and their scores unused (any bits).
  void (*attend_tile)(const float* qt, int64_t ldq, const float* pos, int64_t q0, int64_t q1, const float* k,
                      const float* v, int64_t n, int64_t tok0, int64_t D, float* acc, float* m, float* l);
  // n elements of `dtype` (F32, BF16, F16) -> KvCacheQuantizeFp8(x, scale) codes, the
  // definition's bytes (KvCacheWrite into an F8E4M3 cache).
  void (*quantize_to_cache)(uint8_t* dst, const void* src, DType dtype, int64_t n, float scale);
};

#if defined(VT_CPU_X86)
const KernelSet* Avx512Kernels();
const KernelSet* Avx2Kernels();
#elif defined(VT_CPU_ARM)
const KernelSet* NeonKernels();  // attention_neon.cpp
#endif

// (Cache block, KV head) pairs of decode steps that attend_rows read in place, and pieces
// of a decode sequence's context whose states were combined, in this process (tests).
int64_t BlocksReadInPlace();
int64_t PiecesCombined();
// Query rows per prefill work item when `heads` query heads share it (a KV head's group).
int64_t PrefillItemRows(int64_t heads);
// (Cache block, prefill item) pairs widened for attend_tile in this process (tests).
int64_t TileBlocksWidened();
// Benchmarks: off makes single-row items widen each block to f32 first, as prefill chunks
// do (default on). Not thread-safe with calls.
void SetReadInPlace(bool on);

// Benchmarks: off runs prefill items of 32 rows through attend_block (or the portable
// loops), each block widened once per item, the path before attend_tile (default on). Not
// thread-safe with calls.
void SetPrefillTiles(bool on);

// For tests: what the calling thread's last PagedAttention ran, written at the end of each
// call: the kernel set of its queue's level and head size ("scalar": the portable loops)
// and how many times each path ran during the call, counted where the kernel is called.
struct LastAttention {
  const char* set = nullptr;  // nullptr before any call on this thread
  int64_t rows_calls = 0;     // attend_rows (decode rows read in place), one per (block, KV head)
  int64_t rows_bf16_calls = 0;  // of those, through attend_rows_bf16
  int64_t tile_calls = 0;     // attend_tile (prefill items), one per (item, block)
  int64_t block_calls = 0;    // attend_block (prefill items without tiles), one per (block, query vector)
  int64_t portable_blocks = 0;  // (item, block) pairs through the portable loops
};
LastAttention LastAttentionOnThisThread();

// The set for a queue's effective ISA and head size, or nullptr: use the portable loops.
// (Defined in attention.cpp, compiled with the build's ISA macros; tests call it too.)
const KernelSet* ForIsa(CpuIsa isa, int64_t D);

// Whether a decode of a `query` dtype query over a `cache` dtype cache on a queue of level
// `isa` runs ks->attend_rows_bf16 (a BF16 query; a BF16 or F8E4M3 cache; D a multiple of 64
// up to 256; AVX-512 BF16 and VBMI).
bool DotBf16Fits(const KernelSet* ks, CpuIsa isa, DType query, DType cache, int64_t D);

}  // namespace vt::cpu::attention
