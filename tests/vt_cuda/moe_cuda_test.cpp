// The CUDA MoE ops (src/vt/cuda/moe.cu) beyond the op table's cases: routing at the routers'
// shapes (128 to 512 experts) and past the register kernel's limits, byte for byte with the
// CPU kernel; and an expert id outside [0, E), which the kernel cannot throw for
// (no host synchronization inside the op), recorded and reported at the next
// synchronization by name; and which kernel the FP8 expert ops ran: the down GEMV
// (moe_gemv.cuh) for up to 16 tokens, the tensor-core tiles (moe_tiled.cu) beyond, each
// against the CPU's reference at the Qwen3-30B-A3B width and with 128 narrow experts (the
// op table's shapes are too narrow for the tiles and take the per-pair kernels).
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <map>
#include <random>
#include <string>
#include <tuple>
#include <utility>

#include "cuda_test_util.h"
#include "vt/cuda/kernels.h"
#include "vt/detail/numerics.h"
#include "vt/ops/moe.h"

namespace {

using vt::DType;

// Routing at the routers' shapes (Qwen3-30B-A3B 128 experts top 8, Qwen3.5-MoE 256 top 8,
// Qwen3-Next 512 top 10) and past the register kernel's limits (600 experts; 40 picks), over
// more tokens than one CTA holds, with a row of ties: byte for byte
// the CPU's, on the register kernel where it applies (counted) and, with it switched off, on
// the shared-memory kernel.
TEST(CudaMoe, RoutingEqualsCpuBytes) {
  VT_REQUIRE_CUDA();
  struct Shape {
    int64_t T, E, k;
    bool registers;
  };
  const Shape shapes[] = {{37, 128, 8, true}, {9, 256, 8, true}, {6, 512, 10, true}, {5, 600, 8, false},
                          {5, 60, 40, false}, {7, 20, 3, true}};
  vt::Queue cpu = vt::Queue::Cpu(2), gpu = vt::Queue::Cuda(0);
  uint32_t seed = 11;
  for (const Shape& sh : shapes)
    for (const char* reg : {"1", "0"}) {
      const int64_t T = sh.T, E = sh.E, k = sh.k;
      std::mt19937 rng(++seed);
      std::normal_distribution<float> nd(0.0f, 3.0f);
      std::vector<float> l(static_cast<size_t>(T * E));
      for (auto& v : l) v = nd(rng);
      for (int64_t i = 0; i < E; i += 3) l[1 * E + i] = l[1 * E];  // a row of ties
      const vt::Tensor logits = vt::Tensor::FromHost(l.data(), {T, E}, DType::kF32);
      setenv("VT_CUDA_MOE_REG_ROUTING", reg, 1);
      for (bool renorm : {true, false}) {
        const std::string what = vt::StrCat(T, "x", E, " k=", k, " registers=", reg, " renormalize=", renorm);
        const vt::Tensor ids_c = vt::Tensor::Empty({T, k}, DType::kI32), w_c = vt::Tensor::Empty({T, k}, DType::kF32);
        vt::MoeTopKRouting(cpu, ids_c, w_c, logits, renorm);
        const vt::Tensor ids_g = vt::Tensor::Empty({T, k}, DType::kI32, vtt::kCuda);
        const vt::Tensor w_g = vt::Tensor::Empty({T, k}, DType::kF32, vtt::kCuda);
        const int64_t before = vt::DispatchCount(vt::OpId::kMoeTopKRouting, vt::DeviceType::kCUDA);
        const int64_t reg_before = vt::cuda::MoeRoutingRegisterLaunches();
        vt::MoeTopKRouting(gpu, ids_g, w_g, logits.To(vtt::kCuda), renorm);
        EXPECT_GT(vt::DispatchCount(vt::OpId::kMoeTopKRouting, vt::DeviceType::kCUDA), before) << what;
        EXPECT_EQ(vt::cuda::MoeRoutingRegisterLaunches() - reg_before, sh.registers && reg[0] == '1' ? 1 : 0) << what;
        EXPECT_TRUE(vtt::SameBytes(ids_g, ids_c)) << what;
        EXPECT_TRUE(vtt::SameBytes(w_g, w_c)) << what;
      }
      unsetenv("VT_CUDA_MOE_REG_ROUTING");
    }
}

TEST(CudaMoe, ExpertIdOutsideRangeIsReported) {
  VT_REQUIRE_CUDA();
  constexpr int64_t T = 2, H = 16, I = 8, E = 4, k = 2;
  vt::Queue gpu = vt::Queue::Cuda(0);
  const std::vector<float> zeros(static_cast<size_t>(E * 2 * I * H), 0.0f);
  const vt::Tensor x = vtt::HostTensor(std::vector<float>(T * H, 1.0f), DType::kBF16, {T, H}).To(vtt::kCuda);
  const vt::Tensor w13 = vtt::HostTensor(zeros, DType::kBF16, {E * 2 * I, H}).To(vtt::kCuda);
  const vt::Tensor w2 =
      vtt::HostTensor(std::vector<float>(E * H * I, 0.0f), DType::kBF16, {E * H, I}).To(vtt::kCuda);
  const std::vector<int32_t> ids = {0, 1, 2, 9};
  const std::vector<float> w = {0.5f, 0.5f, 0.5f, 0.5f};
  const vt::Tensor out = vt::Tensor::Empty({T, H}, DType::kBF16, vtt::kCuda);
  try {
    vt::MoeExperts(gpu, out, x, vt::Tensor::FromHost(ids.data(), {T, k}, DType::kI32, vtt::kCuda),
                   vt::Tensor::FromHost(w.data(), {T, k}, DType::kF32, vtt::kCuda), w13, w2);
    gpu.Synchronize();
    ADD_FAILURE() << "expert id 9 of 4 accepted";
  } catch (const vt::Error& e) {
    EXPECT_NE(std::string(e.what()).find("expert id 9 (ids element 3) is outside [0, 4)"), std::string::npos)
        << e.what();
  }
  EXPECT_NO_THROW(gpu.Synchronize());  // reported once; the queue keeps serving
}

// FP8 codes of N(0, 1) values.
vt::Tensor Fp8Codes(const vt::Shape& shape, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  vt::Tensor t = vt::Tensor::Empty(shape, DType::kF8E4M3);
  for (int64_t i = 0; i < t.numel(); ++i) t.data_as<uint8_t>()[i] = vt::numerics::QuantizeFp8(nd(rng), 1.0f);
  return t;
}

struct Fp8MoeCase {
  int64_t T, H, I, E;
  DType out;
  bool per_token = false;  // MoeExpertsFp8PerToken (scales per token and pair) instead of MoeExpertsFp8
};

// MoeExpertsFp8 (or MoeExpertsFp8PerToken) on the GPU against the CPU, and which kernels
// ran: the down GEMV up to 16 tokens, the tensor-core tiles (moe_tiled.cu) beyond.
void RunFp8Moe(const Fp8MoeCase& c, std::mt19937& rng) {
  constexpr int64_t k = 8;
  const int64_t T = c.T, H = c.H, I = c.I, E = c.E;
  // The experts of a shape, made once: most cases share the 30B-A3B width, and drawing 57 M
  // codes a case took most of the test's time.
  static std::map<std::tuple<int64_t, int64_t, int64_t>, std::pair<vt::Tensor, vt::Tensor>> experts;
  auto [it, fresh] = experts.try_emplace({E, H, I});
  if (fresh) it->second = {Fp8Codes({E * 2 * I, H}, 3), Fp8Codes({E * H, I}, 4)};
  const vt::Tensor& w13 = it->second.first;
  const vt::Tensor& w2 = it->second.second;
  std::vector<float> al13, al2;
  for (int64_t e = 0; e < E; ++e) {
    // gate/up sums near N(0, 1), activations in e4m3fn's normal range (scale 0.05)
    al13.push_back((1.0f + 0.1f * float(e % 16)) / std::sqrt(float(H)));
    al2.push_back((1.0f + 0.05f * float(e % 16)) / std::sqrt(float(I)));
  }
  const vt::Tensor a13 = vt::Tensor::FromHost(al13.data(), {E}, DType::kF32);
  const vt::Tensor a2 = vt::Tensor::FromHost(al2.data(), {E}, DType::kF32);
  vt::Queue cpu = vt::Queue::Cpu(2), gpu = vt::Queue::Cuda(0);
  const vt::Tensor x8 = Fp8Codes({T, H}, 10 + static_cast<uint32_t>(T));
  std::vector<int32_t> ids;
  std::vector<float> w;
  // Experts drawn unevenly (the low ids more often), so some get several tiles of pairs,
  // a padded last tile, and some none.
  std::geometric_distribution<int32_t> skew(4.0 / double(E));
  for (int64_t t = 0; t < T; ++t) {
    std::vector<int32_t> mine;
    for (int tries = 0; tries < 64 && static_cast<int64_t>(mine.size()) < k; ++tries) {
      const int32_t e = std::min<int32_t>(skew(rng), static_cast<int32_t>(E - 1));
      if (std::find(mine.begin(), mine.end(), e) == mine.end()) mine.push_back(e);
    }
    for (int32_t e = 0; static_cast<int64_t>(mine.size()) < k; ++e)
      if (std::find(mine.begin(), mine.end(), e) == mine.end()) mine.push_back(e);
    std::shuffle(mine.begin(), mine.end(), rng);
    for (int64_t j = 0; j < k; ++j) {
      ids.push_back(mine[j]);
      w.push_back(std::uniform_real_distribution<float>(0.05f, 0.3f)(rng));
    }
  }
  const vt::Tensor ids_t = vt::Tensor::FromHost(ids.data(), {T, k}, DType::kI32);
  const vt::Tensor w_t = vt::Tensor::FromHost(w.data(), {T, k}, DType::kF32);
  std::vector<float> sx;
  for (int64_t t = 0; t < T; ++t) sx.push_back(std::uniform_real_distribution<float>(0.5f, 2.0f)(rng));
  const vt::Tensor x_scales = vt::Tensor::FromHost(sx.data(), {T, 1}, DType::kF32);
  const vt::Tensor want = vt::Tensor::Empty({T, H}, c.out);
  if (c.per_token)
    vt::MoeExpertsFp8PerToken(cpu, want, x8, x_scales, ids_t, w_t, w13, a13, w2, a2);
  else
    vt::MoeExpertsFp8(cpu, want, x8, ids_t, w_t, w13, a13, w2, 0.05f, a2);
  const vt::Tensor got = vt::Tensor::Empty({T, H}, c.out, vtt::kCuda);
  const int64_t gemv0 = vt::cuda::MoeGemvLaunches(), tiled0 = vt::cuda::MoeTiledLaunches();
  if (c.per_token)
    vt::MoeExpertsFp8PerToken(gpu, got, x8.To(vtt::kCuda), x_scales.To(vtt::kCuda), ids_t.To(vtt::kCuda),
                              w_t.To(vtt::kCuda), w13.To(vtt::kCuda), a13.To(vtt::kCuda), w2.To(vtt::kCuda),
                              a2.To(vtt::kCuda));
  else
    vt::MoeExpertsFp8(gpu, got, x8.To(vtt::kCuda), ids_t.To(vtt::kCuda), w_t.To(vtt::kCuda), w13.To(vtt::kCuda),
                      a13.To(vtt::kCuda), w2.To(vtt::kCuda), 0.05f, a2.To(vtt::kCuda));
  const std::string what = std::to_string(T) + " tokens, " + std::to_string(E) + " experts, out " +
                           std::string(vt::DTypeName(c.out)) + (c.per_token ? ", per token" : ", static");
  EXPECT_EQ(vt::cuda::MoeGemvLaunches() - gemv0, T <= 16 ? 1 : 0) << what;
  EXPECT_EQ(vt::cuda::MoeTiledLaunches() - tiled0, T <= 16 ? 0 : 1) << what;
  const std::vector<float> g = vtt::Floats(got), wf = vtt::Floats(want);
  double max_want = 0.0, max_diff = 0.0;
  for (size_t i = 0; i < g.size(); ++i) {
    max_want = std::max(max_want, std::fabs(double(wf[i])));
    max_diff = std::max(max_diff, std::fabs(double(g[i]) - double(wf[i])));
  }
  // An activation one e4m3fn step off moves an output by 2^-3 of one of its k·I terms: far
  // below 2^-6 of the largest output; a wrong row, slot, tile or scale is not.
  EXPECT_GT(max_want, 0.0) << what;
  EXPECT_LE(max_diff, 0x1p-6 * max_want) << what;
}

TEST(CudaMoe, Fp8CallsRunTheDownGemvOrTheTiles) {
  VT_REQUIRE_CUDA();
  std::mt19937 rng(5);
  // The Qwen3-30B-A3B width (H 2048, I 768) with 12 experts; then 128 narrow experts, most
  // of them with a tile of one or two pairs; static scales, then per token and pair.
  for (const Fp8MoeCase& c : {Fp8MoeCase{1, 2048, 768, 12, DType::kF32}, Fp8MoeCase{16, 2048, 768, 12, DType::kF32},
                              Fp8MoeCase{17, 2048, 768, 12, DType::kF32}, Fp8MoeCase{300, 2048, 768, 12, DType::kF32},
                              Fp8MoeCase{300, 2048, 768, 12, DType::kBF16}, Fp8MoeCase{40, 256, 128, 128, DType::kBF16},
                              Fp8MoeCase{16, 2048, 768, 12, DType::kF32, true},
                              Fp8MoeCase{300, 2048, 768, 12, DType::kF32, true},
                              Fp8MoeCase{40, 256, 128, 128, DType::kBF16, true}})
    RunFp8Moe(c, rng);
}

// MoeExperts on BF16 experts past 16 tokens: the tensor-core tiles (moe_tiled.cu), against
// the CPU; 16 tokens keep the per-pair kernels.
TEST(CudaMoe, Bf16CallsPast16TokensRunTheTiles) {
  VT_REQUIRE_CUDA();
  constexpr int64_t H = 512, I = 256, E = 16, k = 4;
  const std::vector<float> w13f = vtt::Normal(static_cast<size_t>(E * 2 * I * H), 21, 1.0f / std::sqrt(float(H)));
  const std::vector<float> w2f = vtt::Normal(static_cast<size_t>(E * H * I), 22, 1.0f / std::sqrt(float(I)));
  const vt::Tensor w13 = vtt::HostTensor(w13f, DType::kBF16, {E * 2 * I, H});
  const vt::Tensor w2 = vtt::HostTensor(w2f, DType::kBF16, {E * H, I});
  const vt::Tensor w13_g = w13.To(vtt::kCuda), w2_g = w2.To(vtt::kCuda);
  vt::Queue cpu = vt::Queue::Cpu(2), gpu = vt::Queue::Cuda(0);
  std::mt19937 rng(9);
  for (int64_t T : {16, 17, 200}) {
    const vt::Tensor x = vtt::HostTensor(vtt::Normal(static_cast<size_t>(T * H), 30 + static_cast<uint32_t>(T)),
                                         DType::kBF16, {T, H});
    std::vector<int32_t> ids;
    std::vector<float> w;
    for (int64_t t = 0; t < T; ++t) {
      std::vector<int32_t> all(E);
      std::vector<float> key(E);
      for (int64_t e = 0; e < E; ++e) {
        all[e] = static_cast<int32_t>(e);
        key[e] = float(e) * std::uniform_real_distribution<float>(0.3f, 1.0f)(rng);
      }
      // the first experts more often: several tiles for some, one or none for others
      std::partial_sort(all.begin(), all.begin() + k, all.end(), [&](int32_t a, int32_t b) { return key[a] < key[b]; });
      for (int64_t j = 0; j < k; ++j) {
        ids.push_back(all[j]);
        w.push_back(std::uniform_real_distribution<float>(0.1f, 0.4f)(rng));
      }
    }
    const vt::Tensor ids_t = vt::Tensor::FromHost(ids.data(), {T, k}, DType::kI32);
    const vt::Tensor w_t = vt::Tensor::FromHost(w.data(), {T, k}, DType::kF32);
    const vt::Tensor want = vt::Tensor::Empty({T, H}, DType::kBF16);
    vt::MoeExperts(cpu, want, x, ids_t, w_t, w13, w2);
    const vt::Tensor got = vt::Tensor::Empty({T, H}, DType::kBF16, vtt::kCuda);
    const int64_t tiled0 = vt::cuda::MoeTiledLaunches();
    vt::MoeExperts(gpu, got, x.To(vtt::kCuda), ids_t.To(vtt::kCuda), w_t.To(vtt::kCuda), w13_g, w2_g);
    EXPECT_EQ(vt::cuda::MoeTiledLaunches() - tiled0, T > 16 ? 1 : 0) << T << " tokens";
    const std::vector<float> g = vtt::Floats(got), wf = vtt::Floats(want);
    double max_want = 0.0, max_diff = 0.0;
    for (size_t i = 0; i < g.size(); ++i) {
      max_want = std::max(max_want, std::fabs(double(wf[i])));
      max_diff = std::max(max_diff, std::fabs(double(g[i]) - double(wf[i])));
    }
    // g, u and the activation are rounded to BF16 as on the CPU; another summation order
    // moves a rounding by one BF16 step (2^-8) of one term: far below 2^-6 of the largest
    // output; a wrong row, slot, tile or expert is not.
    EXPECT_GT(max_want, 0.0);
    EXPECT_LE(max_diff, 0x1p-6 * max_want) << T << " tokens";
  }
}

}  // namespace
