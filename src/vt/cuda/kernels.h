// Registration functions of the CUDA op families (one file pair per family) and the
// element access helpers their kernels share.
#pragma once

#include <cstdint>

#include "vt/dtype.h"
#include "vt/error.h"

namespace vt::cuda {

void RegisterQuantKernels();       // quant.cu
void RegisterNormKernels();        // norm.cu
void RegisterActivationKernels();  // activation.cu
void RegisterCastKernels();        // cast.cu
void RegisterFusedKernels();       // fused.cpp
void RegisterMatmulKernels();      // matmul.cpp (cuBLASLt) + matmul_fp8*.cu
void RegisterEmbeddingKernels();   // embedding.cu
void RegisterRopeKernels();        // rope.cu
void RegisterAttentionKernels();   // attention.cu: KvCacheWrite, PagedAttention
void RegisterQkNormRopeKernels();  // qk_norm_rope.cu: QkNormRopeCacheWrite
void RegisterSamplingKernels();    // sampling.cu
// Calls of SampleTokens that took the thread-block cluster kernel (sample_tokens_cluster.cu;
// all queues) rather than the one-CTA-per-row kernel.
int64_t SampleTokensClusterLaunches();
// Rows of those calls that top_k left with few candidates, finished in one CTA (device
// counter, read with a synchronous copy: for tests).
int64_t SampleTokensGatheredRows();

// How many PagedAttention calls took the tensor-core prefill path (attention_prefill.cu;
// all queues): lets tests prove which kernel ran.
int64_t PrefillMmaLaunches();
// How many RMSNorm calls took the 16-byte vector row kernel (norm.cu), and how many SiLU-mul
// and FP8 quantization calls their vector kernels (all queues).
int64_t RmsNormVecLaunches();
int64_t RmsNormWideVecLaunches();  // those of them with more than 256 threads (rows over 2048 wide)
int64_t SiluMulVecLaunches();
int64_t QuantFp8VecLaunches();  // QuantFp8Static's vector kernel (quant.cu)
// How many PagedAttention calls took a decode kernel (attention_decode.cu; all queues), and
// how many of those the tensor-core one (attention_decode_mma.cu).
int64_t DecodeAttentionLaunches();
int64_t DecodeMmaLaunches();
// Of those, how many read the context before griddepcontrol.wait (AttnArgs::early_context:
// right after the prelude that wrote the cache; VT_CUDA_ATTN_EARLY_READS=0 turns it off).
int64_t DecodeMmaLaunchesReadingEarly();
// Of the tensor-core ones, how many read an F8E4M3 cache (VT_CUDA_ATTN_DECODE_MMA_FP8=0 keeps
// those caches on the CUDA-core kernel).
int64_t DecodeMmaFp8Launches();
// Of those, the launches with the query heads as the N columns of the products (F8E4M3
// caches; VT_CUDA_ATTN_DECODE_HEADS_N=1 for every cache, =0 for none).
int64_t DecodeMmaHeadsNLaunches();
// Of the tensor-core ones, the launches of its wide form (DecodeMmaWide in attention.h).
int64_t DecodeMmaWideLaunches();
// How many decode launches with split contexts combined the splits in the launch itself
// (attention_split.cuh) rather than by a combine kernel after it (all queues).
int64_t DecodeSplitsCombinedInLaunch();
// Of those, how many let the CTAs of empty splits return at once (attention_split.cuh;
// VT_CUDA_ATTN_SKIP_EMPTY_SPLITS=0 turns it off).
int64_t DecodeLaunchesSkippingEmptySplits();
// Of those, how many served short contexts by one split (AttnArgs::one_split_tokens > 0,
// VT_CUDA_ATTN_ONE_SPLIT_TOKENS).
int64_t DecodeLaunchesWithOneSplitContexts();
// How many launches read or wrote an F8E4M3 KV cache (attention.cu, qk_norm_rope.cu; all
// queues): the attention kernel, the cache-write kernel and the fused prelude.
struct KvFp8Launches {
  int64_t attention = 0, cache_write = 0, qk_norm_rope = 0;
};
KvFp8Launches KvCacheFp8Launches();
void CountQkNormRopeFp8Launch();
void RegisterMoeKernels();         // moe.cu: MoeTopKRouting, MoeExperts, MoeExpertsFp8(PerToken)
// How many FP8 expert calls took the few-token down GEMV (moe_gemv.cuh; all queues).
int64_t MoeGemvLaunches();
// MoeTopKRouting launches that kept each token's row in registers (up to 512 experts and 32
// picks; VT_CUDA_MOE_REG_ROUTING=0 sends every call through shared memory).
int64_t MoeRoutingRegisterLaunches();
// Calls of MoeExpertsFp8 that ran the tensor-core tiles of moe_tiled.cu (all queues).
int64_t MoeTiledLaunches();
void RegisterMoeGroupScaledKernels();  // moe_group_scaled.cu: MoeExpertsFp8GroupScaled
// Calls of MoeExpertsFp8GroupScaled that ran its CUDA kernels (all queues).
int64_t MoeGroupScaledLaunches();
// Of those, the calls whose kernels took 16-byte vectors of weights.
int64_t MoeGroupScaledVectorLaunches();
void RegisterGdnKernels();         // gdn.cu: CausalConv1d, GatedDeltaRule
// Calls of CausalConv1d that took the token-parallel kernels (a step with T > S), of
// GatedDeltaRule that took the column-split kernel (dk = 128), and of those the ones that
// also launched the chunked kernel for their long sequences (gdn_chunked.cu); all queues.
int64_t CausalConv1dTokenLaunches();
int64_t GatedDeltaRuleColumnLaunches();
int64_t GatedDeltaRuleChunkedLaunches();
// fused_group_quant.cu: RmsNorm / RmsNormGated / SiluMul -> QuantFp8PerTokenGroup.
void RegisterFusedGroupQuantKernels();
// Calls of those three ops that ran their CUDA kernel (all queues); of them the ones that
// took the 16-byte vector kernel (16-bit operands, aligned rows of whole vectors), and the
// ones that took the scalar kernel with the row staged in shared memory (up to 16384 wide).
struct FusedGroupQuantCounts {
  int64_t launches = 0, staged = 0, vec = 0;
};
FusedGroupQuantCounts FusedGroupQuantLaunches();

// Element storage tags for templated kernels: the value type in memory and exact
// conversions to and from f32 (the same functions as the CPU backend's).
struct F32 {
  using T = float;
  static VT_HD float Load(T v) { return v; }
  static VT_HD T Store(float v) { return v; }
};
struct Bf16 {
  using T = uint16_t;
  static VT_HD float Load(T v) { return Bf16ToFloat(v); }
  static VT_HD T Store(float v) { return FloatToBf16(v); }
};
struct F16 {
  using T = uint16_t;
  static VT_HD float Load(T v) { return F16ToFloat(v); }
  static VT_HD T Store(float v) { return FloatToF16(v); }
};
struct Fp8 {
  using T = uint8_t;
  static VT_HD float Load(T v) { return Fp8E4M3ToFloat(v); }
};

// v rounded to the storage type of Tag and widened back (identity for F32).
template <typename Tag>
VT_HD float RoundTo(float v) {
  return Tag::Load(Tag::Store(v));
}

// Calls fn(Tag{}) for a float dtype among F32/BF16/F16.
template <typename Fn>
void DispatchFloat(DType d, const char* op, Fn&& fn) {
  switch (d) {
    case DType::kF32: fn(F32{}); return;
    case DType::kBF16: fn(Bf16{}); return;
    case DType::kF16: fn(F16{}); return;
    default: throw Error(StrCat("internal: ", op, " on cuda got dtype ", DTypeName(d)));
  }
}

}  // namespace vt::cuda
