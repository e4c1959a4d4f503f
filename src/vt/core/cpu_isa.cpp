#include "vt/queue.h"

#if defined(__x86_64__) || defined(_M_X64)
#include <cpuid.h>
#if defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif
#elif defined(__aarch64__) && defined(__linux__)
#include <sys/auxv.h>
#endif

namespace vt {

const char* CpuIsaName(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::kScalar: return "scalar";
    case CpuIsa::kAvx2: return "avx2";
    case CpuIsa::kAvx512: return "avx512";
    case CpuIsa::kAvx512Bf16: return "avx512bf16";
    case CpuIsa::kAmx: return "amx";
    case CpuIsa::kNeon: return "neon";
    case CpuIsa::kNeonBf16: return "neonbf16";
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
#elif defined(__aarch64__) && defined(__linux__)
  // The bits CpuFeatures names (Linux arm64 ABI, arch/arm64/include/uapi/asm/hwcap.h).
  static const CpuIsa detected = [] {
    const unsigned long hwcap = getauxval(AT_HWCAP), hwcap2 = getauxval(AT_HWCAP2);
    const bool asimd = (hwcap & (1ul << 1)) != 0;  // HWCAP_ASIMD
    const bool bf16 = (hwcap2 & (1ul << 14)) != 0;  // HWCAP2_BF16
    if (asimd && bf16) return CpuIsa::kNeonBf16;
    if (asimd) return CpuIsa::kNeon;
    return CpuIsa::kScalar;
  }();
  return detected;
#else
  return CpuIsa::kScalar;
#endif
}

std::vector<CpuIsa> CpuIsaLevels() {
#if defined(__x86_64__) || defined(_M_X64)
  return {CpuIsa::kScalar, CpuIsa::kAvx2, CpuIsa::kAvx512, CpuIsa::kAvx512Bf16, CpuIsa::kAmx};
#elif defined(__aarch64__) && defined(__linux__)
  return {CpuIsa::kScalar, CpuIsa::kNeon, CpuIsa::kNeonBf16};
#else
  return {CpuIsa::kScalar};
#endif
}

std::vector<std::string> CpuFeatures() {
  std::vector<std::string> out;
  auto add = [&out](bool has, const char* name) {
    if (has) out.emplace_back(name);
  };
#if defined(__x86_64__) || defined(_M_X64)
  __builtin_cpu_init();
  add(__builtin_cpu_supports("avx2"), "avx2");
  add(__builtin_cpu_supports("fma"), "fma");
  add(__builtin_cpu_supports("f16c"), "f16c");
  add(__builtin_cpu_supports("avx512f"), "avx512f");
  add(__builtin_cpu_supports("avx512bw"), "avx512bw");
  add(__builtin_cpu_supports("avx512vl"), "avx512vl");
  add(__builtin_cpu_supports("avx512dq"), "avx512dq");
  add(__builtin_cpu_supports("avx512bf16"), "avx512bf16");
  add(__builtin_cpu_supports("avx512vnni"), "avx512vnni");
  add(__builtin_cpu_supports("avx512vbmi"), "avx512vbmi");
  add(DetectCpuIsa() == CpuIsa::kAmx, "amx");
#elif defined(__aarch64__) && defined(__linux__)
  // Bits of the Linux arm64 ABI (arch/arm64/include/uapi/asm/hwcap.h); spelled out so that
  // older kernel headers do not matter.
  const unsigned long hwcap = getauxval(AT_HWCAP);
  const unsigned long hwcap2 = getauxval(AT_HWCAP2);
  add(hwcap & (1ul << 1), "asimd");     // HWCAP_ASIMD: NEON
  add(hwcap & (1ul << 10), "asimdhp");  // HWCAP_ASIMDHP: NEON fp16 arithmetic
  add(hwcap & (1ul << 20), "asimddp");  // HWCAP_ASIMDDP: SDOT/UDOT
  add(hwcap & (1ul << 9), "fphp");      // HWCAP_FPHP: scalar fp16 arithmetic
  add(hwcap2 & (1ul << 14), "bf16");    // HWCAP2_BF16: BFDOT/BFMMLA/BFCVT
  add(hwcap2 & (1ul << 13), "i8mm");    // HWCAP2_I8MM: SMMLA/USDOT
  add(hwcap & (1ul << 22), "sve");      // HWCAP_SVE
  add(hwcap2 & (1ul << 1), "sve2");     // HWCAP2_SVE2
#endif
  (void)add;
  return out;
}

}  // namespace vt
