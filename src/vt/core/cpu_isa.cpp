#include "vt/queue.h"

#if defined(__x86_64__) || defined(_M_X64)
#include <cpuid.h>
#if defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif
#endif

namespace vt {

const char* CpuIsaName(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::kScalar: return "scalar";
    case CpuIsa::kAvx2: return "avx2";
    case CpuIsa::kAvx512: return "avx512";
    case CpuIsa::kAvx512Bf16: return "avx512bf16";
    case CpuIsa::kAmx: return "amx";
    case CpuIsa::kBest: return "best";
  }
  return "?";
}

#if defined(__x86_64__) || defined(_M_X64)
namespace {

// AMX-TILE and AMX-BF16 in CPUID (leaf 7, EDX bits 24 and 22), and Linux's permission to
// use the tile data state, which a process must request before its first tile
// instruction (arch_prctl ARCH_REQ_XCOMP_PERM for XFEATURE_XTILEDATA).
bool AmxUsable() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx) == 0) return false;
  if ((edx & (1u << 24)) == 0 || (edx & (1u << 22)) == 0) return false;
#if defined(__linux__)
  constexpr long kArchReqXcompPerm = 0x1023;
  constexpr long kXfeatureXtiledata = 18;
  return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
#else
  return false;
#endif
}

}  // namespace
#endif

CpuIsa DetectCpuIsa() {
#if defined(__x86_64__) || defined(_M_X64)
  static const CpuIsa detected = [] {
    __builtin_cpu_init();
    const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                      __builtin_cpu_supports("f16c");
    const bool avx512 = avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                        __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
    const bool bf16 = avx512 && __builtin_cpu_supports("avx512bf16") && __builtin_cpu_supports("avx512vnni");
    // The AMX set decodes fp8 with AVX512-VBMI byte permutes (every AMX processor has them).
    if (bf16 && __builtin_cpu_supports("avx512vbmi") && AmxUsable()) return CpuIsa::kAmx;
    if (bf16) return CpuIsa::kAvx512Bf16;
    if (avx512) return CpuIsa::kAvx512;
    if (avx2) return CpuIsa::kAvx2;
    return CpuIsa::kScalar;
  }();
  return detected;
#else
  return CpuIsa::kScalar;
#endif
}

}  // namespace vt
