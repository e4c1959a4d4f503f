// CPU MoE ops. The routing is one scalar definition for every ISA level (ref::MoeTopKRouting,
// tokens split across the pool). The experts run as the queue's matmul kernels over the
// chosen experts' rows of the stacked weights, so a decode step streams only those experts'
// bytes at the GEMV's rate: the (token, slot) pairs are ordered by expert, and each pair is
// one product of M = 1 (x row -> gate/up -> SiLU-mul -> down), so a token's bytes never
// depend on which other tokens share its experts. The weighted sum over a token's slots
// runs in f32 in slot order. On the scalar level the dense reference loops run instead.
#include <vector>

#include "vt/cpu/backend.h"
#include "vt/cpu/elem.h"
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
// checking every id on the host.
std::vector<int64_t> PairsByExpert(const Tensor& ids, int64_t E, const char* op) {
  const int64_t n = ids.numel();
  const int32_t* id = ids.data_as<int32_t>();
  std::vector<int64_t> start(static_cast<size_t>(E + 1), 0);
  for (int64_t p = 0; p < n; ++p) {
    VT_CHECK(id[p] >= 0 && id[p] < E, op, ": expert id ", id[p], " (ids element ", p, ") is outside [0, ", E, ")");
    ++start[id[p] + 1];
  }
  for (int64_t e = 0; e < E; ++e) start[e + 1] += start[e];
  std::vector<int64_t> order(static_cast<size_t>(n));
  for (int64_t p = 0; p < n; ++p) order[start[id[p]]++] = p;
  return order;
}

// out[t] = round_out(Σ_j weights[t, j] * y[t * k + j]) in f32, j in order.
void Combine(const Queue& q, const Tensor& out, const Tensor& y, const Tensor& weights) {
  const int64_t H = out.dim(1), k = weights.dim(1);
  const float* py = y.data_as<float>();
  const float* pw = weights.data_as<float>();
  Cpu(q).pool.ParallelFor(out.dim(0), 1, [&](int64_t t0, int64_t t1) {
    std::vector<float> acc(static_cast<size_t>(H));
    for (int64_t t = t0; t < t1; ++t) {
      std::fill(acc.begin(), acc.end(), 0.0f);
      for (int64_t j = 0; j < k; ++j) {
        const float w = pw[t * k + j];
        const float* row = py + (t * k + j) * H;
        for (int64_t h = 0; h < H; ++h) acc[h] += w * row[h];
      }
      for (int64_t h = 0; h < H; ++h) StoreFloat(out.data(), out.dtype(), t * H + h, acc[h]);
    }
  });
}

// Runs `pair(p, e, y_row)` for every (token, slot) pair p in expert order, then the combine.
template <typename Pair>
void RunPairs(const Queue& q, const Tensor& out, const Tensor& ids, const Tensor& weights, int64_t E, const char* op,
              Pair pair) {
  const int64_t H = out.dim(1);
  const std::vector<int64_t> order = PairsByExpert(ids, E, op);
  const Tensor y = Tensor::Empty({ids.numel(), H}, DType::kF32);
  const int32_t* id = ids.data_as<int32_t>();
  for (int64_t p : order) pair(p, static_cast<int64_t>(id[p]), y.Slice(0, p, p + 1));
  Combine(q, out, y, weights);
}

void MoeExpertsCpu(const Queue& q, const Tensor& out, const Tensor& x, const Tensor& ids, const Tensor& weights,
                   const Tensor& w_gate_up, const Tensor& w_down) {
  const int64_t T = x.dim(0), H = x.dim(1), k = ids.dim(1), I = w_down.dim(1), E = w_gate_up.dim(0) / (2 * I);
  if (Cpu(q).isa == CpuIsa::kScalar) {
    Cpu(q).pool.ParallelFor(T, 1, [&](int64_t t0, int64_t t1) {
      ref::MoeExperts(out, x, ids, weights, w_gate_up, w_down, t0, t1);
    });
    return;
  }
  const Tensor gu = Tensor::Empty({1, 2 * I}, x.dtype()), a = Tensor::Empty({1, I}, x.dtype());
  RunPairs(q, out, ids, weights, E, "MoeExperts", [&](int64_t p, int64_t e, const Tensor& y) {
    const int64_t t = p / k;
    Matmul(q, gu, x.Slice(0, t, t + 1), w_gate_up.Slice(0, e * 2 * I, (e + 1) * 2 * I));
    SiluMul(q, a, gu);
    Matmul(q, y, a, w_down.Slice(0, e * H, (e + 1) * H));
  });
}

void MoeExpertsFp8Cpu(const Queue& q, const Tensor& out, const Tensor& x8, const Tensor& ids, const Tensor& weights,
                      const Tensor& w_gate_up, const Tensor& alpha_gate_up, const Tensor& w_down,
                      float down_input_scale, const Tensor& alpha_down) {
  const int64_t T = x8.dim(0), H = x8.dim(1), k = ids.dim(1), I = w_down.dim(1), E = w_gate_up.dim(0) / (2 * I);
  if (Cpu(q).isa == CpuIsa::kScalar) {
    Cpu(q).pool.ParallelFor(T, 1, [&](int64_t t0, int64_t t1) {
      ref::MoeExpertsFp8(out, x8, ids, weights, w_gate_up, alpha_gate_up, w_down, down_input_scale, alpha_down, t0,
                         t1);
    });
    return;
  }
  const DType act = out.dtype();
  const Tensor gu = Tensor::Empty({1, 2 * I}, act), a = Tensor::Empty({1, I}, act);
  const Tensor a8 = Tensor::Empty({1, I}, DType::kF8E4M3);
  const float* al13 = alpha_gate_up.data_as<float>();
  const float* al2 = alpha_down.data_as<float>();
  RunPairs(q, out, ids, weights, E, "MoeExpertsFp8", [&](int64_t p, int64_t e, const Tensor& y) {
    const int64_t t = p / k;
    MatmulFp8(q, gu, x8.Slice(0, t, t + 1), w_gate_up.Slice(0, e * 2 * I, (e + 1) * 2 * I), al13[e]);
    if (act == DType::kBF16) {  // silu-mul -> BF16 -> fp8 in one recipe, byte-identical to the steps
      SiluMulQuantFp8(q, a8, gu, down_input_scale);
    } else {
      SiluMul(q, a, gu);
      QuantFp8Static(q, a8, a, down_input_scale);
    }
    MatmulFp8(q, y, a8, w_down.Slice(0, e * H, (e + 1) * H), al2[e]);
  });
}

}  // namespace

void RegisterMoeKernels() {
  Register<OpId::kMoeTopKRouting>(DeviceType::kCPU, &MoeTopKRoutingCpu);
  Register<OpId::kMoeExperts>(DeviceType::kCPU, &MoeExpertsCpu);
  Register<OpId::kMoeExpertsFp8>(DeviceType::kCPU, &MoeExpertsFp8Cpu);
}

}  // namespace vt::cpu
