// The vector kernel of CPU PagedAttention (attention.cpp): one query row against the keys
// of one cache block with the online-softmax update, one set per ISA (attention_avx512.cpp,
// attention_avx2.cpp, attention_neon.cpp). Only plain data and function pointers cross
// between those files and the portable code.
#pragma once

#include <cstdint>

#include "vt/queue.h"

namespace vt::cpu::attention {

struct KernelSet {
  const char* name;
  int lanes;  // D must be a multiple of it
  // For keys j < valid (f32 rows k + j·D, v + j·D) and a query q already multiplied by the
  // softmax scale: s_j = q·k_j; m' = max(m, max_j s_j); acc and l scaled by e^(m - m');
  // p_j = e^(s_j - m'); l += Σ p_j; acc += Σ p_j·v_j (in j order); m = m'.
  void (*attend_block)(const float* q, const float* k, const float* v, int64_t valid, int64_t D, float* acc, float& m,
                       float& l);
  // n F8E4M3 cache bytes -> dst[i] = KvCacheDequantizeFp8(src[i], scale), the same floats
  // (an exact decode, then one IEEE multiply).
  void (*fp8_to_f32)(float* dst, const uint8_t* src, int64_t n, float scale);
};

#if defined(VT_CPU_X86)
const KernelSet* Avx512Kernels();
const KernelSet* Avx2Kernels();
#elif defined(VT_CPU_ARM)
const KernelSet* NeonKernels();  // attention_neon.cpp
#endif

// The set for a queue's effective ISA and head size, or nullptr: use the portable loops.
// (Defined in attention.cpp, compiled with the build's ISA macros; tests call it too.)
const KernelSet* ForIsa(CpuIsa isa, int64_t D);

}  // namespace vt::cpu::attention
