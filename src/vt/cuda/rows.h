// Launchers of the row kernels (norm.cu, activation.cu), shared by the standalone ops and
// the fused recipes (fused.cpp). With q != nullptr a launcher also quantizes its BF16 result
// (out's dtype must then be BF16; out may be nullptr when the BF16 tensor is not wanted),
// exactly as QuantFp8Static would from that BF16 tensor, in the same pass.
#pragma once

#include <cstdint>

#include "vt/cuda/context.h"
#include "vt/dtype.h"

namespace vt::cuda {

// RmsNorm over rows of width H; residual (nullable, x's dtype) is added first and updated.
// zero_centred: RmsNormZeroCentred's element, (s * inv) * (1 + w).
void LaunchRmsNorm(CudaQueue& cq, void* out, DType od, const void* x, DType xd, const void* w, DType wd,
                   void* residual, int64_t rows, int64_t H, float eps, uint8_t* q, float q_inv,
                   bool zero_centred = false);
// Gated RmsNorm: round(round(round(x * inv) * w) * Silu(gate)).
void LaunchRmsNormGated(CudaQueue& cq, void* out, DType od, const void* x, DType xd, const void* gate, DType gd,
                        const void* w, DType wd, int64_t rows, int64_t H, float eps, uint8_t* q, float q_inv);
// x: [rows, 2I] = [gate | up] -> out [rows, I] = round(Silu(gate) * up).
void LaunchSiluMul(CudaQueue& cq, void* out, DType od, const void* x, DType xd, int64_t rows, int64_t I, uint8_t* q,
                   float q_inv);

}  // namespace vt::cuda
