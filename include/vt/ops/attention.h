// Attention over a paged KV cache (vLLM's layout).
//
// The cache of one layer is two tensors [num_blocks, block_size, Hk, D]: token slot
// s = block * block_size + offset holds its key at key_cache[block, offset, :, :].
// A sequence's tokens live in the blocks its row of block_tables lists, in order: token j
// of the sequence is in block block_tables[s, j / block_size] at offset j % block_size.
//
// FP8 cache (vLLM's --kv-cache-dtype fp8): the caches may be F8E4M3 while keys, values,
// queries and the output stay F32/BF16/F16. Each layer has two scales, k_scale and v_scale
// (finite, > 0; exactly 1 for a cache of another dtype). A stored byte is
// KvCacheQuantizeFp8(x, scale) and reads back as KvCacheDequantizeFp8(byte, scale). The
// scales are float arguments: a model's are fixed at load, so a recorded CUDA graph that
// captured them by value replays correctly.
#pragma once

#include "vt/ops/quant.h"
#include "vt/queue.h"
#include "vt/registry.h"
#include "vt/tensor.h"

namespace vt {

// The FP8 KV cache's quantizer, the one definition every backend runs: x / scale (an IEEE
// division, as vLLM's CUDA reshape_and_cache computes it; QuantFp8Static multiplies by a
// reciprocal instead), clamped to [-448, 448] (+-Inf saturate), RNE to e4m3fn; -0 stays
// 0x80; NaN stays NaN with its sign (0x7F / 0xFF). That is Fp8QuantizeDiv.
VT_HD uint8_t KvCacheQuantizeFp8(float x, float scale) { return Fp8QuantizeDiv(x, scale); }
// A cached byte read back: float(e4m3) * scale, one f32 multiply.
VT_HD float KvCacheDequantizeFp8(uint8_t b, float scale) { return Fp8E4M3ToFloat(b) * scale; }

// Stores key[t] and value[t] into slot slot_mapping[t] of the caches (a negative slot
// skips the token, as vLLM's padding does). key, value: [T, Hk*D]; key_cache, value_cache:
// [num_blocks, block_size, Hk, D] of the same dtype (F32/BF16/F16: the keys' dtype, copied;
// F8E4M3: keys and values of any float dtype, quantized with k_scale / v_scale);
// slot_mapping: [T] I64. A slot >= num_blocks * block_size is a vt::Error naming it
// (checked by the kernel).
void KvCacheWrite(const Queue& q, const Tensor& key, const Tensor& value, const Tensor& key_cache,
                  const Tensor& value_cache, const Tensor& slot_mapping, float k_scale = 1.0f,
                  float v_scale = 1.0f);

// The attention prelude of a decoder layer in one op: per-head RMSNorm of the queries and
// keys (Qwen3's q_norm/k_norm; skipped where the weight is null), neox RoPE at each token's
// position, and the keys and values stored into their cache slots. Its definition is the
// sequence
//   RmsNorm(query_out <- query, q_norm) ; RmsNorm(k' <- key, k_norm) ;
//   RotaryEmbedding(positions, query_out, &k', cos_sin_cache) ;
//   KvCacheWrite(k', value, ..., k_scale, v_scale)
// over [T*H, D] rows (k' in the keys' dtype), and a backend must give that sequence's bytes
// on its own kernels (with an F8E4M3 cache: k' rounded to the keys' dtype, then quantized).
// query: [T, Hq*D]; key, value: [T, Hk*D]; query_out: [T, Hq*D]; all of one float dtype, the
// caches' or (F8E4M3 caches) any; q_norm, k_norm: [D] (F32/BF16/F16) or null; cos_sin_cache:
// [max_pos, D] F32; positions: [T] I32/I64; slot_mapping: [T] I64 (negative: not written).
void QkNormRopeCacheWrite(const Queue& q, const Tensor& query_out, const Tensor& query, const Tensor& key,
                          const Tensor& value, const Tensor* q_norm, const Tensor* k_norm, float eps,
                          const Tensor& positions, const Tensor& cos_sin_cache, const Tensor& key_cache,
                          const Tensor& value_cache, const Tensor& slot_mapping, float k_scale = 1.0f,
                          float v_scale = 1.0f);

// That definition run op by op on q's queue (a temporary holds k'), with no checks of its
// own beyond the ops'. The CPU kernel of QkNormRopeCacheWrite is this.
void QkNormRopeCacheWriteComposite(const Queue& q, const Tensor& query_out, const Tensor& query, const Tensor& key,
                                   const Tensor& value, const Tensor* q_norm, const Tensor* k_norm, float eps,
                                   const Tensor& positions, const Tensor& cos_sin_cache, const Tensor& key_cache,
                                   const Tensor& value_cache, const Tensor& slot_mapping, float k_scale = 1.0f,
                                   float v_scale = 1.0f);

// Causal attention of S sequences' new tokens over their cached context.
// Sequence s owns query rows [query_start_loc[s], query_start_loc[s+1]) (n_s rows) and has
// seq_lens[s] tokens in the cache, its new tokens included (written by KvCacheWrite
// before this call); query row i of s sits at position seq_lens[s] - n_s + i and attends to
// the cached tokens 0..that position. Query head h reads KV head h / (Hq / Hk) (GQA/MQA).
//   out[t, h*D:(h+1)*D] = Σ_j softmax_j(scale * q·k_j) v_j
// Scores, softmax (running max) and the weighted sum are f32; the result is rounded once
// to out's dtype. Prefill (many rows per sequence) and decode (one) are the same call.
// With an F8E4M3 cache, k_j and v_j are KvCacheDequantizeFp8(byte, k_scale / v_scale).
// out, query: [T, Hq*D] (the cache's dtype; with an F8E4M3 cache any float dtype, the two
// alike); block_tables: [S, max_blocks] I32; seq_lens: [S] I32; query_start_loc: [S+1] I32;
// scale finite (usually 1/sqrt(D)).
// Inconsistent metadata (n_s > seq_lens[s], a context longer than its block-table row,
// a block id out of range) is a vt::Error naming the sequence and values.
void PagedAttention(const Queue& q, const Tensor& out, const Tensor& query, const Tensor& key_cache,
                    const Tensor& value_cache, const Tensor& block_tables, const Tensor& seq_lens,
                    const Tensor& query_start_loc, float scale, float k_scale = 1.0f, float v_scale = 1.0f);

// PagedAttention and the static FP8 quantization of its output for the next linear (a
// static-FP8 o_proj), as one op. Its definition, and its bytes on every backend:
//   PagedAttention(out, query, ...)
//   QuantFp8Static(out8, out, input_scale)
// out: [T, Hq*D] as PagedAttention's; out8: [T, Hq*D] F8E4M3; input_scale finite and > 0.
// A backend writes each output element and its code together where its kernels can (the
// CUDA decode kernels' epilogues), saving the quantization's own pass.
void PagedAttentionQuantFp8(const Queue& q, const Tensor& out, const Tensor& out8, const Tensor& query,
                            const Tensor& key_cache, const Tensor& value_cache, const Tensor& block_tables,
                            const Tensor& seq_lens, const Tensor& query_start_loc, float scale, float input_scale,
                            float k_scale = 1.0f, float v_scale = 1.0f);

template <>
struct OpTraits<OpId::kKvCacheWrite> {
  using Fn = void(const Queue& q, const Tensor& key, const Tensor& value, const Tensor& key_cache,
                  const Tensor& value_cache, const Tensor& slot_mapping, float k_scale, float v_scale);
};
template <>
struct OpTraits<OpId::kQkNormRopeCacheWrite> {
  using Fn = void(const Queue& q, const Tensor& query_out, const Tensor& query, const Tensor& key,
                  const Tensor& value, const Tensor* q_norm, const Tensor* k_norm, float eps,
                  const Tensor& positions, const Tensor& cos_sin_cache, const Tensor& key_cache,
                  const Tensor& value_cache, const Tensor& slot_mapping, float k_scale, float v_scale);
};
template <>
struct OpTraits<OpId::kPagedAttention> {
  using Fn = void(const Queue& q, const Tensor& out, const Tensor& query, const Tensor& key_cache,
                  const Tensor& value_cache, const Tensor& block_tables, const Tensor& seq_lens,
                  const Tensor& query_start_loc, float scale, float k_scale, float v_scale);
};

template <>
struct OpTraits<OpId::kPagedAttentionQuantFp8> {
  using Fn = void(const Queue& q, const Tensor& out, const Tensor& out8, const Tensor& query, const Tensor& key_cache,
                  const Tensor& value_cache, const Tensor& block_tables, const Tensor& seq_lens,
                  const Tensor& query_start_loc, float scale, float input_scale, float k_scale, float v_scale);
};

}  // namespace vt
