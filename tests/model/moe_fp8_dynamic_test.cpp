// Block FP8 (`quant_method: fp8`, weight_block_size, dynamic activations: the Qwen3-*-A3B-FP8
// releases) and compressed-tensors per-channel/per-token FP8 routed experts, on the CPU. The
// test quantizes qwen3-moe-tiny (H = 64, I = 48, 8 experts, top 2; layers 1 and 3 sparse) in
// each format, every projection but the routers' and lm_head, with block sizes that end
// partway through I (so an expert's gate and up rows keep separate scale rows) or H, and
// checks: layer 1's sparse block against a float64 emulation of the format computed here from
// the stored fp8 bytes and scales (router in float64, x and each SiLU-mul row quantized per
// token and group with the format's floors, the e4m3 grid by enumeration), independent of the
// vt op; a token's bytes alone and in a batch; the whole model's loading and what it runs;
// tensor parallelism; and the load errors for a missing, mis-shaped, zero or NaN scale.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <memory>
#include <numeric>
#include <random>

#include "checkpoint_edit.h"
#include "fp8_block_quantize.h"
#include "moe_fp8_dynamic_copy.h"
#include "fp8_reference_forward.h"
#include "loader_test_util.h"
#include "model/checkpoint.h"
#include "model/config.h"
#include "model/layers/moe.h"
#include "model/model.h"
#include "model/quant_config.h"
#include "model_oracle.h"
#include "vt/registry.h"
#include "vt/vt.h"

namespace vtllm::model {
namespace {

const std::string kMoe = std::string(VTLLM_FIXTURES_DIR) + "/models/qwen3-moe-tiny";

using testing::MoeFp8Format;
using Format = testing::MoeFp8Format;
using testing::QuantizedMoeCopy;
using testing::ScaleEdit;

std::string QuantizedCopy(const testing::TempDir& tmp, const Format& f, const ScaleEdit& edit = {},
                          bool bf16_scales = false) {
  return QuantizedMoeCopy(kMoe, tmp, f, edit, bf16_scales);
}

std::string Expert(int64_t layer, int64_t e, const char* proj) {
  return "model.layers." + std::to_string(layer) + ".mlp.experts." + std::to_string(e) + "." + proj;
}

// The format's activation quantization of one row, group by group: codes' values times scale.
std::vector<double> QuantizeRow(const std::vector<double>& x, int64_t G, const Format& f) {
  std::vector<double> q(x.size());
  const int64_t K = static_cast<int64_t>(x.size());
  for (int64_t c0 = 0; c0 < K; c0 += G) {
    const int64_t c1 = std::min(K, c0 + G);
    float amax = 0.0f;
    for (int64_t c = c0; c < c1; ++c) amax = std::max(amax, std::fabs(static_cast<float>(x[c])));
    const float s = f.block() ? std::max(amax, 1e-10f) / 448.0f
                              : std::max(amax / 448.0f, static_cast<float>(1.0 / (448.0 * 512.0)));
    for (int64_t c = c0; c < c1; ++c)
      q[c] = testing::E4m3(static_cast<float>(static_cast<float>(x[c]) / s)) * double(s);
  }
  return q;
}

// One weight dequantized as stored: code times its (row block, column group) scale.
std::vector<double> Dequantized(const Checkpoint& c, const std::string& prefix, const Format& f) {
  const vt::Tensor w = c.Get(prefix + ".weight");
  const vt::Tensor s = c.Get(prefix + (f.block() ? ".weight_scale_inv" : ".weight_scale"));
  const int64_t N = w.dim(0), K = w.dim(1), bn = f.block() ? f.bn : 1, bk = f.block() ? f.bk : K;
  const int64_t kb = s.dim(1);
  std::vector<double> v(static_cast<size_t>(N * K));
  for (int64_t r = 0; r < N; ++r)
    for (int64_t k = 0; k < K; ++k) {
      const int64_t si = (r / bn) * kb + k / bk;
      const double sc = s.dtype() == vt::DType::kF32 ? s.data_as<float>()[si] : vt::Bf16ToFloat(s.data_as<uint16_t>()[si]);
      v[r * K + k] = testing::E4m3Decode(w.data_as<uint8_t>()[r * K + k]) * sc;
    }
  return v;
}

// Expert e of a fused block-FP8 layer dequantized as stored: gate_up_proj [E, 2I, H] with
// gate_up_proj_scale_inv [E, ceil(2I/bn), ceil(H/bk)] over the merged rows (row n reads block
// n / bn, so up row i reads block (I + i) / bn), down_proj likewise.
void FusedDequantized(const Checkpoint& c, int64_t layer, int64_t e, const Format& f, int64_t I,
                      std::vector<double>& wg, std::vector<double>& wu, std::vector<double>& wd) {
  const std::string p = "model.layers." + std::to_string(layer) + ".mlp.experts.";
  auto deq = [&](const std::string& name, std::vector<double>& lo, std::vector<double>* hi) {
    const vt::Tensor w = c.Get(p + name), s = c.Get(p + name + "_scale_inv");
    const int64_t N = w.dim(1), K = w.dim(2), nb = s.dim(1), kb = s.dim(2);
    for (int64_t r = 0; r < N; ++r)
      for (int64_t k = 0; k < K; ++k) {
        const double v = testing::E4m3Decode(w.data_as<uint8_t>()[(e * N + r) * K + k]) *
                         s.data_as<float>()[(e * nb + r / f.bn) * kb + k / f.bk];
        (hi != nullptr && r >= I ? *hi : lo).push_back(v);
      }
  };
  deq("gate_up_proj", wg, &wu);
  deq("down_proj", wd, nullptr);
}

// Layer `layer`'s MoE MLP of x [T, H] in float64 from the stored bytes (F32 activations: g,
// u and Silu(g)·u rounded to f32 as the op rounds them). mag: Σ_j |w_j| Σ_i |a_i · w_down[h, i]|.
void LayerRef(const Checkpoint& c, const ModelConfig& cfg, const Format& f, int64_t layer, const std::vector<float>& x,
              int64_t T, std::vector<double>& out, std::vector<double>& mag) {
  const int64_t H = cfg.hidden_size, E = cfg.num_experts, k = cfg.num_experts_per_tok, I = cfg.moe_intermediate_size;
  const vt::Tensor gate = c.Get("model.layers." + std::to_string(layer) + ".mlp.gate.weight");
  std::vector<std::vector<double>> wg(E), wu(E), wd(E);
  const bool fused = c.Has("model.layers." + std::to_string(layer) + ".mlp.experts.gate_up_proj");
  for (int64_t e = 0; e < E; ++e) {
    if (fused) {
      FusedDequantized(c, layer, e, f, I, wg[e], wu[e], wd[e]);
      continue;
    }
    wg[e] = Dequantized(c, Expert(layer, e, "gate_proj"), f);
    wu[e] = Dequantized(c, Expert(layer, e, "up_proj"), f);
    wd[e] = Dequantized(c, Expert(layer, e, "down_proj"), f);
  }
  const int64_t Gh = f.block() ? f.bk : H, Gi = f.block() ? f.bk : I;
  out.assign(static_cast<size_t>(T * H), 0.0);
  mag.assign(out.size(), 0.0);
  for (int64_t t = 0; t < T; ++t) {
    std::vector<double> xt(x.begin() + t * H, x.begin() + (t + 1) * H), p(E);
    double mx = -1e300, sum = 0;
    for (int64_t e = 0; e < E; ++e) {
      double l = 0;
      for (int64_t h = 0; h < H; ++h) l += xt[h] * vt::Bf16ToFloat(gate.data_as<uint16_t>()[e * H + h]);
      p[e] = l;
      mx = std::max(mx, l);
    }
    for (double& v : p) sum += (v = std::exp(v - mx));
    for (double& v : p) v /= sum;
    std::vector<int64_t> order(E);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return p[a] > p[b]; });
    double top = 0;
    for (int64_t j = 0; j < k; ++j) top += p[order[j]];
    const std::vector<double> xq = QuantizeRow(xt, Gh, f);
    for (int64_t j = 0; j < k; ++j) {
      const int64_t e = order[j];
      const double w = cfg.norm_topk_prob ? p[e] / top : p[e];
      std::vector<double> a(I);
      for (int64_t i = 0; i < I; ++i) {
        double g = 0, u = 0;
        for (int64_t h = 0; h < H; ++h) {
          g += xq[h] * wg[e][i * H + h];
          u += xq[h] * wu[e][i * H + h];
        }
        const float gf = static_cast<float>(g), uf = static_cast<float>(u);
        a[i] = static_cast<float>(gf / (1.0 + std::exp(-double(gf))) * uf);
      }
      const std::vector<double> aq = QuantizeRow(a, Gi, f);
      for (int64_t h = 0; h < H; ++h) {
        double s = 0, m = 0;
        for (int64_t i = 0; i < I; ++i) {
          s += aq[i] * wd[e][h * I + i];
          m += std::fabs(a[i] * wd[e][h * I + i]);
        }
        out[t * H + h] += w * s;
        mag[t * H + h] += w * m;
      }
    }
  }
}

struct Layer {
  ModelConfig cfg;
  QuantConfig quant;
  Checkpoint ckpt;
  SparseMoeBlock moe;
};
std::unique_ptr<Layer> LoadLayer(const std::string& dir, const vt::Queue& q, int64_t layer,
                                 const TensorParallel& tp = {}) {
  auto l = std::unique_ptr<Layer>(
      new Layer{ModelConfig::FromDir(dir), QuantConfig::FromDir(dir), Checkpoint::Open(dir), {}});
  LinearContext lc{&l->ckpt, &l->quant, vt::Device::Cpu(), &q};
  const ModelConfig& cfg = l->cfg;
  l->moe = SparseMoeBlock::Load(
      lc, "model.layers." + std::to_string(layer) + ".mlp.",
      {cfg.hidden_size, cfg.moe_intermediate_size, cfg.num_experts, cfg.num_experts_per_tok, cfg.norm_topk_prob}, tp);
  return l;
}

std::vector<float> RandomRows(int64_t T, int64_t H, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(T * H));
  for (float& v : x) v = nd(rng);
  return x;
}

// The sparse layers against LayerRef with F32 activations: the same rounding points, so an
// e4m3fn code moves by a step only where a sum lands next to a boundary: a few elements
// within 2^-5 of their magnitude, every other within 1e-4.
void CheckLayers(const Format& f, bool bf16_scales = false) {
  SCOPED_TRACE(f.Name() + (bf16_scales ? " BF16 scales" : ""));
  testing::TempDir tmp;
  const std::string dir = QuantizedCopy(tmp, f, {}, bf16_scales);
  const vt::Queue q = vt::Queue::Cpu(2);
  for (int64_t layer : {1, 3}) {
    const auto l = LoadLayer(dir, q, layer);
    ASSERT_TRUE(l->moe.fp8() && l->moe.fp8_group_scaled() && !l->moe.takes_quantized_input());
    const int64_t T = 13, H = l->cfg.hidden_size;
    const std::vector<float> x = RandomRows(T, H, static_cast<uint32_t>(3 + layer));
    ActivationBuffers buf;
    vt::Tensor out = vt::Tensor::Empty({T, H}, vt::DType::kF32);
    const int64_t before = vt::DispatchCount(vt::OpId::kMoeExpertsFp8GroupScaled, vt::DeviceType::kCPU);
    l->moe.Forward(q, vt::Tensor::FromHost(x.data(), {T, H}, vt::DType::kF32), out, buf);
    EXPECT_EQ(vt::DispatchCount(vt::OpId::kMoeExpertsFp8GroupScaled, vt::DeviceType::kCPU) - before, 1);
    std::vector<double> want, mag;
    LayerRef(l->ckpt, l->cfg, f, layer, x, T, want, mag);
    int64_t loose = 0, bad = 0;
    double worst = 0;
    for (int64_t i = 0; i < T * H; ++i) {
      const double err = std::fabs(out.data_as<float>()[i] - want[i]);
      worst = std::max(worst, err / (mag[i] + 1e-30));
      loose += err > 1e-4 * mag[i] + 1e-7;
      if (err > 0x1p-5 * mag[i] + 1e-7 && bad++ < 5)
        ADD_FAILURE() << "layer " << layer << " output " << i << ": " << out.data_as<float>()[i] << " vs " << want[i]
                      << " (magnitude " << mag[i] << ")";
    }
    std::printf("[%s layer %lld] vs float64 emulation: worst %.3g of the magnitude, %lld of %lld beyond 1e-4\n",
                f.Name().c_str(), static_cast<long long>(layer), worst, static_cast<long long>(loose),
                static_cast<long long>(T * H));
    EXPECT_EQ(bad, 0);
    EXPECT_LE(loose, T * H / 50) << "layer " << layer << ": outputs off by more than summation order";
  }
}

// [32, 32]: H = 64 two whole groups, I = 48 one and a half blocks (gate rows 32..47 and up
// rows 0..15 would share a block of the merged rows; each keeps its own).
// Layer 1's MoE block of `dir` split over two tensor-parallel ranks: the ranks' outputs add
// up to the whole block's (the all-reduce's sum).
void ExpectRanksSumToTheWholeBlock(const vt::Queue& q, const std::string& dir, uint32_t seed) {
  const auto whole = LoadLayer(dir, q, 1);
  const int64_t T = 6, H = 64;
  const std::vector<float> x = RandomRows(T, H, seed);
  const vt::Tensor xt = vt::Tensor::FromHost(x.data(), {T, H}, vt::DType::kF32);
  ActivationBuffers buf;
  vt::Tensor want = vt::Tensor::Empty({T, H}, vt::DType::kF32), part = vt::Tensor::Empty({T, H}, vt::DType::kF32);
  whole->moe.Forward(q, xt, want, buf);
  std::vector<double> sum(static_cast<size_t>(T * H), 0.0);
  for (int rank = 0; rank < 2; ++rank) {
    const auto r = LoadLayer(dir, q, 1, {rank, 2});
    r->moe.Forward(q, xt, part, buf);
    for (int64_t i = 0; i < T * H; ++i) sum[i] += part.data_as<float>()[i];
  }
  for (int64_t i = 0; i < T * H; ++i)
    EXPECT_NEAR(sum[i], want.data_as<float>()[i], 1e-5 * (1 + std::fabs(want.data_as<float>()[i]))) << i;
}

TEST(MoeFp8Dynamic, Block32SparseLayersMatchTheFloat64Emulation) { CheckLayers({32, 32}); }
// [16, 24]: I = 48 whole 16-row blocks, H = 64 and I = 48 in groups of 24 (a partial one in H).
TEST(MoeFp8Dynamic, Block16x24SparseLayersMatchTheFloat64Emulation) { CheckLayers({16, 24}); }
// BF16 weight_scale_inv (as some releases store them), widened to f32.
TEST(MoeFp8Dynamic, Bf16BlockScalesMatchTheFloat64Emulation) { CheckLayers({32, 32}, true); }
TEST(MoeFp8Dynamic, ChannelTokenSparseLayersMatchTheFloat64Emulation) { CheckLayers({}); }

// A token's output bytes alone are its bytes in a batch of other tokens (shared experts,
// repeats, any order), BF16 and F32 activations, both formats.
TEST(MoeFp8Dynamic, ATokensBytesAloneAndInABatchAreEqual) {
  for (const Format& f : {Format{32, 32}, Format{}}) {
    SCOPED_TRACE(f.Name());
    testing::TempDir tmp;
    const std::string dir = QuantizedCopy(tmp, f);
    const vt::Queue q = vt::Queue::Cpu(2);
    const auto l = LoadLayer(dir, q, 1);
    const int64_t H = l->cfg.hidden_size, P = 9;
    const std::vector<float> pool = RandomRows(P, H, 11);
    const std::vector<int64_t> batch = {4, 0, 7, 4, 2, 8, 1, 3, 6, 5, 0, 2};
    for (vt::DType act : {vt::DType::kF32, vt::DType::kBF16}) {
      auto run = [&](const std::vector<int64_t>& tokens) {
        const int64_t T = static_cast<int64_t>(tokens.size());
        vt::Tensor x = vt::Tensor::Empty({T, H}, act);
        for (int64_t t = 0; t < T; ++t)
          for (int64_t h = 0; h < H; ++h) {
            const float v = pool[tokens[t] * H + h];
            if (act == vt::DType::kF32)
              x.data_as<float>()[t * H + h] = v;
            else
              x.data_as<uint16_t>()[t * H + h] = vt::FloatToBf16(v);
          }
        ActivationBuffers buf;
        vt::Tensor out = vt::Tensor::Empty({T, H}, act);
        l->moe.Forward(q, x, out, buf);
        return out;
      };
      const vt::Tensor all = run(batch);
      const size_t row = static_cast<size_t>(H) * vt::DTypeSize(act);
      for (size_t i = 0; i < batch.size(); ++i) {
        const vt::Tensor alone = run({batch[i]});
        EXPECT_EQ(std::memcmp(static_cast<const char*>(all.data()) + i * row, alone.data(), row), 0)
            << vt::DTypeName(act) << ": token " << batch[i] << " at " << i;
      }
    }
  }
}

// The whole model loads in each format with its routed experts on the group-scaled op (once
// per sparse layer and forward, never the static or BF16 expert ops), gives finite logits,
// and counts the experts' scales in its weight bytes.
TEST(MoeFp8Dynamic, ModelLoadsAndRunsTheGroupScaledExperts) {
  for (const Format& f : {Format{32, 32}, Format{}}) {
    SCOPED_TRACE(f.Name());
    testing::TempDir tmp;
    const std::string dir = QuantizedCopy(tmp, f);
    auto model = Model::Load(dir, testing::CpuOptions(vt::DType::kBF16));
    ASSERT_EQ(model->quant().method, f.block() ? QuantMethod::kFp8Block : QuantMethod::kFp8ChannelToken);
    const int64_t gs = vt::DispatchCount(vt::OpId::kMoeExpertsFp8GroupScaled, vt::DeviceType::kCPU);
    const int64_t st = vt::DispatchCount(vt::OpId::kMoeExpertsFp8, vt::DeviceType::kCPU);
    const int64_t plain = vt::DispatchCount(vt::OpId::kMoeExperts, vt::DeviceType::kCPU);
    const std::vector<float> logits = testing::PromptLogits(*model, {5, 77, 300, 12});
    for (float v : logits) ASSERT_TRUE(std::isfinite(v));
    EXPECT_EQ(vt::DispatchCount(vt::OpId::kMoeExpertsFp8GroupScaled, vt::DeviceType::kCPU) - gs, 2);
    EXPECT_EQ(vt::DispatchCount(vt::OpId::kMoeExpertsFp8, vt::DeviceType::kCPU), st);
    EXPECT_EQ(vt::DispatchCount(vt::OpId::kMoeExperts, vt::DeviceType::kCPU), plain);
    // A sparse block's bytes: the router's, and per expert its fp8 weights and its scales.
    const auto l = LoadLayer(dir, vt::Queue::Cpu(1), 1);
    const int64_t H = 64, I = 48, E = 8, k = 2;
    const int64_t bn = f.block() ? f.bn : 1;
    const int64_t nI = (I + bn - 1) / bn, nH = (H + bn - 1) / bn;
    const int64_t GH = f.block() ? (H + f.bk - 1) / f.bk : 1, GI = f.block() ? (I + f.bk - 1) / f.bk : 1;
    const int64_t expert = 3 * H * I + 4 * (2 * nI * GH + nH * GI);
    EXPECT_EQ(l->moe.weight_bytes(), E * H * 2 + E * expert);
    EXPECT_EQ(l->moe.active_weight_bytes(), E * H * 2 + k * expert);
  }
}

// Tensor parallelism: block FP8 whose per-rank intermediate part is whole blocks (I / 2 = 24,
// blocks [24, 24]) splits, and the ranks' partial sums add up to the whole block's output
// (the same groups of the down input, so equal up to the f32 order of the final sum); a part
// that is not whole blocks ([32, 32]) and per-channel experts are refused by name.
TEST(MoeFp8Dynamic, TensorParallelBlocksSplitOrAreRefused) {
  const vt::Queue q = vt::Queue::Cpu(2);
  {
    testing::TempDir tmp;
    const std::string dir = QuantizedCopy(tmp, {24, 24});
    ExpectRanksSumToTheWholeBlock(q, dir, 21);
  }
  {
    testing::TempDir tmp;
    const std::string dir = QuantizedCopy(tmp, {32, 32});
    testing::ExpectLoadError([&] { LoadLayer(dir, q, 1, {1, 2}); },
                             {"model.layers.1.mlp.experts", "24 rows per rank", "[32, 32]"});
  }
  {
    testing::TempDir tmp;
    const std::string dir = QuantizedCopy(tmp, {});
    testing::ExpectLoadError([&] { LoadLayer(dir, q, 1, {0, 2}); }, {"model.layers.1.mlp.", "per-channel"});
  }
}

// A missing, mis-shaped, zero or NaN expert scale is a load error naming the tensor.
TEST(MoeFp8Dynamic, BadExpertScalesAreLoadErrorsNamingTheTensor) {
  const std::string up = Expert(1, 3, "up_proj");
  const vt::Queue q = vt::Queue::Cpu(1);
  auto expect = [&](const Format& f, const ScaleEdit& edit, const std::vector<std::string>& needles) {
    testing::TempDir tmp;
    const std::string dir = QuantizedCopy(tmp, f, edit);
    testing::ExpectLoadError([&] { LoadLayer(dir, q, 1); }, needles);
  };
  const std::string inv = up + ".weight_scale_inv", ch = up + ".weight_scale";
  expect({32, 32}, {inv, 0, true, 1.0f}, {inv, "missing"});
  expect({32, 32}, {inv, 1, false, 1.0f}, {inv, "[3, 2]", "expected [2, 2]"});
  expect({32, 32}, {inv, 0, false, 0.0f}, {inv, "finite and > 0"});
  expect({32, 32}, {inv, 0, false, NAN}, {inv, "finite and > 0"});
  expect({}, {ch, -1, false, 1.0f}, {ch, "[47, 1]", "expected [48, 1]"});
  expect({}, {ch, 0, true, 1.0f}, {ch, "missing"});
}

// A copy of QuantizedCopy(f)'s checkpoint whose routed experts are stored fused (transformers
// 5's fine-grained FP8 experts): per sparse layer `experts.gate_up_proj` [E, 2I, H] and
// `experts.down_proj` [E, H, I] F8E4M3, quantized here from the BF16 fixture with blocks over
// the merged 2I rows, and their `_scale_inv` [E, ceil(2I/bn), ceil(H/bk)] / [E, ceil(H/bn),
// ceil(I/bk)] F32. channel: the per-channel config with FP8 fused tensors (no scales).
std::string FusedCopy(const testing::TempDir& tmp, const Format& f) {
  const std::string per_expert = QuantizedCopy(tmp, f), dir = tmp.Sub("fused");
  const Checkpoint bf16 = Checkpoint::Open(kMoe);
  const int64_t E = 8, H = 64, I = 48;
  testing::EditedCopy(per_expert, dir, [&](const std::string& n, const vt::Tensor& t, SafetensorsWriter& w,
                                           std::vector<std::vector<char>>& keep) {
    if (n.find(".mlp.experts.") == std::string::npos) return w.Add(n, t);
    const std::string trigger = ".mlp.experts.0.gate_proj.weight";
    if (n.size() < trigger.size() || n.compare(n.size() - trigger.size(), trigger.size(), trigger) != 0)
      return;  // the other expert tensors: written fused below
    const size_t at = n.size() - trigger.size();
    const std::string layer = n.substr(0, at);  // "model.layers.L"
    auto quantize = [&](const std::string& name, int64_t N, int64_t K, auto row) {  // row(e, r) -> BF16 bits
      const int64_t bn = f.block() ? f.bn : 1, bk = f.block() ? f.bk : K;
      const int64_t nb = (N + bn - 1) / bn, kb = (K + bk - 1) / bk;
      keep.emplace_back(static_cast<size_t>(E * N * K));
      uint8_t* q = reinterpret_cast<uint8_t*>(keep.back().data());
      keep.emplace_back(static_cast<size_t>(E * nb * kb) * sizeof(float));
      float* s = reinterpret_cast<float*>(keep.back().data());
      for (int64_t e = 0; e < E; ++e)
        testing::QuantizeBf16Blocks(N, K, bn, bk, [&](int64_t r) { return row(e, r); }, /*bf16_scales=*/false,
                                    q + e * N * K, s + e * nb * kb);
      w.Add(layer + ".mlp.experts." + name, vt::DType::kF8E4M3, {E, N, K}, q);
      if (f.block()) w.Add(layer + ".mlp.experts." + name + "_scale_inv", vt::DType::kF32, {E, nb, kb}, s);
    };
    std::vector<vt::Tensor> g, u, d;
    for (int64_t e = 0; e < E; ++e) {
      const std::string x = layer + ".mlp.experts." + std::to_string(e) + ".";
      g.push_back(bf16.Get(x + "gate_proj.weight"));
      u.push_back(bf16.Get(x + "up_proj.weight"));
      d.push_back(bf16.Get(x + "down_proj.weight"));
    }
    quantize("gate_up_proj", 2 * I, H, [&](int64_t e, int64_t r) {
      return (r < I ? g[e] : u[e]).data_as<uint16_t>() + (r % I) * H;
    });
    quantize("down_proj", H, I, [&](int64_t e, int64_t r) { return d[e].data_as<uint16_t>() + r * I; });
  });
  return dir;
}

// Fused block-FP8 experts load and match the float64 emulation of the fused layout: [32, 32]
// puts gate rows 32..47 and up rows 0..15 in one block of the merged rows (per-row scales),
// [16, 16] keeps whole blocks. Fused per-channel FP8 experts are refused by name.
TEST(MoeFp8Dynamic, FusedBlockFp8ExpertsMatchTheEmulationAndFusedChannelIsRefused) {
  const vt::Queue q = vt::Queue::Cpu(2);
  for (const Format& f : {Format{32, 32}, Format{16, 16}}) {
    SCOPED_TRACE(f.Name() + " fused");
    testing::TempDir tmp;
    const std::string dir = FusedCopy(tmp, f);
    const auto l = LoadLayer(dir, q, 1);
    ASSERT_TRUE(l->moe.fp8_group_scaled());
    const int64_t T = 11, H = 64;
    const std::vector<float> x = RandomRows(T, H, 31);
    ActivationBuffers buf;
    vt::Tensor out = vt::Tensor::Empty({T, H}, vt::DType::kF32);
    l->moe.Forward(q, vt::Tensor::FromHost(x.data(), {T, H}, vt::DType::kF32), out, buf);
    std::vector<double> want, mag;
    LayerRef(l->ckpt, l->cfg, f, 1, x, T, want, mag);
    int64_t loose = 0, bad = 0;
    for (int64_t i = 0; i < T * H; ++i) {
      const double err = std::fabs(out.data_as<float>()[i] - want[i]);
      loose += err > 1e-4 * mag[i] + 1e-7;
      if (err > 0x1p-5 * mag[i] + 1e-7 && bad++ < 5)
        ADD_FAILURE() << "output " << i << ": " << out.data_as<float>()[i] << " vs " << want[i];
    }
    EXPECT_EQ(bad, 0);
    EXPECT_LE(loose, T * H / 50);
    auto model = Model::Load(dir, testing::CpuOptions(vt::DType::kBF16));
    for (float v : testing::PromptLogits(*model, {5, 77, 300, 12})) ASSERT_TRUE(std::isfinite(v));
  }
  testing::TempDir tmp;
  const std::string dir = FusedCopy(tmp, {});
  testing::ExpectLoadError([&] { LoadLayer(dir, q, 1); },
                           {"model.layers.1.mlp.experts.gate_up_proj", "FP8", "fused layout"});
}

// Fused block-FP8 experts split over two ranks (I / 2 = 24 whole groups of bk): [24, 24] keeps
// whole blocks, [32, 8] takes per-row scales (gate and up share a merged-row block); the
// ranks' partial sums add up to the whole block's output. [16, 16] (24 columns of down per
// rank, not a multiple of 16) is refused by name.
TEST(MoeFp8Dynamic, FusedBlockFp8ExpertsSplitOverRanks) {
  const vt::Queue q = vt::Queue::Cpu(2);
  for (const Format& f : {Format{24, 24}, Format{32, 8}}) {
    SCOPED_TRACE(f.Name() + " fused, 2 ranks");
    testing::TempDir tmp;
    const std::string dir = FusedCopy(tmp, f);
    ExpectRanksSumToTheWholeBlock(q, dir, 41);
  }
  testing::TempDir tmp;
  const std::string dir = FusedCopy(tmp, {16, 16});
  testing::ExpectLoadError([&] { LoadLayer(dir, q, 1, {0, 2}); }, {"model.layers.1.mlp.experts", "24 columns"});
}

}  // namespace
}  // namespace vtllm::model
