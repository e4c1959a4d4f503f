// QuantFp8Static and the fused recipes (RmsNormQuantFp8, RmsNormGatedQuantFp8,
// SiluMulQuantFp8, and their per-token-group forms at groups of 128) per CPU ISA level and thread count, in bytes of input per second, next
// to the same work as two ops (the norm or activation to BF16, then QuantFp8Static: what
// the fusion saves) and to a plain read of the same bytes (the machine's limit for a
// streaming kernel, measured in the same run).
//
//   quant_bench --benchmark_min_time=0.2 --benchmark_repetitions=5 --benchmark_report_aggregates_only
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <string>
#include <random>
#include <vector>

#include "vt/vt.h"

namespace {

constexpr int64_t kBytes = 8 << 20;  // a few MB: past L2, like a prefill activation

vt::Tensor Input(vt::DType dtype) {
  const int64_t n = kBytes / static_cast<int64_t>(vt::DTypeSize(dtype));
  std::vector<float> v(n);
  std::mt19937 rng(1);
  std::normal_distribution<float> nd(0.0f, 2.0f);
  for (float& f : v) f = nd(rng);
  vt::Tensor t = vt::Tensor::Empty({n}, dtype);
  for (int64_t i = 0; i < n; ++i) {
    if (dtype == vt::DType::kF32) t.data_as<float>()[i] = v[i];
    else t.data_as<uint16_t>()[i] = vt::FloatToBf16(v[i]);
  }
  return t;
}

// args: isa level, threads, dtype (0 = F32, 1 = BF16)
void BM_QuantFp8Static(benchmark::State& state) {
  const auto isa = static_cast<vt::CpuIsa>(state.range(0));
  if (isa > vt::DetectCpuIsa()) return state.SkipWithError("ISA not available on this CPU");
  vt::Queue q = vt::Queue::Cpu(static_cast<int>(state.range(1)), isa);
  const vt::Tensor x = Input(state.range(2) ? vt::DType::kBF16 : vt::DType::kF32);
  vt::Tensor out = vt::Tensor::Empty(x.shape(), vt::DType::kF8E4M3);
  for (auto _ : state) {
    vt::QuantFp8Static(q, out, x, 0.0137f);
    benchmark::DoNotOptimize(out.data());
  }
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(x.nbytes()));
  state.SetLabel(std::string(vt::CpuIsaName(isa)) + (state.range(2) ? " bf16" : " f32"));
}

// The decoder-layer shape of the row benchmarks below: BF16 [R, 4096] over kBytes.
constexpr int64_t kWidth = 4096;
// The per-token-group recipes' groups (block FP8: groups of 128 with its floors).
constexpr int64_t kGroup = 128;

vt::Tensor OnesBf16(int64_t n) {
  vt::Tensor w = vt::Tensor::Empty({n}, vt::DType::kBF16);
  for (int64_t i = 0; i < n; ++i) w.data_as<uint16_t>()[i] = vt::FloatToBf16(1.0f);
  return w;
}

// The operands of a row recipe over kBytes of BF16 input: x [R, kWidth] with a second input
// of its shape (the residual or the gate) and the norm weight of ones, or for SiLU-mul x
// [R, 2 * kWidth] = [gate | up]; the FP8 output [R, kWidth], its scales per group of kGroup,
// and the BF16 intermediate [R, kWidth] of the two-op form (the normed_out side output).
struct RowOperands {
  vt::Tensor x, x2, w, out, scales, mid;
};
RowOperands MakeRowOperands(bool silu_mul) {
  const int64_t in_width = silu_mul ? 2 * kWidth : kWidth, R = kBytes / 2 / in_width;
  RowOperands o;
  o.x = Input(vt::DType::kBF16).View({R, in_width});
  if (!silu_mul) {
    o.x2 = Input(vt::DType::kBF16).View({R, kWidth});
    o.w = OnesBf16(kWidth);
  }
  o.out = vt::Tensor::Empty({R, kWidth}, vt::DType::kF8E4M3);
  o.scales = vt::Tensor::Empty({R, kWidth / kGroup}, vt::DType::kF32);
  o.mid = vt::Tensor::Empty({R, kWidth}, vt::DType::kBF16);
  return o;
}

// args: isa level, threads. BF16 [rows, 4096] with residual and side output, as a decoder layer.
void BM_RmsNormQuantFp8(benchmark::State& state) {
  const auto isa = static_cast<vt::CpuIsa>(state.range(0));
  if (isa > vt::DetectCpuIsa()) return state.SkipWithError("ISA not available on this CPU");
  vt::Queue q = vt::Queue::Cpu(static_cast<int>(state.range(1)), isa);
  const RowOperands o = MakeRowOperands(false);
  for (auto _ : state) {
    vt::RmsNormQuantFp8(q, o.out, o.x, o.w, 1e-6f, 0.0137f, &o.x2, &o.mid);
    benchmark::DoNotOptimize(o.out.data());
  }
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(o.x.nbytes()));
  state.SetLabel(vt::CpuIsaName(isa));
}

// The loop of the fused-recipe benchmarks (args: isa level, threads, fused (1) or as two
// ops (0)): make(q) sets the operands up and returns {fused call, two-op call, input bytes
// per call}.
struct Recipe {
  std::function<void()> fused, two_ops;
  int64_t bytes;
};
void RunRecipe(benchmark::State& state, const std::function<Recipe(const vt::Queue&)>& make) {
  const auto isa = static_cast<vt::CpuIsa>(state.range(0));
  if (isa > vt::DetectCpuIsa()) return state.SkipWithError("ISA not available on this CPU");
  const vt::Queue q = vt::Queue::Cpu(static_cast<int>(state.range(1)), isa);
  const bool fused = state.range(2) != 0;
  const Recipe r = make(q);
  for (auto _ : state) (fused ? r.fused : r.two_ops)();
  state.SetBytesProcessed(state.iterations() * r.bytes);
  state.SetLabel(std::string(vt::CpuIsaName(isa)) + (fused ? " fused" : " two ops"));
}

// RmsNorm with residual, then quantization.
void BM_RmsNormThenQuant(benchmark::State& state) {
  RunRecipe(state, [](const vt::Queue& q) {
    const RowOperands o = MakeRowOperands(false);
    return Recipe{[=] { vt::RmsNormQuantFp8(q, o.out, o.x, o.w, 1e-6f, 0.0137f, &o.x2); },
                  [=] {
                    vt::RmsNorm(q, o.mid, o.x, o.w, 1e-6f, &o.x2);
                    vt::QuantFp8Static(q, o.out, o.mid, 0.0137f);
                  },
                  static_cast<int64_t>(o.x.nbytes())};
  });
}

void BM_RmsNormGatedQuantFp8(benchmark::State& state) {
  RunRecipe(state, [](const vt::Queue& q) {
    const RowOperands o = MakeRowOperands(false);
    return Recipe{[=] { vt::RmsNormGatedQuantFp8(q, o.out, o.x, o.x2, o.w, 1e-6f, 0.0137f); },
                  [=] {
                    vt::RmsNormGated(q, o.mid, o.x, o.x2, o.w, 1e-6f);
                    vt::QuantFp8Static(q, o.out, o.mid, 0.0137f);
                  },
                  static_cast<int64_t>(o.x.nbytes() + o.x2.nbytes())};
  });
}

// x is [R, 2 * 4096] = [gate | up].
void BM_SiluMulQuantFp8(benchmark::State& state) {
  RunRecipe(state, [](const vt::Queue& q) {
    const RowOperands o = MakeRowOperands(true);
    return Recipe{[=] { vt::SiluMulQuantFp8(q, o.out, o.x, 0.0137f); },
                  [=] {
                    vt::SiluMul(q, o.mid, o.x);
                    vt::QuantFp8Static(q, o.out, o.mid, 0.0137f);
                  },
                  static_cast<int64_t>(o.x.nbytes())};
  });
}

// The per-token-group recipes, fused and as two ops (the norm or activation to BF16, then
// QuantFp8PerTokenGroup).
void BM_RmsNormThenGroupQuant(benchmark::State& state) {
  RunRecipe(state, [](const vt::Queue& q) {
    const RowOperands o = MakeRowOperands(false);
    return Recipe{[=] {
                    vt::RmsNormQuantFp8PerTokenGroup(q, o.out, o.scales, o.x, o.w, 1e-6f, kGroup,
                                                     vt::kFp8BlockAmaxFloor, 0.0f, &o.x2);
                  },
                  [=] {
                    vt::RmsNorm(q, o.mid, o.x, o.w, 1e-6f, &o.x2);
                    vt::QuantFp8PerTokenGroup(q, o.out, o.scales, o.mid, kGroup, vt::kFp8BlockAmaxFloor, 0.0f);
                  },
                  static_cast<int64_t>(o.x.nbytes())};
  });
}

void BM_RmsNormGatedGroupQuant(benchmark::State& state) {
  RunRecipe(state, [](const vt::Queue& q) {
    const RowOperands o = MakeRowOperands(false);
    return Recipe{[=] {
                    vt::RmsNormGatedQuantFp8PerTokenGroup(q, o.out, o.scales, o.x, o.x2, o.w, 1e-6f, kGroup,
                                                          vt::kFp8BlockAmaxFloor, 0.0f);
                  },
                  [=] {
                    vt::RmsNormGated(q, o.mid, o.x, o.x2, o.w, 1e-6f);
                    vt::QuantFp8PerTokenGroup(q, o.out, o.scales, o.mid, kGroup, vt::kFp8BlockAmaxFloor, 0.0f);
                  },
                  static_cast<int64_t>(o.x.nbytes() + o.x2.nbytes())};
  });
}

void BM_SiluMulGroupQuant(benchmark::State& state) {
  RunRecipe(state, [](const vt::Queue& q) {
    const RowOperands o = MakeRowOperands(true);
    return Recipe{[=] {
                    vt::SiluMulQuantFp8PerTokenGroup(q, o.out, o.scales, o.x, kGroup, vt::kFp8BlockAmaxFloor, 0.0f);
                  },
                  [=] {
                    vt::SiluMul(q, o.mid, o.x);
                    vt::QuantFp8PerTokenGroup(q, o.out, o.scales, o.mid, kGroup, vt::kFp8BlockAmaxFloor, 0.0f);
                  },
                  static_cast<int64_t>(o.x.nbytes())};
  });
}

// Reading the same number of bytes, summed as 64-bit integers on `threads` threads.
void BM_ReadBandwidth(benchmark::State& state) {
  vt::Queue q = vt::Queue::Cpu(static_cast<int>(state.range(0)));
  const vt::Tensor x = Input(vt::DType::kF32);
  const auto* p = static_cast<const uint64_t*>(x.data());
  const int64_t n = kBytes / 8;
  std::vector<uint64_t> sums(64);
  for (auto _ : state) {
    q.ParallelFor(n, 1 << 16, [&](int64_t b, int64_t e) {
      uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
      int64_t i = b;
      for (; i + 4 <= e; i += 4) {
        s0 += p[i];
        s1 += p[i + 1];
        s2 += p[i + 2];
        s3 += p[i + 3];
      }
      for (; i < e; ++i) s0 += p[i];
      sums[static_cast<size_t>(b >> 16) % sums.size()] = s0 + s1 + s2 + s3;
    });
    benchmark::DoNotOptimize(sums.data());
  }
  state.SetBytesProcessed(state.iterations() * kBytes);
}

void QuantArgs(benchmark::internal::Benchmark* b) {
  for (int dtype : {0, 1})
    for (int isa : {0, 1, 2})
      for (int threads : {1, 2}) b->Args({isa, threads, dtype});
}

BENCHMARK(BM_ReadBandwidth)->Arg(1)->Arg(2)->UseRealTime();
BENCHMARK(BM_QuantFp8Static)->Apply(QuantArgs)->UseRealTime();
BENCHMARK(BM_RmsNormQuantFp8)->Args({0, 1})->Args({2, 1})->Args({2, 2})->UseRealTime();

// The best vector level (avx512 where present, else what the processor has), 2 threads,
// fused and as two ops; scalar once for scale.
void FusedArgs(benchmark::internal::Benchmark* b) {
  const int best = std::min(static_cast<int>(vt::DetectCpuIsa()), 2);
  b->Args({0, 2, 1});
  for (int fused : {1, 0}) b->Args({best, 2, fused});
}
BENCHMARK(BM_RmsNormThenQuant)->Apply(FusedArgs)->UseRealTime();
BENCHMARK(BM_RmsNormGatedQuantFp8)->Apply(FusedArgs)->UseRealTime();
BENCHMARK(BM_SiluMulQuantFp8)->Apply(FusedArgs)->UseRealTime();
BENCHMARK(BM_RmsNormThenGroupQuant)->Apply(FusedArgs)->UseRealTime();
BENCHMARK(BM_RmsNormGatedGroupQuant)->Apply(FusedArgs)->UseRealTime();
BENCHMARK(BM_SiluMulGroupQuant)->Apply(FusedArgs)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
