// CUDA SiluMul and SigmoidGatedAdd: element-wise, with the CPU kernels' arithmetic (numerics::Silu and the
// dtype conversions of vt/dtype.h), so the bytes match.
#include <atomic>

#include "vt/cuda/device_util.cuh"
#include "vt/cuda/kernels.h"
#include "vt/cuda/rows.h"
#include "vt/ops/activation.h"

namespace vt::cuda {

namespace {

__global__ void SiluMulKernel(void* out, DType od, const void* x, DType xd, int64_t rows, int64_t I, uint8_t* q,
                              float q_inv) {
  PdlWait();
  const int64_t n = rows * I;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < n; e += stride) {
    const int64_t r = e / I, i = e - r * I;
    const float g = LoadAny(x, xd, r * 2 * I + i);
    const float u = LoadAny(x, xd, r * 2 * I + I + i);
    const float y = numerics::Silu(g) * u;
    if (out != nullptr) StoreAny(out, od, e, y);
    if (q != nullptr) q[e] = QuantizeFp8KeepNan(RoundAny(od, y), q_inv);
  }
}

// SiluMulKernel over 8-element vectors: 16-bit x (and out) whose rows are whole 16-byte
// vectors starting aligned; one row/column split per vector (in 32-bit arithmetic when
// the vector count allows) instead of a 64-bit division per element. Same arithmetic.
template <typename Index>
__global__ void SiluMulVecKernel(void* out, DType od, const void* x, DType xd, Index vecs, Index row_vecs,
                                 uint8_t* q, float q_inv) {
  PdlWait();
  const Index stride = static_cast<Index>(gridDim.x) * blockDim.x;
  const auto* xv = static_cast<const uint4*>(x);
  for (Index e = static_cast<Index>(blockIdx.x) * blockDim.x + threadIdx.x; e < vecs; e += stride) {
    const Index r = e / row_vecs, i = e - r * row_vecs;
    float g[8], u[8], y[8];
    Unpack8(xv[static_cast<int64_t>(r) * 2 * row_vecs + i], xd, g);
    Unpack8(xv[static_cast<int64_t>(r) * 2 * row_vecs + row_vecs + i], xd, u);
#pragma unroll
    for (int k = 0; k < 8; ++k) y[k] = numerics::Silu(g[k]) * u[k];
    if (out != nullptr) static_cast<uint4*>(out)[e] = Pack8(y, od);
    if (q != nullptr) reinterpret_cast<uint2*>(q)[e] = QuantizePack8(y, od, q_inv);
  }
}

std::atomic<int64_t> g_silu_vec_launches{0};
constexpr int64_t kSiluVecMinElements = int64_t{1} << 17;

void SiluMulCuda(const Queue& q, const Tensor& out, const Tensor& x) {
  const int64_t I = out.dim(-1);
  LaunchSiluMul(Cuda(q), out.data(), out.dtype(), x.data(), x.dtype(), I == 0 ? 0 : out.numel() / I, I, nullptr,
                0.0f);
}

__global__ void SigmoidGatedAddKernel(void* out, const void* x, DType xd, const void* gate, DType gd, int64_t G,
                                      const void* base, int64_t R, int64_t C) {
  PdlWait();
  const int64_t n = R * C;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < n; e += stride) {
    const int64_t r = e / C, c = e - r * C;
    const float g = LoadAny(gate, gd, r * G + (G == 1 ? 0 : c));
    const float s = 1.0f / (1.0f + numerics::Exp(-g));
    const float b = base != nullptr ? LoadAny(base, xd, e) : 0.0f;
    StoreAny(out, xd, e, b + s * LoadAny(x, xd, e));
  }
}

void SigmoidGatedAddCuda(const Queue& q, const Tensor& out, const Tensor& x, const Tensor& gate, const Tensor* base) {
  const int64_t R = x.dim(0), C = x.dim(1);
  if (R * C == 0) return;
  CudaQueue& cq = Cuda(q);
  DeviceGuard guard(cq.device.index);
  LaunchOverlapped(cq, "SigmoidGatedAddKernel", SigmoidGatedAddKernel, GridFor(R * C, 256, cq), 256, 0, out.data(),
                   x.data(), x.dtype(), gate.data(), gate.dtype(), gate.dim(1),
                   base != nullptr ? base->data() : nullptr, R, C);
}

}  // namespace

void LaunchSiluMul(CudaQueue& cq, void* out, DType od, const void* x, DType xd, int64_t rows, int64_t I, uint8_t* q,
                   float q_inv) {
  if (rows * I == 0) return;
  DeviceGuard guard(cq.device.index);
  // Vectors from 131072 elements: below that (a decode step of a few rows) the scalar
  // kernel's wider grid measured faster (bench/README.md).
  if (VecRowsOn() && rows * I >= kSiluVecMinElements && Is16Bit(xd) && (out == nullptr || Is16Bit(od)) &&
      I % 8 == 0 && AlignedTo(x, 16) &&
      (out == nullptr || AlignedTo(out, 16)) && (q == nullptr || AlignedTo(q, 8))) {
    g_silu_vec_launches.fetch_add(1, std::memory_order_relaxed);
    const int64_t vecs = rows * I / 8;
    const unsigned grid = GridFor(vecs, 256, cq);
    if (2 * vecs < (int64_t{1} << 31))  // the input's vector index too
      LaunchOverlapped(cq, "SiluMulVecKernel", SiluMulVecKernel<uint32_t>, grid, 256, 0, out, od, x, xd,
                       static_cast<uint32_t>(vecs), static_cast<uint32_t>(I / 8), q, q_inv);
    else
      LaunchOverlapped(cq, "SiluMulVecKernel", SiluMulVecKernel<int64_t>, grid, 256, 0, out, od, x, xd, vecs, I / 8,
                       q, q_inv);
    return;
  }
  LaunchOverlapped(cq, "SiluMulKernel", SiluMulKernel, GridFor(rows * I, 256, cq), 256, 0, out, od, x, xd, rows, I, q,
                   q_inv);
}

int64_t SiluMulVecLaunches() { return g_silu_vec_launches.load(std::memory_order_relaxed); }

void RegisterActivationKernels() {
  Register<OpId::kSiluMul>(DeviceType::kCUDA, &SiluMulCuda);
  Register<OpId::kSigmoidGatedAdd>(DeviceType::kCUDA, &SigmoidGatedAddCuda);
}

}  // namespace vt::cuda
