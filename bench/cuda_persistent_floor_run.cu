// The host side of cuda_fp8_bench --persistent (see cuda_persistent_floor.cu): the host
// reference of the step's math, the check of the kernel against it, and the timed runs.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "cuda_bench_util.h"
#include "cuda_persistent_floor.h"
#include "vt/dtype.h"

void LaunchStreamRead(const void* p, int64_t bytes, uint32_t* sink, int sms, cudaStream_t stream);

namespace persistent_floor {
namespace {

uint8_t HostCode(float v) { return vt::FloatToFp8E4M3(std::fmin(std::fmax(v, -448.0f), 448.0f)); }

}  // namespace

void HostStep(HostModel& m, int ctx, int g, std::vector<float>& h, std::vector<float>& logits) {
  h = m.h_in;
  std::vector<uint8_t> xs(kInter);
  std::vector<float> qkv(kQkv);
  std::vector<uint8_t> attn(kAttnOut), act(kInter);
  auto norm_codes = [&](const float* nw) {
    double ss = 0;
    for (float v : h) ss += double{v} * v;
    const float r = 1.0f / std::sqrt(static_cast<float>(ss) / kHidden + kEps);
    for (int i = 0; i < kHidden; ++i) xs[i] = HostCode(h[i] * r * nw[i] / kXScale);
  };
  auto dot = [](const uint8_t* w, const uint8_t* x, int K) {
    double s = 0;
    for (int k = 0; k < K; ++k) s += double{vt::Fp8E4M3ToFloat(w[k])} * vt::Fp8E4M3ToFloat(x[k]);
    return static_cast<float>(s);
  };
  for (int layer = 0; layer < kLayers; ++layer) {
    const uint8_t* w = m.w.data() + layer * kLayerBytes;
    const float* nw = m.norm_w.data() + int64_t{layer} * 2 * kHidden;
    norm_codes(nw);
    for (int r = 0; r < kQkv; ++r) qkv[r] = dot(w + int64_t{r} * kHidden, xs.data(), kHidden) * kWScale * kXScale;
    uint16_t* kc = m.k_cache.data() + int64_t{layer} * kMaxCtx * kKvHeads * kHeadDim;
    uint16_t* vc = m.v_cache.data() + int64_t{layer} * kMaxCtx * kKvHeads * kHeadDim;
    for (int head = 0; head < kHeads; ++head) {
      const int kv = head / (kHeads / kKvHeads);
      float q[kHeadDim], k[kHeadDim], v[kHeadDim];
      auto rms = [](const float* x, float* y) {
        double ss = 0;
        for (int d = 0; d < kHeadDim; ++d) ss += double{x[d]} * x[d];
        const float r = 1.0f / std::sqrt(static_cast<float>(ss) / kHeadDim + kEps);
        for (int d = 0; d < kHeadDim; ++d) y[d] = x[d] * r;
      };
      rms(&qkv[head * kHeadDim], q);
      rms(&qkv[kAttnOut + kv * kHeadDim], k);
      for (int d = 0; d < kHeadDim; ++d) v[d] = qkv[kAttnOut + kKvHeads * kHeadDim + kv * kHeadDim + d];
      for (float* x : {q, k})
        for (int d = 0; d < 64; ++d) {
          const float freq = std::pow(kRopeTheta, -2.0f * d / kHeadDim);
          const float s = std::sin(static_cast<float>(ctx) * freq), c = std::cos(static_cast<float>(ctx) * freq);
          const float a = x[d], b = x[d + 64];
          x[d] = a * c - b * s;
          x[d + 64] = b * c + a * s;
        }
      const int64_t at = (int64_t{ctx} * kKvHeads + kv) * kHeadDim;
      for (int d = 0; d < kHeadDim; ++d) {
        kc[at + d] = vt::FloatToBf16(k[d]);
        vc[at + d] = vt::FloatToBf16(v[d]);
      }
      std::vector<double> sc(ctx + 1);
      double mx = -1e300;
      for (int j = 0; j <= ctx; ++j) {
        double s = 0;
        for (int d = 0; d < kHeadDim; ++d)
          s += double{vt::Bf16ToFloat(kc[(int64_t{j} * kKvHeads + kv) * kHeadDim + d])} * q[d];
        sc[j] = s / std::sqrt(double{kHeadDim});
        mx = std::max(mx, sc[j]);
      }
      double l = 0;
      for (double& s : sc) l += (s = std::exp(s - mx));
      for (int d = 0; d < kHeadDim; ++d) {
        double o = 0;
        for (int j = 0; j <= ctx; ++j) o += sc[j] * vt::Bf16ToFloat(vc[(int64_t{j} * kKvHeads + kv) * kHeadDim + d]);
        attn[head * kHeadDim + d] = HostCode(static_cast<float>(o / l) / kAttnScale);
      }
    }
    for (int r = 0; r < kHidden; ++r)
      h[r] += dot(w + kQkvBytes + int64_t{r} * kAttnOut, attn.data(), kAttnOut) * kWScale * kAttnScale;
    norm_codes(nw + kHidden);
    for (int c = 0; c < g; ++c) {
      const int j0 = static_cast<int>(int64_t{c} * kInter / g), j1 = static_cast<int>(int64_t{c + 1} * kInter / g);
      const uint8_t* base = w + kQkvBytes + kOBytes + int64_t{2} * j0 * kHidden;
      for (int j = j0; j < j1; ++j) {
        const float gate = dot(base + int64_t{j - j0} * kHidden, xs.data(), kHidden) * kWScale * kXScale;
        const float up = dot(base + int64_t{j1 - j0 + j - j0} * kHidden, xs.data(), kHidden) * kWScale * kXScale;
        act[j] = HostCode(gate / (1.0f + std::exp(-gate)) * up / kActScale);
      }
    }
    for (int r = 0; r < kHidden; ++r)
      h[r] += dot(w + kQkvBytes + kOBytes + kGuBytes + int64_t{r} * kInter, act.data(), kInter) * kWScale * kActScale;
  }
  double ss = 0;
  for (float v : h) ss += double{v} * v;
  const float r = 1.0f / std::sqrt(static_cast<float>(ss) / kHidden + kEps);
  std::vector<float> x(kHidden);
  for (int i = 0; i < kHidden; ++i) x[i] = h[i] * r * m.final_norm[i];
  logits.assign(kVocab, 0.0f);
  for (int v = 0; v < kVocab; ++v) {
    double s = 0;
    for (int k = 0; k < kHidden; ++k) s += double{vt::Bf16ToFloat(m.lm_head[int64_t{v} * kHidden + k])} * x[k];
    logits[v] = static_cast<float>(s);
  }
}

namespace {

double RelErr(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    num += (double{a[i]} - b[i]) * (double{a[i]} - b[i]);
    den += double{b[i]} * b[i];
  }
  return std::sqrt(num / std::max(den, 1e-300));
}

}  // namespace
}  // namespace persistent_floor

void RunPersistentFloor() {
  using namespace persistent_floor;
  int sms = 0, dev = 0;
  RETURN_ON_CUDA_ERROR(cudaGetDevice(&dev));
  RETURN_ON_CUDA_ERROR(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  cudaDeviceProp prop{};
  RETURN_ON_CUDA_ERROR(cudaGetDeviceProperties(&prop, dev));
  const size_t smem = SmemBytes(sms);
  int per_sm = 0;
  RETURN_ON_CUDA_ERROR(ConfigurePersistentStep(smem, &per_sm));
  std::printf("persistent decode step: %s, %d SMs, %zu bytes of shared memory a CTA, %d CTA(s) an SM fit\n", prop.name,
              sms, smem, per_sm);
  if (per_sm < 1) return;

  const int64_t w_bytes = kLayers * kLayerBytes, cache_elems = int64_t{kLayers} * kMaxCtx * kKvHeads * kHeadDim;
  uint8_t *w, *attn_codes, *act_codes;
  float *norm_w, *final_norm, *h_in, *h, *qkv, *logits;
  uint16_t *k_cache, *v_cache, *lm_head;
  unsigned* barrier;
  uint32_t* sink;
  RETURN_ON_CUDA_ERROR(cudaMalloc(&w, w_bytes));
  RETURN_ON_CUDA_ERROR(cudaMalloc(&norm_w, sizeof(float) * kLayers * 2 * kHidden));
  RETURN_ON_CUDA_ERROR(cudaMalloc(&final_norm, sizeof(float) * kHidden));
  RETURN_ON_CUDA_ERROR(cudaMalloc(&h_in, sizeof(float) * kHidden));
  RETURN_ON_CUDA_ERROR(cudaMalloc(&h, sizeof(float) * kHidden * kMaxReplicas));
  RETURN_ON_CUDA_ERROR(cudaMalloc(&qkv, sizeof(float) * kQkv));
  RETURN_ON_CUDA_ERROR(cudaMalloc(&logits, sizeof(float) * kVocab));
  RETURN_ON_CUDA_ERROR(cudaMalloc(&attn_codes, kAttnOut * kMaxReplicas));
  RETURN_ON_CUDA_ERROR(cudaMalloc(&act_codes, kInter * kMaxReplicas));
  RETURN_ON_CUDA_ERROR(cudaMalloc(&k_cache, 2 * cache_elems));
  RETURN_ON_CUDA_ERROR(cudaMalloc(&v_cache, 2 * cache_elems));
  RETURN_ON_CUDA_ERROR(cudaMalloc(&lm_head, int64_t{2} * kVocab * kHidden));
  RETURN_ON_CUDA_ERROR(cudaMalloc(&barrier, sizeof(unsigned)));
  RETURN_ON_CUDA_ERROR(cudaMalloc(&sink, sizeof(uint32_t)));

  cudaStream_t stream;
  RETURN_ON_CUDA_ERROR(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  const int64_t flag_words = int64_t{kLayers + 1} * kFlagWords;
  uint64_t* flags;
  unsigned* epoch;
  RETURN_ON_CUDA_ERROR(cudaMalloc(&flags, flag_words * sizeof(uint64_t)));
  RETURN_ON_CUDA_ERROR(cudaMalloc(&epoch, sizeof(unsigned)));
  RETURN_ON_CUDA_ERROR(cudaMemset(flags, 0, flag_words * sizeof(uint64_t)));
  RETURN_ON_CUDA_ERROR(cudaMemset(epoch, 0, sizeof(unsigned)));
  Params p{w,         norm_w,     lm_head,   final_norm, k_cache, v_cache, h_in,  h, qkv,
           attn_codes, act_codes, logits,    barrier,    flags,   epoch,   160,   2};
  RETURN_ON_CUDA_ERROR(FillPersistentInputs(p, w_bytes, cache_elems));
  // Cooperative, so that the CTAs are co-resident (the barriers need it); without the
  // attribute if a graph cannot hold it (one CTA an SM fits, and the grid is one wave).
  bool cooperative = true;
  auto launch = [&](const Params& q) {
    cudaError_t e = q.mode == 3 || q.mode == 5 ? cudaSuccess : cudaMemsetAsync(barrier, 0, sizeof(unsigned), stream);
    return e != cudaSuccess ? e : LaunchPersistentStep(q, sms, smem, cooperative, stream);
  };

  // The check: one step against the host's computation of the same math.
  {
    HostModel m;
    m.w.resize(w_bytes);
    m.norm_w.resize(kLayers * 2 * kHidden);
    m.final_norm.resize(kHidden);
    m.h_in.resize(kHidden);
    m.k_cache.resize(cache_elems);
    m.v_cache.resize(cache_elems);
    m.lm_head.resize(int64_t{kVocab} * kHidden);
    RETURN_ON_CUDA_ERROR(cudaMemcpy(m.w.data(), w, w_bytes, cudaMemcpyDeviceToHost));
    RETURN_ON_CUDA_ERROR(cudaMemcpy(m.norm_w.data(), norm_w, sizeof(float) * m.norm_w.size(), cudaMemcpyDeviceToHost));
    RETURN_ON_CUDA_ERROR(cudaMemcpy(m.final_norm.data(), final_norm, sizeof(float) * kHidden, cudaMemcpyDeviceToHost));
    RETURN_ON_CUDA_ERROR(cudaMemcpy(m.h_in.data(), h_in, sizeof(float) * kHidden, cudaMemcpyDeviceToHost));
    RETURN_ON_CUDA_ERROR(cudaMemcpy(m.k_cache.data(), k_cache, 2 * cache_elems, cudaMemcpyDeviceToHost));
    RETURN_ON_CUDA_ERROR(cudaMemcpy(m.v_cache.data(), v_cache, 2 * cache_elems, cudaMemcpyDeviceToHost));
    RETURN_ON_CUDA_ERROR(cudaMemcpy(m.lm_head.data(), lm_head, m.lm_head.size() * 2, cudaMemcpyDeviceToHost));
    // Every form computes the same step (and writes the same key and value at position ctx),
    // so one host step is the reference of all of them.
    std::vector<float> hh, hl;
    HostStep(m, p.ctx, sms, hh, hl);
    const int argmax_h = static_cast<int>(std::max_element(hl.begin(), hl.end()) - hl.begin());
    struct Check {
      int mode, light, mma, kv_smem, replicas = 1;
    };
    for (const Check& ck : {Check{2, 0, 0, 0}, Check{1, 0, 0, 0}, Check{3, 0, 0, 0}, Check{2, 1, 1, 1}, Check{3, 0, 1, 0},
                            Check{2, 1, 1, 1, 16}}) {
      Params q = p;
      q.mode = ck.mode;
      q.light = ck.light;
      q.mma = ck.mma;
      q.kv_smem = ck.kv_smem;
      q.replicas = ck.replicas;
      RETURN_ON_CUDA_ERROR(cudaMemset(logits, 0, sizeof(float) * kVocab));
      RETURN_ON_CUDA_ERROR(launch(q));
      RETURN_ON_CUDA_ERROR(cudaStreamSynchronize(stream));
      std::vector<float> dh(kHidden), dl(kVocab);
      RETURN_ON_CUDA_ERROR(cudaMemcpy(dh.data(), h, sizeof(float) * kHidden, cudaMemcpyDeviceToHost));
      RETURN_ON_CUDA_ERROR(cudaMemcpy(dl.data(), logits, sizeof(float) * kVocab, cudaMemcpyDeviceToHost));
      const int argmax_d = static_cast<int>(std::max_element(dl.begin(), dl.end()) - dl.begin());
      const double eh = RelErr(dh, hh), el = RelErr(dl, hl);
      std::printf("  check (mode %d%s%s%s%s, context %d): residual row rel. error %.2e, logits %.2e, argmax %d / host %d: "
                  "%s\n",
                  ck.mode, ck.light ? ", light barriers" : "", ck.mma ? ", tensor-core GEMVs" : "",
                  ck.kv_smem ? ", context in shared memory" : "", ck.replicas > 1 ? ", 16 copies of shared rows" : "",
                  p.ctx, eh, el, argmax_d, argmax_h, eh < 2e-2 && el < 2e-2 ? "ok" : "MISMATCH");
    }
  }

  cudaEvent_t t0, t1;
  RETURN_ON_CUDA_ERROR(cudaEventCreate(&t0));
  RETURN_ON_CUDA_ERROR(cudaEventCreate(&t1));
  auto replay_us = [&](const Params& q, double& us) -> cudaError_t {
    cudaGraph_t graph;
    cudaError_t e = cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal);
    if (e != cudaSuccess) return e;
    for (int i = 0; i < 10 && e == cudaSuccess; ++i) e = launch(q);
    cudaError_t e2 = cudaStreamEndCapture(stream, &graph);
    if (e != cudaSuccess || e2 != cudaSuccess) return e != cudaSuccess ? e : e2;
    float median_ms = 0;
    e = vtllm_bench::ReplayMedianMs(graph, stream, t0, t1, median_ms);
    us = 1000.0 * median_ms / 10;
    return e;
  };
  // The roofline: the streaming read of the same buffers.
  auto stream_us = [&](const void* buf, int64_t bytes, double& us) -> cudaError_t {
    std::vector<float> ms;
    for (int r = 0; r < 13; ++r) {
      cudaEventRecord(t0, stream);
      LaunchStreamRead(buf, bytes, sink, sms, stream);
      cudaEventRecord(t1, stream);
      cudaError_t e = cudaEventSynchronize(t1);
      if (e != cudaSuccess) return e;
      float m = 0;
      cudaEventElapsedTime(&m, t0, t1);
      if (r >= 3) ms.push_back(m);
    }
    std::sort(ms.begin(), ms.end());
    us = 1000.0 * ms[ms.size() / 2];
    return cudaSuccess;
  };
  double w_us = 0, lm_us = 0;
  RETURN_ON_CUDA_ERROR(stream_us(w, w_bytes, w_us));
  RETURN_ON_CUDA_ERROR(stream_us(lm_head, int64_t{2} * kVocab * kHidden, lm_us));
  std::printf("  roofline: the layers' FP8 weights (%.0f MB) streamed in %.1f us (%.0f GB/s), the BF16 lm_head (%.0f MB) "
              "in %.1f us (%.0f GB/s)\n",
              w_bytes / 1e6, w_us, w_bytes / w_us / 1e3, 2.0 * kVocab * kHidden / 1e6, lm_us,
              2.0 * kVocab * kHidden / lm_us / 1e3);
  struct Case {
    const char* name;
    int mode, ctx;
    bool lm;
    int light, mma, kv_smem, replicas = 1;
  };
  const Case cases[] = {
      {"grid barriers only (5 a layer)", 0, 160, false, 0, 0, 0},
      {"grid barriers only, no __threadfence", 4, 160, false, 0, 0, 0},
      {"B: barriers, FMA GEMVs, context 160", 2, 160, false, 0, 0, 0},
      {"B: barriers, FMA GEMVs, context 1", 2, 1, false, 0, 0, 0},
      {"B: as above, weights copied when the stage starts, ctx 160", 1, 160, false, 0, 0, 0},
      {"L: light barriers, FMA GEMVs, context in smem, ctx 160", 2, 160, false, 1, 0, 1},
      {"L: light barriers, MMA GEMVs, context in smem, ctx 160", 2, 160, false, 1, 1, 1},
      {"L: light barriers, MMA GEMVs, context 1", 2, 1, false, 1, 1, 1},
      {"L: ... ctx 160, 4 copies of each row others read", 2, 160, false, 1, 1, 1, 4},
      {"L: ... ctx 160, 16 copies of each row others read", 2, 160, false, 1, 1, 1, 16},
      {"L: ... ctx 1, 16 copies of each row others read", 2, 1, false, 1, 1, 1, 16},
      {"L: light barriers, MMA GEMVs, ctx 160, + lm_head", 2, 160, true, 1, 1, 1},
      {"L: light barriers, MMA GEMVs, ctx 1000 (global), + lm_head", 2, 1000, true, 1, 1, 1},
      {"T: tagged words, FMA GEMVs, context 160", 3, 160, false, 0, 0, 0},
      {"T: tagged words, MMA GEMVs, context 160", 3, 160, false, 0, 1, 0},
      {"T: tagged words, MMA GEMVs, context 1", 3, 1, false, 0, 1, 0},
      {"T: tagged words, the products left out, context 1", 5, 1, false, 0, 0, 0},
      {"T: tagged words, MMA GEMVs, ctx 160, + lm_head", 3, 160, true, 0, 1, 0},
  };
  std::printf("  graph-replayed steps (a zeroing memset of the barrier, but in mode 3, and the kernel each), median of 20 "
              "replays of 10 steps:\n");
  for (const Case& c : cases) {
    Params q = p;
    q.mode = c.mode;
    q.ctx = c.ctx;
    q.light = c.light;
    q.mma = c.mma;
    q.kv_smem = c.kv_smem;
    q.replicas = c.replicas;
    if (!c.lm) q.lm_head = nullptr;
    double us = 0;
    cudaError_t e = replay_us(q, us);
    if (e != cudaSuccess && cooperative) {
      std::printf("    (a cooperative launch in a graph: %s; captured without the attribute)\n", cudaGetErrorString(e));
      cudaGetLastError();
      cooperative = false;
      e = replay_us(q, us);
    }
    RETURN_ON_CUDA_ERROR(e);
    const double bytes = (c.mode ? w_bytes : 0) + (c.lm ? 2.0 * kVocab * kHidden : 0);
    const double roof = (c.mode ? w_us : 0) + (c.lm ? lm_us : 0);
    if (c.mode == 0 || c.mode == 4)
      std::printf("    %-62s %8.1f us a step, %.2f us a barrier\n", c.name, us, us / (5 * kLayers));
    else
      std::printf("    %-62s %8.1f us a step (%.2f us a layer%s), %.0f GB/s of weights, %.0f%% of the streamed read\n",
                  c.name, us, (c.lm ? us - lm_us : us) / kLayers, c.lm ? " after the lm_head's roofline time" : "",
                  bytes / us / 1e3, 100.0 * roof / us);
  }
  cudaFree(w);
  cudaFree(norm_w);
  cudaFree(final_norm);
  cudaFree(h_in);
  cudaFree(h);
  cudaFree(qkv);
  cudaFree(logits);
  cudaFree(attn_codes);
  cudaFree(act_codes);
  cudaFree(k_cache);
  cudaFree(v_cache);
  cudaFree(lm_head);
  cudaFree(barrier);
  cudaFree(sink);
  cudaFree(flags);
  cudaFree(epoch);
}
