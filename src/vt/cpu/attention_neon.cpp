// The attention vector kernel at NEON width (see attention_simd.h); the kNeonBf16 level runs
// it too.
#include "vt/cpu/attention_prefill_simd.h"
#include "vt/cpu/attention_simd.h"

namespace vt::cpu::attention {

const KernelSet* NeonKernels() {
  static constexpr KernelSet kSet = {"neon", neon::kLanes, &neon::AttendBlock, &neon::AttendRows, nullptr, nullptr,
                                     &neon::CacheToF32, &neon::AttendTile,
                                     &neon::QuantizeToCache};
  return &kSet;
}

}  // namespace vt::cpu::attention
