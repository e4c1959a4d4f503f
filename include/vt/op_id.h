// Op ids. An id names the math, never an implementation: a backend registers its best
// kernel for an op and picks variants inside itself.
#pragma once

#include <string_view>

namespace vt {

// X(Id, "Name"): every op of vt. The function type of each op is declared next to its
// public entry point in include/vt/ops/<family>.h as a specialisation of OpTraits.
#define VT_OP_LIST(X)                          \
  X(kQuantFp8Static, "QuantFp8Static")         \
  X(kQuantFp8PerTokenGroup, "QuantFp8PerTokenGroup") \
  X(kMatmulFp8, "MatmulFp8")                   \
  X(kMatmulFp8GroupScaled, "MatmulFp8GroupScaled") \
  X(kMatmul, "Matmul")                         \
  X(kRmsNorm, "RmsNorm")                       \
  X(kRmsNormGated, "RmsNormGated")             \
  X(kRmsNormZeroCentred, "RmsNormZeroCentred") \
  X(kSiluMul, "SiluMul")                       \
  X(kSigmoidGatedAdd, "SigmoidGatedAdd")       \
  X(kCast, "Cast")                             \
  X(kRmsNormQuantFp8, "RmsNormQuantFp8")       \
  X(kRmsNormZeroCentredQuantFp8, "RmsNormZeroCentredQuantFp8") \
  X(kRmsNormGatedQuantFp8, "RmsNormGatedQuantFp8") \
  X(kSiluMulQuantFp8, "SiluMulQuantFp8")       \
  X(kMatmulFp8SiluMulQuantFp8, "MatmulFp8SiluMulQuantFp8") \
  X(kRmsNormQuantFp8PerTokenGroup, "RmsNormQuantFp8PerTokenGroup") \
  X(kRmsNormZeroCentredQuantFp8PerTokenGroup, "RmsNormZeroCentredQuantFp8PerTokenGroup") \
  X(kRmsNormGatedQuantFp8PerTokenGroup, "RmsNormGatedQuantFp8PerTokenGroup") \
  X(kSiluMulQuantFp8PerTokenGroup, "SiluMulQuantFp8PerTokenGroup") \
  X(kEmbedding, "Embedding")                   \
  X(kRotaryEmbedding, "RotaryEmbedding")       \
  X(kKvCacheWrite, "KvCacheWrite")             \
  X(kQkNormRopeCacheWrite, "QkNormRopeCacheWrite") \
  X(kPagedAttention, "PagedAttention")         \
  X(kPagedAttentionQuantFp8, "PagedAttentionQuantFp8") \
  X(kTopKLogprobs, "TopKLogprobs")             \
  X(kLogitsMask, "LogitsMask")                 \
  X(kLogitsAddSparse, "LogitsAddSparse")       \
  X(kLogitsPenalties, "LogitsPenalties")       \
  X(kSampleTokens, "SampleTokens")             \
  X(kMoeTopKRouting, "MoeTopKRouting")         \
  X(kMoeExperts, "MoeExperts")                 \
  X(kMoeExpertsFp8, "MoeExpertsFp8")         \
  X(kMoeExpertsFp8PerToken, "MoeExpertsFp8PerToken") \
  X(kMoeExpertsFp8GroupScaled, "MoeExpertsFp8GroupScaled") \
  X(kCausalConv1d, "CausalConv1d")           \
  X(kGatedDeltaRule, "GatedDeltaRule")

enum class OpId : int {
#define VT_OP_ENUM(id, name) id,
  VT_OP_LIST(VT_OP_ENUM)
#undef VT_OP_ENUM
      kCount
};
inline constexpr int kNumOps = static_cast<int>(OpId::kCount);

inline constexpr std::string_view kOpNames[] = {
#define VT_OP_NAME(id, name) name,
    VT_OP_LIST(VT_OP_NAME)
#undef VT_OP_NAME
};
static_assert(std::size(kOpNames) == kNumOps, "every OpId needs a name");

constexpr std::string_view OpName(OpId id) { return kOpNames[static_cast<int>(id)]; }

}  // namespace vt
