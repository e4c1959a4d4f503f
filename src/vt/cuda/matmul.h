// The CUDA matmul kernels behind OpId::kMatmulFp8 and OpId::kMatmul, exposed so tests and
// benchmarks can run each variant on its own. No CUDA headers here.
#pragma once

#include <cstdint>

#include "vt/queue.h"
#include "vt/tensor.h"

namespace vt::cuda {

// MatmulFp8 uses cuBLASLt for M > kSmallMMax and K >= kLtMinK, and the split-K streaming
// kernel otherwise (it measured faster than MatmulFp8Small on every benchmarked shape) (and when cuBLASLt has no algorithm for the shape). Below kLtMinK cuBLASLt's
// FP8 tensor-core accumulation (about 13 mantissa bits per partial sum on sm_90) exceeds the
// DESIGN bound 4·K·FLT_EPSILON·Σ|a·b|, measured on the H200; from 2048 up it stays inside.
// At M = 4 the streaming kernel was measured at half of cuBLASLt's speed, hence 1.
inline constexpr int64_t kSmallMMax = 1;
inline constexpr int64_t kLtMinK = 2048;

// out = alpha * a·bᵀ (+ bias) by the small-M kernel: 16-byte streaming loads of b, f32
// accumulation, any M (tiles of up to 8 rows). Needs K % 16 == 0 and 16-byte aligned a and
// b; otherwise runs MatmulFp8Naive. Arguments as validated by vt::MatmulFp8.
void MatmulFp8Small(const Queue& q, const Tensor& out, const Tensor& a, const Tensor& b, float alpha,
                    const Tensor* bias);
// The same product by the block-split-K streaming kernel (matmul_fp8_splitk.cu): a CTA per
// group of weight rows, its 256 threads splitting K; same requirements and fallback.
void MatmulFp8SplitK(const Queue& q, const Tensor& out, const Tensor& a, const Tensor& b, float alpha,
                     const Tensor* bias);
// One thread per output, f32 accumulation in k order: the named baseline.
void MatmulFp8Naive(const Queue& q, const Tensor& out, const Tensor& a, const Tensor& b, float alpha,
                    const Tensor* bias);
// By cuBLASLt FP8 (e4m3 x e4m3, f32 accumulation without fast accumulation); returns false,
// having done nothing, when cuBLASLt offers no algorithm for this shape and alignment.
bool MatmulFp8Lt(const Queue& q, const Tensor& out, const Tensor& a, const Tensor& b, float alpha,
                 const Tensor* bias);

// Launchers in matmul_fp8.cu used by the cuBLASLt paths (pointers on the queue's device).
// out[m, n] = round_out(tmp[m, n] + bias[n]) (bias nullable); tmp may alias out when F32.
void LaunchBiasEpilogue(const Queue& q, void* out, DType od, const float* tmp, const void* bias, DType bd, int64_t M,
                        int64_t N);
// Generic f32 matmul of float dtypes, one thread per output (fallback for Matmul).
void LaunchMatmulNaive(const Queue& q, void* out, DType od, const void* a, DType ad, const void* b, DType bd,
                       const void* bias, DType biasd, int64_t M, int64_t N, int64_t K);

}  // namespace vt::cuda
