#include "vt/queue.h"

namespace vt {

const char* CpuIsaName(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::kScalar: return "scalar";
    case CpuIsa::kAvx2: return "avx2";
    case CpuIsa::kAvx512: return "avx512";
    case CpuIsa::kAvx512Bf16: return "avx512bf16";
    case CpuIsa::kBest: return "best";
  }
  return "?";
}

CpuIsa DetectCpuIsa() {
#if defined(__x86_64__) || defined(_M_X64)
  static const CpuIsa detected = [] {
    __builtin_cpu_init();
    const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                      __builtin_cpu_supports("f16c");
    const bool avx512 = avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                        __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
    const bool bf16 = avx512 && __builtin_cpu_supports("avx512bf16") && __builtin_cpu_supports("avx512vnni");
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
