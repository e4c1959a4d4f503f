// CUDA QkNormRopeCacheWrite: one warp per (token, head) of the queries and keys, so a decode
// step's q/k norms, RoPE and cache write are one launch instead of five. The warp loads its
// head into shared memory, sums the squares as RmsNormKernel does (lane j: the fma chain of
// elements j, j+32, ...; then WarpCanonicalSum), rounds the normed values as RmsNorm stores
// them, rotates the pairs with RopeKernel's unfused expressions and stores the result to
// query_out or the key's cache slot; a key's warp also copies the value head. Every output
// byte therefore equals the op-by-op definition's on this backend. Bad positions and slots
// are recorded as RotaryEmbedding and KvCacheWrite record them (device_error.h).
// With an F8E4M3 cache (kFp8) a key is first rounded to the keys' dtype, as the definition's
// temporary k' holds it, then quantized with KvCacheQuantizeFp8, as KvCacheWrite does; the
// value is quantized from its stored value.
#include <type_traits>

#include "vt/cuda/device_error.cuh"
#include "vt/cuda/device_util.cuh"
#include "vt/cuda/kernels.h"
#include "vt/ops/attention.h"

namespace vt::cuda {

namespace {

constexpr int kWarps = 4;     // (token, head) units per CTA
constexpr int kMaxD = 256;    // head sizes up to this (staged in shared memory)

template <typename Tag, typename P, bool kFp8>
__global__ void __launch_bounds__(kWarps * 32)
    QkNormRopeCacheKernel(typename Tag::T* qout, const typename Tag::T* query, const typename Tag::T* key,
                          const typename Tag::T* value, const void* qw, DType qwd, const void* kw, DType kwd,
                          float eps, const P* positions, const float* cache, int64_t max_pos, void* kc_raw,
                          void* vc_raw, const int64_t* slots, int64_t num_slots, int64_t T, int64_t Hq, int64_t Hk,
                          int64_t D, float k_scale, float v_scale, IndexErrorRecord* err) {
  PdlWait();
  using E = typename Tag::T;
  using C = std::conditional_t<kFp8, uint8_t, E>;  // a cache element
  C* kc = static_cast<C*>(kc_raw);
  C* vc = static_cast<C*>(vc_raw);
  __shared__ float staged[kWarps][kMaxD];
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const int64_t heads = Hq + Hk;
  const int64_t u = static_cast<int64_t>(blockIdx.x) * kWarps + warp;
  if (u >= T * heads) return;  // uniform across the warp
  const int64_t t = u / heads, h = u - t * heads;
  const bool is_query = h < Hq;
  const int64_t kh = h - Hq;
  // Every load that does not depend on another goes out first: the slot, the position,
  // the head, its value (keys) and the norm weight; the checks and the math come after.
  constexpr int kPer = kMaxD / 32;
  const int64_t slot = slots[t];
  const int64_t pos = static_cast<int64_t>(positions[t]);
  const E* src = is_query ? query + (t * Hq + h) * D : key + (t * Hk + kh) * D;
  const E* vsrc = value + (t * Hk + (is_query ? 0 : kh)) * D;
  const void* w = is_query ? qw : kw;
  const DType wd = is_query ? qwd : kwd;
  E xr[kPer], vr[kPer];
  uint32_t wb[kPer];
#pragma unroll
  for (int c = 0; c < kPer; ++c) {
    const int64_t i = lane + 32 * c;
    if (i < D) {
      xr[c] = src[i];
      if (!is_query) vr[c] = vsrc[i];
      if (w != nullptr) wb[c] = wd == DType::kF32 ? static_cast<const uint32_t*>(w)[i] : static_cast<const uint16_t*>(w)[i];
    }
  }
  if (!is_query) {
    if (slot < 0) return;  // padding: the key and value are not written
    if (slot >= num_slots) {
      if (kh == 0 && lane == 0) RecordIndexError(err, IndexError::kKvSlot, t, slot, num_slots);
      return;
    }
  }
  if (pos < 0 || pos >= max_pos) {
    if (h == 0 && lane == 0) RecordIndexError(err, IndexError::kRopePosition, t, pos, max_pos);
    return;
  }
  float* s = staged[warp];
  float acc = 0.0f;
#pragma unroll
  for (int c = 0; c < kPer; ++c) {
    const int64_t i = lane + 32 * c;
    if (i < D) {
      const float v = Tag::Load(xr[c]);
      s[i] = v;
      acc = numerics::Fma(v, v, acc);
      if (!is_query) {
        if constexpr (kFp8)
          vc[(slot * Hk + kh) * D + i] = KvCacheQuantizeFp8(Tag::Load(vr[c]), v_scale);
        else
          vc[(slot * Hk + kh) * D + i] = vr[c];
      }
    }
  }
  if (w != nullptr) {
    const float inv = numerics::RmsInverse(WarpCanonicalSum(acc), D, eps);
#pragma unroll
    for (int c = 0; c < kPer; ++c) {
      const int64_t i = lane + 32 * c;
      if (i < D) {
        const float wf = wd == DType::kF32   ? __uint_as_float(wb[c])
                         : wd == DType::kBF16 ? Bf16ToFloat(static_cast<uint16_t>(wb[c]))
                                              : F16ToFloat(static_cast<uint16_t>(wb[c]));
        s[i] = RoundTo<Tag>(RoundTo<Tag>(s[i] * inv) * wf);
      }
    }
  }
  __syncwarp();  // every lane's loads are done (query_out may be query) and staged
  const float* cs = cache + pos * D;
  const int64_t half = D / 2;
  if constexpr (kFp8) {
    if (!is_query) {  // k' rounded to the keys' dtype, then quantized
      C* dst = kc + (slot * Hk + kh) * D;
      for (int64_t i = lane; i < half; i += 32) {
        const float c = cs[i], sn = cs[half + i];
        const float x1 = s[i], x2 = s[half + i];
        const float a = x1 * c, b = x2 * sn, p = x2 * c, r = x1 * sn;
        dst[i] = KvCacheQuantizeFp8(RoundTo<Tag>(a - b), k_scale);
        dst[half + i] = KvCacheQuantizeFp8(RoundTo<Tag>(p + r), k_scale);
      }
      return;
    }
  }
  E* dst = is_query ? qout + (t * Hq + h) * D : reinterpret_cast<E*>(kc) + (slot * Hk + kh) * D;
  for (int64_t i = lane; i < half; i += 32) {
    const float c = cs[i], sn = cs[half + i];
    const float x1 = s[i], x2 = s[half + i];
    const float a = x1 * c, b = x2 * sn, p = x2 * c, r = x1 * sn;
    dst[i] = Tag::Store(a - b);
    dst[half + i] = Tag::Store(p + r);
  }
}

template <typename P>
void Launch(CudaQueue& cq, const Tensor& query_out, const Tensor& query, const Tensor& key, const Tensor& value,
            const Tensor* q_norm, const Tensor* k_norm, float eps, const P* positions, const Tensor& cos_sin_cache,
            const Tensor& key_cache, const Tensor& value_cache, const Tensor& slot_mapping, float k_scale,
            float v_scale) {
  const int64_t T = query.dim(0), D = key_cache.dim(3), Hq = query.dim(1) / D, Hk = key_cache.dim(2);
  const bool fp8 = key_cache.dtype() == DType::kF8E4M3;
  const int64_t units = T * (Hq + Hk);
  const unsigned blocks = static_cast<unsigned>((units + kWarps - 1) / kWarps);
  DispatchFloat(query.dtype(), "QkNormRopeCacheWrite", [&](auto tag) {
    using Tag = decltype(tag);
    using E = typename Tag::T;
    LaunchOverlapped(
        cq, "QkNormRopeCacheKernel", fp8 ? QkNormRopeCacheKernel<Tag, P, true> : QkNormRopeCacheKernel<Tag, P, false>,
        blocks, kWarps * 32, 0, query_out.data_as<E>(), query.data_as<E>(), key.data_as<E>(), value.data_as<E>(),
        q_norm ? q_norm->data() : nullptr, q_norm ? q_norm->dtype() : DType::kF32,
        k_norm ? k_norm->data() : nullptr, k_norm ? k_norm->dtype() : DType::kF32, eps, positions,
        cos_sin_cache.data_as<float>(), cos_sin_cache.dim(0), key_cache.data(), value_cache.data(),
        slot_mapping.data_as<int64_t>(), key_cache.dim(0) * key_cache.dim(1), T, Hq, Hk, D, k_scale, v_scale,
        cq.index_errors);
  });
  cq.prelude_key_cache = key_cache.data();
  cq.prelude_launch = cq.overlap_asks;
  if (fp8) CountQkNormRopeFp8Launch();
}

void QkNormRopeCacheWriteCuda(const Queue& q, const Tensor& query_out, const Tensor& query, const Tensor& key,
                              const Tensor& value, const Tensor* q_norm, const Tensor* k_norm, float eps,
                              const Tensor& positions, const Tensor& cos_sin_cache, const Tensor& key_cache,
                              const Tensor& value_cache, const Tensor& slot_mapping, float k_scale,
                              float v_scale) {
  const int64_t D = key_cache.dim(3);
  if (D > kMaxD) {  // beyond the staged head size: the definition, op by op
    QkNormRopeCacheWriteComposite(q, query_out, query, key, value, q_norm, k_norm, eps, positions, cos_sin_cache,
                                  key_cache, value_cache, slot_mapping, k_scale, v_scale);
    return;
  }
  if (query.dim(0) == 0) return;
  CudaQueue& cq = Cuda(q);
  DeviceGuard guard(cq.device.index);
  if (positions.dtype() == DType::kI32)
    Launch(cq, query_out, query, key, value, q_norm, k_norm, eps, positions.data_as<int32_t>(), cos_sin_cache,
           key_cache, value_cache, slot_mapping, k_scale, v_scale);
  else
    Launch(cq, query_out, query, key, value, q_norm, k_norm, eps, positions.data_as<int64_t>(), cos_sin_cache,
           key_cache, value_cache, slot_mapping, k_scale, v_scale);
}

}  // namespace

void RegisterQkNormRopeKernels() {
  Register<OpId::kQkNormRopeCacheWrite>(DeviceType::kCUDA, &QkNormRopeCacheWriteCuda);
}

}  // namespace vt::cuda
