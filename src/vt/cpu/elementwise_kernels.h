// The vector kernels of the elementwise CPU ops (QuantFp8Static, QuantFp8PerTokenGroup, Cast, RmsNorm,
// RmsNormGated, SiluMul, RotaryEmbedding and the fused recipes), one set per ISA.
//
// The sets are compiled in files of their own (elementwise_avx512.cpp,
// elementwise_avx2.cpp, elementwise_neon.cpp); only plain data and function pointers cross between them and the
// portable code, so no inline function is shared between code built for different ISAs.
// Every kernel is byte-identical to the scalar reference in reference.cpp.
#pragma once

#include <cstdint>

#include "vt/dtype.h"
#include "vt/queue.h"

namespace vt::cpu::elementwise {

// Rows of a norm or activation, on raw contiguous host memory. Row r of x starts at
// r * width (SiluMul: r * 2 * width, [gate | up]); weight has `width` elements.
struct RowArgs {
  const void* x = nullptr;
  DType x_dtype = DType::kF32;
  const void* weight = nullptr;
  DType weight_dtype = DType::kF32;
  const void* gate = nullptr;
  DType gate_dtype = DType::kF32;
  void* residual = nullptr;  // x_dtype; x + residual is written back and normalised
  // The op's output. For a fused recipe (fp8_out set) the optional BF16 side output.
  void* out = nullptr;
  DType out_dtype = DType::kF32;
  // Set for a fused recipe: the result is rounded to BF16 (the recipe's intermediate) and
  // quantized with input_scale into fp8_out.
  uint8_t* fp8_out = nullptr;
  // Set (with fp8_out) for a per-token-group recipe: the BF16 row is quantized as
  // QuantFp8PerTokenGroup does, per group_size columns with the floors, into fp8_out and
  // fp8_scales [rows, ceil(width / group_size)], instead of with input_scale.
  float* fp8_scales = nullptr;
  int64_t group_size = 0;
  float amax_floor = 0.0f;
  float scale_floor = 0.0f;
  int64_t width = 0;
  float eps = 0.0f;
  float input_scale = 1.0f;
  // rms_norm only: RmsNormZeroCentred's element (x_hat * (1 + w) in f32, x_hat not rounded).
  bool zero_centred = false;
};

struct KernelSet {
  const char* name;
  // out[i] for i in [begin, end); x: F32/BF16/F16.
  void (*quant_fp8)(const void* x, DType x_dtype, uint8_t* out, int64_t begin, int64_t end, float input_scale);
  // Elements [begin, end); x: F32/BF16/F16/F8E4M3, out: F32/BF16/F16.
  void (*cast)(const void* x, DType x_dtype, void* out, DType out_dtype, int64_t begin, int64_t end);
  void (*rms_norm)(const RowArgs& a, int64_t row0, int64_t row1);
  void (*rms_norm_gated)(const RowArgs& a, int64_t row0, int64_t row1);
  void (*silu_mul)(const RowArgs& a, int64_t row0, int64_t row1);
  // RotaryEmbedding of one token's row x of `heads` heads of D elements (F32/BF16/F16), in
  // place: elements i and D/2 + i of each head rotated by cos c[i] and sin s[i], i < D/2.
  void (*rope_row)(void* x, DType x_dtype, int64_t heads, int64_t D, const float* c, const float* s);
  // QuantFp8PerTokenGroup of rows [row0, row1) of x [*, K] (F32/BF16/F16) into out [*, K] and
  // scales [*, G], groups of group_size columns, with the op's floors.
  void (*quant_fp8_group)(const void* x, DType x_dtype, uint8_t* out, float* scales, int64_t K, int64_t G,
                          int64_t group_size, float amax_floor, float scale_floor, int64_t row0, int64_t row1);
};

#if defined(VT_CPU_X86)
const KernelSet* Avx512Kernels();
const KernelSet* Avx2Kernels();
#endif
#if defined(VT_CPU_ARM)
const KernelSet* NeonKernels();
#endif

// Records the set a dispatch chose (nullptr: the scalar reference) for
// LastElementwiseSetOnThisThread; defined in the portable code (cast.cpp).
const KernelSet* Chosen(const KernelSet* set);

// The vector kernels for a queue's effective ISA, or nullptr: use the scalar reference.
inline const KernelSet* ForIsa(CpuIsa isa) {
#if defined(VT_CPU_X86)
  if (isa >= CpuIsa::kAvx512) return Chosen(Avx512Kernels());
  if (isa >= CpuIsa::kAvx2) return Chosen(Avx2Kernels());
#elif defined(VT_CPU_ARM)
  if (isa >= CpuIsa::kNeon) return Chosen(NeonKernels());
#else
  (void)isa;
#endif
  return Chosen(nullptr);
}

// For tests: the name of the set the calling thread's last elementwise CPU op (QuantFp8Static,
// Cast, RmsNorm, RmsNormGated, SiluMul, RotaryEmbedding, the fused recipes) chose, "scalar"
// for the scalar reference; nullptr before any.
const char* LastElementwiseSetOnThisThread();

}  // namespace vt::cpu::elementwise
