// The attention vector kernel at avx512 width (see attention_simd.h), and its BF16
// dot-product scores for the levels with AVX-512 BF16 (attention_dot_bf16.h).
#include "vt/cpu/attention_dot_bf16.h"
#include "vt/cpu/attention_prefill_simd.h"
#include "vt/cpu/attention_simd.h"

namespace vt::cpu::attention {

const KernelSet* Avx512Kernels() {
  static constexpr KernelSet kSet = {"avx512", avx512::kLanes, &avx512::AttendBlock, &avx512::AttendRows,
                                     &avx512::AttendRowsDotBf16, &avx512::AccToNatural,
                                     &avx512::CacheToF32, &avx512::AttendTile,
                                     &avx512::QuantizeToCache};
  return &kSet;
}

}  // namespace vt::cpu::attention
