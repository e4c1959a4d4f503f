// CPU MoE ops. The routing is one scalar definition for every ISA level (ref::MoeTopKRouting,
// tokens split across the pool). The experts run as the queue's matmul kernels over the
// chosen experts' rows of the stacked weights, so a decode step streams only those experts'
// bytes at the GEMV's rate: the (token, slot) pairs are grouped by expert, and the tokens
// of one expert go through it as one product of M = their number (x rows -> gate/up ->
// SiLU-mul -> down), so each chosen expert's weights are read once per call. Those
// products run as matmul::GemmRowsAsOne (matmul/rows.h), whose every row has the bytes of
// a product of that row alone (block / per-channel FP8: the CPU MatmulFp8GroupScaled
// kernel, whose rows are likewise), and the SiLU-mul and quantizers work row by row; so a
// token's bytes are those it gets alone (batch 1), whichever tokens share its experts and
// in whatever order. The weighted sum over a token's slots runs in f32 in slot order. On
// the scalar level the dense reference loops run instead. MoeExpertsFp8PerToken takes the
// same path with alpha 1 and applies each row's activation scale and the expert's weight
// scale to the f32 sums afterwards.
#include <algorithm>
#include <cstring>
#include <span>
#include <vector>

#include "vt/cpu/backend.h"
#include "vt/cpu/elem.h"
#include "vt/cpu/matmul/rows.h"
#include "vt/cpu/reference.h"
#include "vt/ops/activation.h"
#include "vt/ops/fused.h"
#include "vt/ops/matmul.h"
#include "vt/ops/moe.h"
#include "vt/ops/quant.h"

namespace vt::cpu {

namespace {

void MoeTopKRoutingCpu(const Queue& q, const Tensor& ids, const Tensor& weights, const Tensor& logits,
                       bool renormalize) {
  Cpu(q).pool.ParallelFor(logits.dim(0), 4, [&](int64_t t0, int64_t t1) {
    ref::MoeTopKRouting(ids, weights, logits, renormalize, t0, t1);
  });
}

// The (token, slot) pairs t * k + j ordered by expert, then token (a counting sort), after
// checking every id on the host; expert e's pairs are order[start[e]] .. order[start[e + 1] - 1].
struct PairOrder {
  std::vector<int64_t> order, start;
};
PairOrder PairsByExpert(const Tensor& ids, int64_t E, const char* op) {
  const int64_t n = ids.numel();
  const int32_t* id = ids.data_as<int32_t>();
  PairOrder po;
  po.start.assign(static_cast<size_t>(E + 1), 0);
  for (int64_t p = 0; p < n; ++p) {
    VT_CHECK(id[p] >= 0 && id[p] < E, op, ": expert id ", id[p], " (ids element ", p, ") is outside [0, ", E, ")");
    ++po.start[id[p] + 1];
  }
  for (int64_t e = 0; e < E; ++e) po.start[e + 1] += po.start[e];
  std::vector<int64_t> next(po.start.begin(), po.start.end() - 1);
  po.order.resize(static_cast<size_t>(n));
  for (int64_t p = 0; p < n; ++p) po.order[next[id[p]]++] = p;
  return po;
}

// out[t] = round_out(Σ_j weights[t, j] * y[row[t * k + j]]) in f32, j in order.
void Combine(const Queue& q, const Tensor& out, const Tensor& y, const std::vector<int64_t>& row,
             const Tensor& weights) {
  const int64_t H = out.dim(1), k = weights.dim(1);
  const float* py = y.data_as<float>();
  const float* pw = weights.data_as<float>();
  Cpu(q).pool.ParallelFor(out.dim(0), 1, [&](int64_t t0, int64_t t1) {
    std::vector<float> acc(static_cast<size_t>(H));
    for (int64_t t = t0; t < t1; ++t) {
      std::fill(acc.begin(), acc.end(), 0.0f);
      for (int64_t j = 0; j < k; ++j) {
        const float w = pw[t * k + j];
        const float* r = py + row[t * k + j] * H;
        for (int64_t h = 0; h < H; ++h) acc[h] += w * r[h];
      }
      for (int64_t h = 0; h < H; ++h) StoreFloat(out.data(), out.dtype(), t * H + h, acc[h]);
    }
  });
}

// Calls `setup(most)` with the most tokens any expert gets, then `expert(e, xs, ys, tokens)`
// once per chosen expert e: xs [n, H] holds the x rows of the n tokens routed to it (in
// token order, x's dtype), tokens[r] is row r's token, and ys [n, H] (f32) receives their
// outputs. Then the combine.
template <typename Setup, typename Expert>
void RunExperts(const Queue& q, const Tensor& out, const Tensor& x, const Tensor& ids, const Tensor& weights,
                int64_t E, const char* op, Setup setup, Expert expert) {
  const int64_t H = out.dim(1), k = ids.dim(1);
  const PairOrder po = PairsByExpert(ids, E, op);
  int64_t most = 0;
  for (int64_t e = 0; e < E; ++e) most = std::max(most, po.start[e + 1] - po.start[e]);
  if (most == 0) return Combine(q, out, Tensor::Empty({0, H}, DType::kF32), {}, weights);
  setup(most);
  const Tensor y = Tensor::Empty({ids.numel(), H}, DType::kF32);  // rows in expert order
  const Tensor xs = Tensor::Empty({most, H}, x.dtype());
  const size_t x_row = static_cast<size_t>(H) * DTypeSize(x.dtype());
  std::vector<int64_t> row(po.order.size()), tokens;
  for (int64_t e = 0; e < E; ++e) {
    const int64_t r0 = po.start[e], r1 = po.start[e + 1];
    if (r0 == r1) continue;
    tokens.clear();
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t p = po.order[r];
      row[p] = r;
      tokens.push_back(p / k);
      std::memcpy(static_cast<std::byte*>(xs.data()) + (r - r0) * x_row,
                  static_cast<const std::byte*>(x.data()) + (p / k) * x_row, x_row);
    }
    expert(e, xs.Slice(0, 0, r1 - r0), y.Slice(0, r0, r1), std::span<const int64_t>(tokens));
  }
  Combine(q, out, y, row, weights);
}

void MoeExpertsCpu(const Queue& q, const Tensor& out, const Tensor& x, const Tensor& ids, const Tensor& weights,
                   const Tensor& w_gate_up, const Tensor& w_down) {
  const int64_t T = x.dim(0), H = x.dim(1), I = w_down.dim(1), E = w_gate_up.dim(0) / (2 * I);
  if (Cpu(q).isa == CpuIsa::kScalar) {
    Cpu(q).pool.ParallelFor(T, 1, [&](int64_t t0, int64_t t1) {
      ref::MoeExperts(out, x, ids, weights, w_gate_up, w_down, t0, t1);
    });
    return;
  }
  Tensor gu, a;
  auto setup = [&](int64_t most) {
    gu = Tensor::Empty({most, 2 * I}, x.dtype());
    a = Tensor::Empty({most, I}, x.dtype());
  };
  RunExperts(q, out, x, ids, weights, E, "MoeExperts", setup,
             [&](int64_t e, const Tensor& xs, const Tensor& ys, std::span<const int64_t>) {
    const int64_t n = xs.dim(0);
    const Tensor gun = gu.Slice(0, 0, n), an = a.Slice(0, 0, n);
    matmul::GemmRowsAsOne(q, gun, xs, w_gate_up.Slice(0, e * 2 * I, (e + 1) * 2 * I), 1.0f);
    SiluMul(q, an, gun);
    matmul::GemmRowsAsOne(q, ys, an, w_down.Slice(0, e * H, (e + 1) * H), 1.0f);
  });
}

void MoeExpertsFp8Cpu(const Queue& q, const Tensor& out, const Tensor& x8, const Tensor& ids, const Tensor& weights,
                      const Tensor& w_gate_up, const Tensor& alpha_gate_up, const Tensor& w_down,
                      float down_input_scale, const Tensor& alpha_down) {
  const int64_t T = x8.dim(0), H = x8.dim(1), I = w_down.dim(1), E = w_gate_up.dim(0) / (2 * I);
  // The scalar level runs the reference, which reads the stored codes; weights laid out for
  // the AVX2 rows (bytes released) go through the product below, which reads them back.
  if (Cpu(q).isa == CpuIsa::kScalar && !w_gate_up.bytes_released() && !w_down.bytes_released()) {
    Cpu(q).pool.ParallelFor(T, 1, [&](int64_t t0, int64_t t1) {
      ref::MoeExpertsFp8(out, x8, ids, weights, w_gate_up, alpha_gate_up, w_down, down_input_scale, alpha_down, t0,
                         t1);
    });
    return;
  }
  const DType act = out.dtype();
  Tensor gu, a, a8;
  auto setup = [&](int64_t most) {
    gu = Tensor::Empty({most, 2 * I}, act);
    a = Tensor::Empty({most, I}, act);
    a8 = Tensor::Empty({most, I}, DType::kF8E4M3);
  };
  const float* al13 = alpha_gate_up.data_as<float>();
  const float* al2 = alpha_down.data_as<float>();
  RunExperts(q, out, x8, ids, weights, E, "MoeExpertsFp8", setup,
             [&](int64_t e, const Tensor& xs, const Tensor& ys, std::span<const int64_t>) {
    const int64_t n = xs.dim(0);
    const Tensor gun = gu.Slice(0, 0, n), an = a.Slice(0, 0, n), a8n = a8.Slice(0, 0, n);
    matmul::GemmRowsAsOne(q, gun, xs, w_gate_up.Slice(0, e * 2 * I, (e + 1) * 2 * I), al13[e]);
    if (act == DType::kBF16) {  // silu-mul -> BF16 -> fp8 in one recipe, byte-identical to the steps
      SiluMulQuantFp8(q, a8n, gun, down_input_scale);
    } else {
      SiluMul(q, an, gun);
      QuantFp8Static(q, a8n, an, down_input_scale);
    }
    matmul::GemmRowsAsOne(q, ys, a8n, w_down.Slice(0, e * H, (e + 1) * H), al2[e]);
  });
}

// rows[r, :] = RoundTo(out, (rows[r, :] * row_scale[r]) * scale) for F32 `rows` [n, N] of
// sums; `out` is rows itself or an [n, N] tensor of the activation dtype.
void ScaleRows(const Queue& q, const Tensor& out, const Tensor& rows, std::span<const float> row_scale, float scale) {
  const int64_t N = rows.dim(1);
  const float* in = rows.data_as<float>();
  Cpu(q).pool.ParallelFor(rows.dim(0), 1, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r)
      for (int64_t c = 0; c < N; ++c) StoreFloat(out.data(), out.dtype(), r * N + c, in[r * N + c] * row_scale[r] * scale);
  });
}

// Each expert's tokens as one product per projection (GemmRowsAsOne with alpha 1: the
// exact f32 sums of a one-row product), then the per-row and per-expert scales in the op's
// order; the SiLU-mul and the per-row quantizer run row by row, so a token's bytes are its
// batch-1 bytes here too.
void MoeExpertsFp8PerTokenCpu(const Queue& q, const Tensor& out, const Tensor& x8, const Tensor& x_scales,
                              const Tensor& ids, const Tensor& weights, const Tensor& w_gate_up,
                              const Tensor& w_scale_gate_up, const Tensor& w_down, const Tensor& w_scale_down) {
  const int64_t T = x8.dim(0), H = x8.dim(1), I = w_down.dim(1), E = w_gate_up.dim(0) / (2 * I);
  // The scalar level runs the reference, which reads the stored codes; weights laid out for
  // the AVX2 rows (bytes released) go through the product below, which reads them back.
  if (Cpu(q).isa == CpuIsa::kScalar && !w_gate_up.bytes_released() && !w_down.bytes_released()) {
    Cpu(q).pool.ParallelFor(T, 1, [&](int64_t t0, int64_t t1) {
      ref::MoeExpertsFp8PerToken(out, x8, x_scales, ids, weights, w_gate_up, w_scale_gate_up, w_down, w_scale_down,
                                 t0, t1);
    });
    return;
  }
  const DType act = out.dtype();
  Tensor sums, gu, a, a8, sa;
  std::vector<float> xs_scale;
  auto setup = [&](int64_t most) {
    sums = Tensor::Empty({most, 2 * I}, DType::kF32);
    gu = Tensor::Empty({most, 2 * I}, act);
    a = Tensor::Empty({most, I}, act);
    a8 = Tensor::Empty({most, I}, DType::kF8E4M3);
    sa = Tensor::Empty({most, 1}, DType::kF32);
  };
  const float* sx = x_scales.data_as<float>();
  const float* ws13 = w_scale_gate_up.data_as<float>();
  const float* ws2 = w_scale_down.data_as<float>();
  RunExperts(q, out, x8, ids, weights, E, "MoeExpertsFp8PerToken", setup,
             [&](int64_t e, const Tensor& xs, const Tensor& ys, std::span<const int64_t> tokens) {
    const int64_t n = xs.dim(0);
    const Tensor sn = sums.Slice(0, 0, n), gun = gu.Slice(0, 0, n), an = a.Slice(0, 0, n), a8n = a8.Slice(0, 0, n),
                 san = sa.Slice(0, 0, n);
    xs_scale.resize(static_cast<size_t>(n));
    for (int64_t r = 0; r < n; ++r) xs_scale[r] = sx[tokens[r]];
    matmul::GemmRowsAsOne(q, sn, xs, w_gate_up.Slice(0, e * 2 * I, (e + 1) * 2 * I), 1.0f);
    ScaleRows(q, gun, sn, xs_scale, ws13[e]);
    SiluMul(q, an, gun);
    QuantFp8PerTokenGroup(q, a8n, san, an, I, 0.0f, kFp8PerTokenScaleFloor);
    matmul::GemmRowsAsOne(q, ys, a8n, w_down.Slice(0, e * H, (e + 1) * H), 1.0f);
    ScaleRows(q, ys, ys, std::span<const float>(san.data_as<float>(), static_cast<size_t>(n)), ws2[e]);
  });
}

// Block / per-channel FP8 experts: each expert's tokens go through the CPU
// MatmulFp8GroupScaled kernel as one product per projection (its rows do not depend on the
// other rows, matmul/fp8_group_scaled.cpp), so each chosen expert's weights are read once
// per call and a token's bytes are its batch-1 bytes. The expert's gate and up rows are one
// product where I is a multiple of block_n (their scale rows then follow each other as one
// projection's would), else two, each with its own scale rows, copied into place. The
// SiLU-mul and the per-token-group quantizer work row by row.
void MoeExpertsFp8GroupScaledCpu(const Queue& q, const Tensor& out, const Tensor& x8, const Tensor& x_scales,
                                 const Tensor& ids, const Tensor& weights, const Tensor& w_gate_up,
                                 const Tensor& s_gate_up, const Tensor& w_down, const Tensor& s_down, int64_t block_n,
                                 int64_t block_k, float amax_floor, float scale_floor) {
  const int64_t T = x8.dim(0), H = x8.dim(1), I = w_down.dim(1), E = w_gate_up.dim(0) / (2 * I);
  // The scalar level runs the reference, which reads the stored codes; weights laid out for
  // the AVX2 rows (bytes released) go through the product below, which reads them back.
  if (Cpu(q).isa == CpuIsa::kScalar && !w_gate_up.bytes_released() && !w_down.bytes_released()) {
    Cpu(q).pool.ParallelFor(T, 1, [&](int64_t t0, int64_t t1) {
      ref::MoeExpertsFp8GroupScaled(out, x8, x_scales, ids, weights, w_gate_up, s_gate_up, w_down, s_down, block_n,
                                    block_k, amax_floor, scale_floor, t0, t1);
    });
    return;
  }
  const int64_t nI = (I + block_n - 1) / block_n, nH = (H + block_n - 1) / block_n;
  const int64_t GH = x_scales.dim(1), GI = s_down.dim(1);
  const DType act = out.dtype();
  const bool merged = I % block_n == 0;
  const auto gemm = Kernel<OpId::kMatmulFp8GroupScaled>(DeviceType::kCPU);
  Tensor xsc, gu, g, u, a, a8, sa;
  auto setup = [&](int64_t most) {
    xsc = Tensor::Empty({most, GH}, DType::kF32);
    gu = Tensor::Empty({most, 2 * I}, act);
    if (!merged) {
      g = Tensor::Empty({most, I}, act);
      u = Tensor::Empty({most, I}, act);
    }
    a = Tensor::Empty({most, I}, act);
    a8 = Tensor::Empty({most, I}, DType::kF8E4M3);
    sa = Tensor::Empty({most, GI}, DType::kF32);
  };
  const float* sx = x_scales.data_as<float>();
  RunExperts(q, out, x8, ids, weights, E, "MoeExpertsFp8GroupScaled", setup,
             [&](int64_t e, const Tensor& xs, const Tensor& ys, std::span<const int64_t> tokens) {
    const int64_t n = xs.dim(0);
    const Tensor gun = gu.Slice(0, 0, n), an = a.Slice(0, 0, n), a8n = a8.Slice(0, 0, n), san = sa.Slice(0, 0, n);
    const Tensor xscn = xsc.Slice(0, 0, n);
    for (int64_t r = 0; r < n; ++r)
      std::memcpy(xsc.data_as<float>() + r * GH, sx + tokens[r] * GH, static_cast<size_t>(GH) * sizeof(float));
    if (merged) {
      gemm(q, gun, xs, xscn, w_gate_up.Slice(0, e * 2 * I, (e + 1) * 2 * I),
           s_gate_up.Slice(0, e * 2 * nI, (e + 1) * 2 * nI), block_n, block_k, nullptr);
    } else {
      const Tensor gn = g.Slice(0, 0, n), un = u.Slice(0, 0, n);
      gemm(q, gn, xs, xscn, w_gate_up.Slice(0, e * 2 * I, e * 2 * I + I),
           s_gate_up.Slice(0, e * 2 * nI, e * 2 * nI + nI), block_n, block_k, nullptr);
      gemm(q, un, xs, xscn, w_gate_up.Slice(0, e * 2 * I + I, (e + 1) * 2 * I),
           s_gate_up.Slice(0, e * 2 * nI + nI, (e + 1) * 2 * nI), block_n, block_k, nullptr);
      const size_t half = static_cast<size_t>(I) * DTypeSize(act);
      for (int64_t r = 0; r < n; ++r) {  // each row: its gate outputs, then its up outputs
        auto* dst = static_cast<std::byte*>(gun.data()) + 2 * r * half;
        std::memcpy(dst, static_cast<const std::byte*>(gn.data()) + r * half, half);
        std::memcpy(dst + half, static_cast<const std::byte*>(un.data()) + r * half, half);
      }
    }
    SiluMul(q, an, gun);
    QuantFp8PerTokenGroup(q, a8n, san, an, block_k, amax_floor, scale_floor);
    gemm(q, ys, a8n, san, w_down.Slice(0, e * H, (e + 1) * H), s_down.Slice(0, e * nH, (e + 1) * nH), block_n,
         block_k, nullptr);
  });
}

}  // namespace

void RegisterMoeKernels() {
  Register<OpId::kMoeTopKRouting>(DeviceType::kCPU, &MoeTopKRoutingCpu);
  Register<OpId::kMoeExperts>(DeviceType::kCPU, &MoeExpertsCpu);
  Register<OpId::kMoeExpertsFp8>(DeviceType::kCPU, &MoeExpertsFp8Cpu);
  Register<OpId::kMoeExpertsFp8PerToken>(DeviceType::kCPU, &MoeExpertsFp8PerTokenCpu);
  Register<OpId::kMoeExpertsFp8GroupScaled>(DeviceType::kCPU, &MoeExpertsFp8GroupScaledCpu);
}

}  // namespace vt::cpu
