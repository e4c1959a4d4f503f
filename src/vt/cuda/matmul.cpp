// CUDA MatmulFp8 and Matmul: cuBLASLt for the GEMMs, the small-M streaming kernel for
// decode-sized FP8 products, picked by shape here (model code only sees OpId::kMatmulFp8).
//
// Layout: out[M, N] (row-major) = a[M, K] · b[N, K]ᵀ. In cuBLASLt's column-major terms
// out is an N x M matrix with ld N, equal to op(B)·op(A) with "A" = b viewed as K x N
// (ld K) transposed and "B" = a viewed as K x M (ld K) not transposed: the TN layout
// that cuBLASLt FP8 requires.
#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <string_view>
#include <utility>
#include <tuple>

#include "vt/cuda/context.h"
#include "vt/cuda/kernels.h"
#include "vt/cuda/matmul.h"
#include "vt/ops/cast.h"
#include "vt/ops/matmul.h"

namespace vt::cuda {

#ifdef VT_CUDA_CUBLASLT
namespace {

#define VT_CUBLAS_CHECK(stmt)                                                                                  \
  do {                                                                                                         \
    const cublasStatus_t st_ = (stmt);                                                                         \
    if (st_ != CUBLAS_STATUS_SUCCESS)                                                                          \
      throw Error(StrCat("cuBLASLt error ", cublasLtGetStatusName(st_), " in `" #stmt "` at src/vt/cuda/matmul.cpp:", \
                         __LINE__));                                                                           \
  } while (0)

// Largest power of two (up to 256) dividing the address: cuBLASLt's heuristic otherwise
// assumes 256-byte aligned operands.
uint32_t AlignmentOf(const void* p) {
  const auto u = reinterpret_cast<uintptr_t>(p);
  uint32_t al = 256;
  while (al > 1 && u % al != 0) al /= 2;
  return al;
}

template <typename T, void (*Destroy)(T)>
struct LtHandle {
  T h = nullptr;
  ~LtHandle() {
    if (h) Destroy(h);
  }
};
void DestroyDesc(cublasLtMatmulDesc_t d) { (void)cublasLtMatmulDescDestroy(d); }
void DestroyLayout(cublasLtMatrixLayout_t d) { (void)cublasLtMatrixLayoutDestroy(d); }
void DestroyPref(cublasLtMatmulPreference_t d) { (void)cublasLtMatmulPreferenceDestroy(d); }

// Scale tensors of W and X for cuBLASLt's scaled FP8 modes (mode -1: none).
struct LtScales {
  const void* w = nullptr;
  const void* x = nullptr;
  int w_mode = -1, x_mode = -1;
};

// D[N x M, ld N] = alpha * op_T(W[K x N, ld K]) · X[K x M, ld K]; W and X of type ab, D of
// type dt, with the scales sc. Returns false when cuBLASLt has no algorithm.
bool LtGemm(CudaQueue& cq, cudaDataType_t ab, cublasComputeType_t compute, const void* w, const void* x, void* d,
            cudaDataType_t dt, int64_t M, int64_t N, int64_t K, float alpha, const LtScales& sc = {}) {
  LtHandle<cublasLtMatmulDesc_t, DestroyDesc> op;
  LtHandle<cublasLtMatrixLayout_t, DestroyLayout> la, lb, lc;
  LtHandle<cublasLtMatmulPreference_t, DestroyPref> pref;
  VT_CUBLAS_CHECK(cublasLtMatmulDescCreate(&op.h, compute, CUDA_R_32F));
  const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
  VT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op.h, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
  VT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op.h, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
  if (ab == CUDA_R_8F_E4M3) {
    const int8_t fast_accum = 0;  // keep full f32 accumulation
    VT_CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(op.h, CUBLASLT_MATMUL_DESC_FAST_ACCUM, &fast_accum, sizeof(fast_accum)));
  }
  if (sc.w_mode >= 0) {
    const auto wm = static_cast<cublasLtMatmulMatrixScale_t>(sc.w_mode);
    const auto xm = static_cast<cublasLtMatmulMatrixScale_t>(sc.x_mode);
    VT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op.h, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &wm, sizeof(wm)));
    VT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op.h, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &xm, sizeof(xm)));
    VT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op.h, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &sc.w, sizeof(sc.w)));
    VT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op.h, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &sc.x, sizeof(sc.x)));
  }
  VT_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&la.h, ab, K, N, K));
  VT_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&lb.h, ab, K, M, K));
  VT_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&lc.h, dt, N, M, N));

  const uint32_t al_a = AlignmentOf(w), al_b = AlignmentOf(x), al_d = AlignmentOf(d);
  const auto key = std::make_tuple((static_cast<int>(ab) * 64 + static_cast<int>(dt)) * 256 + (sc.w_mode + 1) * 16 +
                                       (sc.x_mode + 1),
                                   M, N, K,
                                   static_cast<int>(al_a * 1000 + al_b), static_cast<int>(al_d));
  cublasLtMatmulAlgo_t algo{};
  {
    std::lock_guard<std::mutex> lock(cq.mu);
    if (cq.no_algo.count(key)) return false;
    auto it = cq.algos.find(key);
    if (it != cq.algos.end()) {
      algo = it->second;
    } else {
      VT_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref.h));
      const uint64_t ws = cq.workspace_bytes;
      VT_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref.h, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws,
                                                           sizeof(ws)));
      VT_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref.h, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al_a,
                                                           sizeof(al_a)));
      VT_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref.h, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al_b,
                                                           sizeof(al_b)));
      VT_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref.h, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al_d,
                                                           sizeof(al_d)));
      VT_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref.h, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al_d,
                                                           sizeof(al_d)));
      cublasLtMatmulHeuristicResult_t result{};
      int found = 0;
      const cublasStatus_t st =
          cublasLtMatmulAlgoGetHeuristic(cq.lt, op.h, la.h, lb.h, lc.h, lc.h, pref.h, 1, &result, &found);
      if (st != CUBLAS_STATUS_SUCCESS || found == 0) {
        cq.no_algo[key] = true;
        return false;
      }
      algo = result.algo;
      cq.algos[key] = algo;
    }
  }
  const float beta = 0.0f;
  DeviceGuard guard(cq.device.index);
  VT_CUBLAS_CHECK(cublasLtMatmul(cq.lt, op.h, &alpha, w, la.h, x, lb.h, &beta, d, lc.h, d, lc.h, &algo, cq.workspace,
                                 cq.workspace_bytes, cq.stream));
  if (sc.w_mode >= 0) cq.serialize_next = true;  // see CudaQueue::serialize_next
  return true;
}

cudaDataType_t LtType(DType d) {
  switch (d) {
    case DType::kF32: return CUDA_R_32F;
    case DType::kBF16: return CUDA_R_16BF;
    case DType::kF16: return CUDA_R_16F;
    case DType::kF8E4M3: return CUDA_R_8F_E4M3;
    default: throw Error(StrCat("internal: no cuBLASLt type for ", DTypeName(d)));
  }
}

// Runs gemm(d_ptr, d_type) writing alpha·a·bᵀ, then applies the bias with one rounding of
// the output: directly into out when there is no bias or out is F32 (bias added in place),
// else through an F32 temporary.
template <typename Gemm>
bool WithBias(const Queue& q, const Tensor& out, const Tensor* bias, Gemm gemm) {
  const int64_t M = out.dim(0), N = out.dim(1);
  if (bias == nullptr) return gemm(out.data(), LtType(out.dtype()));
  if (out.dtype() == DType::kF32) {
    if (!gemm(out.data(), CUDA_R_32F)) return false;
    LaunchBiasEpilogue(q, out.data(), DType::kF32, out.data_as<float>(), bias->data(), bias->dtype(), M, N);
    return true;
  }
  Tensor tmp = Tensor::Empty({M, N}, DType::kF32, out.device());
  if (!gemm(tmp.data(), CUDA_R_32F)) return false;
  LaunchBiasEpilogue(q, out.data(), out.dtype(), tmp.data_as<float>(), bias->data(), bias->dtype(), M, N);
  return true;
}

void MatmulCuda(const Queue& q, const Tensor& out, const Tensor& a, const Tensor& b, const Tensor* bias) {
  CudaQueue& cq = Cuda(q);
  const int64_t M = a.dim(0), N = b.dim(0), K = b.dim(1);
  if (M * N == 0) return;
  auto naive = [&] {
    LaunchMatmulNaive(q, out.data(), out.dtype(), a.data(), a.dtype(), b.data(), b.dtype(),
                      bias ? bias->data() : nullptr, bias ? bias->dtype() : DType::kF32, M, N, K);
  };
  if (K == 0) return naive();
  if (a.dtype() == DType::kBF16 && b.dtype() == DType::kBF16) {
    if (Bf16GemvFits(out, a, b)) return MatmulBf16Gemv(q, out, a, b, bias);
    // BF16 x BF16 with f32 accumulation writes BF16 or F32 directly.
    if (WithBias(q, out, bias, [&](void* d, cudaDataType_t dt) {
          return LtGemm(cq, CUDA_R_16BF, CUBLAS_COMPUTE_32F, b.data(), a.data(), d, dt, M, N, K, 1.0f);
        }))
      return;
    return naive();
  }
  // Mixed or F32 operands: widen the BF16 one to F32 (exact) and run a true f32 GEMM (no
  // TF32), writing F32 and rounding to out's dtype in the epilogue.
  Tensor af = a, bf = b;
  if (a.dtype() != DType::kF32) {
    af = Tensor::Empty(a.shape(), DType::kF32, a.device());
    Cast(q, af, a);
  }
  if (b.dtype() != DType::kF32) {
    bf = Tensor::Empty(b.shape(), DType::kF32, b.device());
    Cast(q, bf, b);
  }
  Tensor tmp = out.dtype() == DType::kF32 ? out : Tensor::Empty({M, N}, DType::kF32, out.device());
  if (!LtGemm(cq, CUDA_R_32F, CUBLAS_COMPUTE_32F, bf.data(), af.data(), tmp.data(), CUDA_R_32F, M, N, K, 1.0f))
    return naive();
  if (bias != nullptr || out.dtype() != DType::kF32)
    LaunchBiasEpilogue(q, out.data(), out.dtype(), tmp.data_as<float>(), bias ? bias->data() : nullptr,
                       bias ? bias->dtype() : DType::kF32, M, N);
}

#ifdef VT_CUDA_FP8
void MatmulFp8Cuda(const Queue& q, const Tensor& out, const Tensor& a, const Tensor& b, float alpha,
                   const Tensor* bias) {
  CudaQueue& cq = Cuda(q);
  VT_CHECK(cq.cc_major * 10 + cq.cc_minor >= 89, "MatmulFp8: ", ToString(cq.device), " is sm_", cq.cc_major,
           cq.cc_minor, "; FP8 matmul needs sm_89 or newer");
  const int64_t M = a.dim(0), K = b.dim(1);
  if (M > kSmallMMax && K >= kLtMinK && MatmulFp8Lt(q, out, a, b, alpha, bias)) return;
  if (GemvFits(a, b)) return MatmulFp8Gemv(q, out, a, b, alpha, bias);
  if (M >= kViaBf16MinM && K < kLtMinK && MatmulFp8ViaBf16(q, out, a, b, alpha, bias)) return;
  MatmulFp8SplitK(q, out, a, b, alpha, bias);
}
#endif

}  // namespace

bool MatmulFp8Lt(const Queue& q, const Tensor& out, const Tensor& a, const Tensor& b, float alpha,
                 const Tensor* bias) {
  CudaQueue& cq = Cuda(q);
  const int64_t M = a.dim(0), N = b.dim(0), K = b.dim(1);
  if (M * N == 0) return true;
  if (K == 0 || K % 16 != 0) return false;
  return WithBias(q, out, bias, [&](void* d, cudaDataType_t dt) {
    return LtGemm(cq, CUDA_R_8F_E4M3, CUBLAS_COMPUTE_32F, b.data(), a.data(), d, dt, M, N, K, alpha);
  });
}

namespace {
std::atomic<int64_t> g_group_scaled_lt{0};

// VT_CUDA_GROUP_SCALED_LT=0 keeps MatmulFp8GroupScaled off cuBLASLt (for A/B runs).
bool GroupScaledLtOn() {
  static const bool on = SwitchOn("VT_CUDA_GROUP_SCALED_LT");
  return on;
}
}  // namespace

bool MatmulFp8GroupScaledLt(const Queue& q, const Tensor& out, const Tensor& a, const Tensor& a_scales,
                            const Tensor& b, const Tensor& b_scales, int64_t block_n, int64_t block_k,
                            const Tensor* bias) {
#if CUBLAS_VERSION < 120900  // the scaled FP8 modes came with cuBLAS 12.9
  (void)q, (void)out, (void)a, (void)a_scales, (void)b, (void)b_scales, (void)block_n, (void)block_k, (void)bias;
  return false;
#else
  CudaQueue& cq = Cuda(q);
  const int64_t M = a.dim(0), N = b.dim(0), K = b.dim(1), G = a_scales.dim(1);
  if (M * N == 0) return true;
  // cuBLASLt's scaled FP8 kernels load the activation scales by rows of M floats: M must be
  // a multiple of 4 (16-byte rows), else a kernel never finished on the H200 (a server's
  // mixed step of 1,921 rows). MatmulFp8GroupScaled takes the rows past a multiple of 4 apart.
  if (!GroupScaledLtOn() || cq.cc_major != 9 || K % 16 != 0 || M % 4 != 0) return false;
  // Whole blocks only: with a partial last block of N or K (a tiny test model's 192 columns)
  // cuBLASLt's output left the DESIGN bound on the H200.
  const bool blocks = block_n == 128 && block_k == 128 && N % 128 == 0 && K % 128 == 0 && K >= kLtBlocksMinK;
  const bool channels = block_n == 1 && G == 1 && K >= kLtMinK;
  if (!blocks && !channels) return false;
  LtScales sc;
  Tensor xs, ws;  // the scales in cuBLASLt's layouts (blocks)
  if (channels) {
    // One scale per row of b (cuBLASLt's A) and per row of a (its B).
    sc = {b_scales.data(), a_scales.data(), CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F,
          CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F};
  } else {
    // a's group scales with the rows innermost ([G, M]); b's block scales [NB, G] with each
    // row of blocks padded to a multiple of 4 groups.
    const int64_t NB = b_scales.dim(0), G4 = (G + 3) / 4 * 4;
    xs = Tensor::Empty({G, M}, DType::kF32, a.device());
    LaunchCopy2d(q, xs.data_as<float>(), 1, M, a_scales.data_as<float>(), G, 1, M, G);
    ws = b_scales;
    if (G4 != G) {
      ws = Tensor::Empty({NB, G4}, DType::kF32, b.device());
      VT_CUDA_CHECK(cudaMemsetAsync(ws.data(), 0, ws.nbytes(), cq.stream));
      LaunchCopy2d(q, ws.data_as<float>(), G4, 1, b_scales.data_as<float>(), G, 1, NB, G);
    }
    sc = {ws.data(), xs.data(), CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F, CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F};
  }
  const bool ran = WithBias(q, out, bias, [&](void* d, cudaDataType_t dt) {
    return LtGemm(cq, CUDA_R_8F_E4M3, CUBLAS_COMPUTE_32F, b.data(), a.data(), d, dt, M, N, K, 1.0f, sc);
  });
  if (ran) g_group_scaled_lt.fetch_add(1, std::memory_order_relaxed);
  return ran;
#endif
}

int64_t GroupScaledLtLaunches() { return g_group_scaled_lt.load(std::memory_order_relaxed); }

bool MatmulFp8ViaBf16(const Queue& q, const Tensor& out, const Tensor& a, const Tensor& b, float alpha,
                      const Tensor* bias) {
  CudaQueue& cq = Cuda(q);
  const int64_t M = a.dim(0), N = b.dim(0), K = b.dim(1);
  if (M * N == 0) return true;
  if (K == 0) return false;
  // Every e4m3 value is exact in BF16, so the products are the FP8 products.
  Tensor a16 = Tensor::Empty(a.shape(), DType::kBF16, a.device());
  Tensor b16 = Tensor::Empty(b.shape(), DType::kBF16, b.device());
  for (auto [dst, src] : {std::pair<const Tensor*, const Tensor*>{&a16, &a}, {&b16, &b}}) {
    const bool vectorized = src->numel() % 16 == 0 && reinterpret_cast<uintptr_t>(src->data()) % 16 == 0 &&
                            reinterpret_cast<uintptr_t>(dst->data()) % 16 == 0;
    if (vectorized)
      LaunchFp8ToBf16(q, dst->data(), src->data(), src->numel());
    else
      Cast(q, *dst, *src);
  }
  return WithBias(q, out, bias, [&](void* d, cudaDataType_t dt) {
    return LtGemm(cq, CUDA_R_16BF, CUBLAS_COMPUTE_32F, b16.data(), a16.data(), d, dt, M, N, K, alpha);
  });
}

void RegisterMatmulKernels() {
  Register<OpId::kMatmul>(DeviceType::kCUDA, &MatmulCuda);
#ifdef VT_CUDA_FP8
  Register<OpId::kMatmulFp8>(DeviceType::kCUDA, &MatmulFp8Cuda);
#endif
  RegisterMatmulFp8GroupScaledKernel();
}

#else  // no cuBLASLt: neither matmul is registered (cuda.cmake says why at configure time)

bool MatmulFp8Lt(const Queue&, const Tensor&, const Tensor&, const Tensor&, float, const Tensor*) { return false; }
bool MatmulFp8ViaBf16(const Queue&, const Tensor&, const Tensor&, const Tensor&, float, const Tensor*) { return false; }
bool MatmulFp8GroupScaledLt(const Queue&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                            int64_t, int64_t, const Tensor*) {
  return false;
}
int64_t GroupScaledLtLaunches() { return 0; }
void RegisterMatmulKernels() { RegisterMatmulFp8GroupScaledKernel(); }

#endif

bool NextLaunchSerialized(const Queue& q) { return Cuda(q).serialize_next; }

}  // namespace vt::cuda
