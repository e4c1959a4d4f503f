// The CUDA matmul kernels behind OpId::kMatmulFp8 and OpId::kMatmul, exposed so tests and
// benchmarks can run each variant on its own. No CUDA headers here.
#pragma once

#include <cstdint>
#include <string>

#include "vt/queue.h"
#include "vt/tensor.h"

namespace vt::cuda {

// MatmulFp8 uses cuBLASLt for M > kSmallMMax and K >= kLtMinK; for M = 1 and
// kGemvMinK <= K <= kGemvMaxK the persistent GEMV kernel; otherwise (and when cuBLASLt has
// no algorithm for the shape) the split-K streaming kernel, which is faster than
// MatmulFp8Small on the benchmarked shapes. Below kLtMinK cuBLASLt's FP8 tensor-core
// accumulation (about 13 mantissa bits per partial sum on sm_90) exceeds the DESIGN bound
// 4·K·FLT_EPSILON·Σ|a·b|; from 2048 up it stays inside. kSmallMMax is 1 because already at
// a few rows of a cuBLASLt's tensor cores outrun the streaming kernel.
// bench/kernel_notes.md has the measurements behind these constants.
inline constexpr int64_t kSmallMMax = 1;
inline constexpr int64_t kLtMinK = 2048;
// The block-scaled FP8 GEMM of cuBLASLt (MatmulFp8GroupScaledLt) scales each 128-column
// block's sum in f32, but inside a block its tensor-core sum has the same ~13 mantissa bits:
// against the bound 4·K·FLT_EPSILON·Σ|a·b| that is twice over at K = 128 (measured on an
// H100: 176 of 1,280 outputs of a 4 x 256 x 128 product) and inside it from K = 512 up
// (0.3-0.8 of the bound at K = 768..3072 on the H100 and the H200).
inline constexpr int64_t kLtBlocksMinK = 512;
inline constexpr int64_t kViaBf16MinM = 16;
// The GEMV kernel's CTA (64 to 768 threads) splits K in 16-byte vectors, 1 or 2 each.
inline constexpr int64_t kGemvMinK = 1024;
inline constexpr int64_t kGemvMaxK = 16384;

// out = alpha * a·bᵀ (+ bias) by the small-M kernel: 16-byte streaming loads of b, f32
// accumulation, any M (tiles of up to 8 rows). Needs K % 16 == 0 and 16-byte aligned a and
// b; otherwise runs MatmulFp8Naive. Arguments as validated by vt::MatmulFp8.
void MatmulFp8Small(const Queue& q, const Tensor& out, const Tensor& a, const Tensor& b, float alpha,
                    const Tensor* bias);
// The same product by the block-split-K streaming kernel (matmul_fp8_splitk.cu): a CTA per
// group of weight rows, its 256 threads splitting K; same requirements and fallback.
void MatmulFp8SplitK(const Queue& q, const Tensor& out, const Tensor& a, const Tensor& b, float alpha,
                     const Tensor* bias);
// The same product for M = 1 by the persistent GEMV kernel (matmul_gemv.cu): one wave
// of CTAs, each streaming an equal contiguous share of weight rows with the next group's
// loads in flight while the current one is reduced. Runs MatmulFp8SplitK when !GemvFits.
void MatmulFp8Gemv(const Queue& q, const Tensor& out, const Tensor& a, const Tensor& b, float alpha,
                   const Tensor* bias);
// M = 1, kGemvMinK <= K <= kGemvMaxK, K % 16 == 0, a and b 16-byte aligned.
bool GemvFits(const Tensor& a, const Tensor& b);
// BF16 Matmul (vt::Matmul of BF16 a and b) for M = 1 by the same kernel, rows of 8-value
// vectors: Matmul takes it instead of cuBLASLt when Bf16GemvFits (M = 1, both BF16,
// kBf16GemvMinK <= K <= kBf16GemvMaxK, K % 8 == 0, 16-byte aligned, out F32 or BF16; not
// with VT_CUDA_BF16_GEMV=0). f32 accumulation in a fixed order, optional bias.
inline constexpr int64_t kBf16GemvMinK = 512;
inline constexpr int64_t kBf16GemvMaxK = 8192;
bool Bf16GemvFits(const Tensor& out, const Tensor& a, const Tensor& b);

// MatmulFp8SiluMulQuantFp8 of one row by the GEMV: each CTA takes gate rows i and their up
// rows I + i together, writes the two products rounded to BF16 into gate_up and code i of
// SiluMulQuantFp8 of them into out8 (the products are the GEMV's, so the bytes equal
// MatmulFp8 into BF16 and SiluMulQuantFp8 in sequence). Needs GemvFits(x8, w_gate_up).
bool SiluGemvFits(const Tensor& x8, const Tensor& w_gate_up);
void MatmulFp8GemvSiluMulQuant(const Queue& q, const Tensor& out8, const Tensor& gate_up, const Tensor& x8,
                               const Tensor& w_gate_up, float alpha, float input_scale);
int64_t SiluMulQuantGemvLaunches();
void MatmulBf16Gemv(const Queue& q, const Tensor& out, const Tensor& a, const Tensor& b, const Tensor* bias);
// How many products MatmulBf16Gemv ran (all queues): lets tests prove which kernel ran.
int64_t Bf16GemvLaunches();
// How the GEMV kernel is launched.
//  - overlap: as a programmatic dependent launch (sm_90+): the kernel lets the next kernel
//    in the stream launch at once, and waits for the previous kernel's completion
//    (griddepcontrol.wait) before it reads a or writes out. false: an ordinary launch.
//  - l2_prefetch (with overlap): before that wait each CTA prefetches this many bytes (at
//    least one group of rows) of its weight share into L2; L2 is coherent, so a weight the
//    previous kernel writes is still read correctly.
//  - early_weight_loads (with overlap): before that wait each CTA loads its first group of
//    weight rows into registers. Only for a weight that no kernel still running can write:
//    MatmulFp8Gemv does it exactly when b.read_only() (Tensor::SetReadOnly).
// The defaults: an overlapped launch with a 16 KiB L2 prefetch for a writable weight, so
// its stream starts warm in L2 during the previous kernel's tail; early loads for a
// read-only one, which start the stream in registers instead. bench/kernel_notes.md has
// the measurements of each mode.
struct GemvLaunch {
  bool overlap = false;
  uint32_t l2_prefetch = 0;
  bool early_weight_loads = false;
};
inline constexpr GemvLaunch kGemvDefaultLaunch{true, 16 << 10, false};
inline constexpr GemvLaunch kGemvReadOnlyLaunch{true, 0, true};
// MatmulFp8Gemv's launch for weight b: kGemvReadOnlyLaunch when b is read-only.
GemvLaunch GemvLaunchFor(const Tensor& b);
// How many GEMV launches so far loaded weights before the previous kernel finished (all
// queues, all devices): lets tests prove which launch ran.
int64_t GemvEarlyLoadLaunches();

// The GEMV kernel's instantiated tunings (threads per CTA, vectors per thread and row,
// rows per group), for benchmarks and tests: variant -1 is MatmulFp8Gemv's choice for
// [N, K]. Returns false, having done nothing, when the variant cannot cover K.
int GemvVariantCount();
std::string GemvVariantName(int variant);
int64_t GemvVariantMaxK(int variant);  // the longest row the variant covers
bool MatmulFp8GemvVariant(const Queue& q, const Tensor& out, const Tensor& a, const Tensor& b, float alpha,
                          const Tensor* bias, int variant, GemvLaunch how);
// One thread per output, f32 accumulation in k order: the named baseline.
void MatmulFp8Naive(const Queue& q, const Tensor& out, const Tensor& a, const Tensor& b, float alpha,
                    const Tensor* bias);
// By cuBLASLt BF16 with f32 accumulation after widening a and b to BF16 (exact): for
// M >= kViaBf16MinM and K < kLtMinK, where cuBLASLt FP8 breaks the DESIGN bound and the
// streaming kernels, which read the weight once per 8 rows of a, fall far behind (0.6B
// gate_up at M = 4096: split-K took 8.6 ms). Returns false, having done nothing but the
// casts, when cuBLASLt offers no algorithm.
bool MatmulFp8ViaBf16(const Queue& q, const Tensor& out, const Tensor& a, const Tensor& b, float alpha,
                      const Tensor* bias);
// By cuBLASLt FP8 (e4m3 x e4m3, f32 accumulation without fast accumulation); returns false,
// having done nothing, when cuBLASLt offers no algorithm for this shape and alignment.
bool MatmulFp8Lt(const Queue& q, const Tensor& out, const Tensor& a, const Tensor& b, float alpha,
                 const Tensor* bias);

// MatmulFp8GroupScaled of one row by the GEMV kernel: each 16-byte vector's products summed,
// times its group's scales (a's and its weight row block's), added to the row's sum. Needs
// GemvFits(a, b), block_n a power of two and block_k a multiple of 16 (or >= K).
bool GroupScaledGemvFits(const Tensor& a, const Tensor& b, int64_t block_n, int64_t block_k);
void MatmulFp8GroupScaledGemv(const Queue& q, const Tensor& out, const Tensor& a, const Tensor& a_scales,
                              const Tensor& b, const Tensor& b_scales, int64_t block_n, int64_t block_k,
                              const Tensor* bias);
// MatmulFp8GroupScaled by cuBLASLt's scaled FP8 GEMM (sm_90, f32 accumulation, no fast
// accumulation): 128 x 128 weight blocks with 1 x 128 activation groups, N and K whole
// blocks, K >= kLtBlocksMinK (CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F / VEC128_32F), or per-channel weights with
// per-token activations (OUTER_VEC_32F, K >= kLtMinK as the static path). Returns false,
// having done nothing, for other layouts or when cuBLASLt offers no algorithm.
bool MatmulFp8GroupScaledLt(const Queue& q, const Tensor& out, const Tensor& a, const Tensor& a_scales,
                            const Tensor& b, const Tensor& b_scales, int64_t block_n, int64_t block_k,
                            const Tensor* bias);
// The one-warp-per-output kernel (any shape): the named baseline.
void MatmulFp8GroupScaledNaive(const Queue& q, const Tensor& out, const Tensor& a, const Tensor& a_scales,
                               const Tensor& b, const Tensor& b_scales, int64_t block_n, int64_t block_k,
                               const Tensor* bias);
// Whether the next kernel launch on q is serialized rather than overlapped (set by the
// scaled cuBLASLt path, cleared by the next launch; CudaQueue::serialize_next says why).
bool NextLaunchSerialized(const Queue& q);
// How many products each path ran (all queues): lets tests prove which kernel ran.
int64_t GroupScaledGemvLaunches();
int64_t GroupScaledLtLaunches();
// Registers MatmulFp8GroupScaled (matmul_fp8_group_scaled.cu); called by RegisterMatmulKernels.
void RegisterMatmulFp8GroupScaledKernel();

// Launchers in matmul_fp8.cu used by the cuBLASLt paths (pointers on the queue's device).
// out[m, n] = round_out(tmp[m, n] + bias[n]) (bias nullable); tmp may alias out when F32.
void LaunchBiasEpilogue(const Queue& q, void* out, DType od, const float* tmp, const void* bias, DType bd, int64_t M,
                        int64_t N);
// dst[i·ds0 + j·ds1] = src[i·ss0 + j·ss1] for i < rows, j < cols (matmul_fp8_group_scaled.cu).
void LaunchCopy2d(const Queue& q, float* dst, int64_t ds0, int64_t ds1, const float* src, int64_t ss0, int64_t ss1,
                  int64_t rows, int64_t cols);
// dst[i] = BF16 of the e4m3 code src[i] (exact), i < n; n % 16 == 0, both 16-byte aligned.
void LaunchFp8ToBf16(const Queue& q, void* dst, const void* src, int64_t n);
// Generic f32 matmul of float dtypes, one thread per output (fallback for Matmul).
void LaunchMatmulNaive(const Queue& q, void* out, DType od, const void* a, DType ad, const void* b, DType bd,
                       const void* bias, DType biasd, int64_t M, int64_t N, int64_t K);

}  // namespace vt::cuda
