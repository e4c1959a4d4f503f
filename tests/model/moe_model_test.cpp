// Qwen3-MoE on the CPU from make_random_checkpoint's qwen3-moe-tiny (4 layers, layer 0 dense,
// 8 experts, 2 per token): one sparse MLP layer against float64 definitions written here from
// the checkpoint's tensors (router softmax top-k renormalised, every expert's SwiGLU dense,
// combined with the routing weights; FP8 as vLLM merges and scales it), the whole model's
// loading in every format, and the errors a user can act on.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <numeric>
#include <random>

#include "loader_test_util.h"
#include "model/checkpoint.h"
#include "model/config.h"
#include "model/layers/moe.h"
#include "model/model.h"
#include "model/quant_config.h"
#include "model/safetensors_writer.h"
#include "vt/detail/numerics.h"
#include "vt/vt.h"

#ifndef VTLLM_TOOL_RUNNER
#define VTLLM_TOOL_RUNNER ""  // a cross build's emulator, e.g. "qemu-aarch64 -L /usr/aarch64-linux-gnu "
#endif

namespace vtllm::model {
namespace {

using testing::TempDir;

void MakeMoeCheckpoint(const TempDir& dir, const std::string& format) {
  const std::string tool = std::string(VTLLM_BINARY_DIR) + "/tools/make_random_checkpoint";
  ASSERT_TRUE(std::filesystem::exists(tool)) << tool << " is missing: build the make_random_checkpoint target";
  const std::string cmd = tool + " --out " + dir.path() + " --preset qwen3-moe-tiny --seed 5 --threads 2 --format " +
                          format + " 2>/dev/null";
  ASSERT_EQ(std::system((VTLLM_TOOL_RUNNER + cmd).c_str()), 0) << cmd;
}

double ValueOf(const vt::Tensor& t, int64_t i) {
  switch (t.dtype()) {
    case vt::DType::kF32: return t.data_as<float>()[i];
    case vt::DType::kBF16: return vt::Bf16ToFloat(t.data_as<uint16_t>()[i]);
    case vt::DType::kF8E4M3: return vt::Fp8E4M3ToFloat(t.data_as<uint8_t>()[i]);
    default: return NAN;
  }
}

std::string Expert(int64_t e, const char* proj) {
  std::string s = "model.layers.1.mlp.experts.";
  s += std::to_string(e);
  s += ".";
  s += proj;
  return s;
}

// Layer 1's MoE MLP of x [T, H] in float64, from the checkpoint. fp8: the experts' math as
// vLLM merges it (one input scale per projection kind = the max over experts; gate/up
// requantized to the larger of their weight scales; x and the SiLU-mul quantized to e4m3fn).
// Returns the output and its magnitude Σ_j |w_j| Σ_i |a_i · w_down[h, i]|.
void LayerRef(const Checkpoint& c, const ModelConfig& cfg, const std::vector<float>& x, int64_t T, bool fp8,
              std::vector<double>& out, std::vector<double>& mag) {
  const int64_t H = cfg.hidden_size, E = cfg.num_experts, k = cfg.num_experts_per_tok, I = cfg.moe_intermediate_size;
  const vt::Tensor gate = c.Get("model.layers.1.mlp.gate.weight");
  float a13 = 0, a2 = 0;
  std::vector<float> s13(E), ws2(E);
  std::vector<std::vector<double>> wgu(E), wd(E);  // dequantized weights as the op multiplies them
  for (int64_t e = 0; e < E; ++e) {
    const vt::Tensor g = c.Get(Expert(e, "gate_proj") + ".weight"), u = c.Get(Expert(e, "up_proj") + ".weight");
    const vt::Tensor d = c.Get(Expert(e, "down_proj") + ".weight");
    float sg = 1, su = 1, sd = 1;
    if (fp8) {
      sg = c.GetScaleF32(Expert(e, "gate_proj") + ".weight_scale");
      su = c.GetScaleF32(Expert(e, "up_proj") + ".weight_scale");
      sd = c.GetScaleF32(Expert(e, "down_proj") + ".weight_scale");
      a13 = std::max({a13, c.GetScaleF32(Expert(e, "gate_proj") + ".input_scale"),
                      c.GetScaleF32(Expert(e, "up_proj") + ".input_scale")});
      a2 = std::max(a2, c.GetScaleF32(Expert(e, "down_proj") + ".input_scale"));
    }
    s13[e] = std::max(sg, su);
    ws2[e] = sd;
    for (auto [t, s] : {std::pair{&g, sg}, std::pair{&u, su}})
      for (int64_t i = 0; i < t->numel(); ++i) {
        double v = ValueOf(*t, i);
        if (fp8 && s != s13[e])  // requantized: f32 dequantization, then the larger scale
          v = vt::Fp8E4M3ToFloat(vt::numerics::QuantizeFp8(static_cast<float>(v) * s, 1.0f / s13[e]));
        wgu[e].push_back(v);
      }
    for (int64_t i = 0; i < d.numel(); ++i) wd[e].push_back(ValueOf(d, i));
  }
  out.assign(static_cast<size_t>(T * H), 0.0);
  mag.assign(out.size(), 0.0);
  for (int64_t t = 0; t < T; ++t) {
    std::vector<double> xt(x.begin() + t * H, x.begin() + (t + 1) * H), p(E);
    double mx = -1e300, sum = 0;
    for (int64_t e = 0; e < E; ++e) {
      double l = 0;
      for (int64_t h = 0; h < H; ++h) l += xt[h] * ValueOf(gate, e * H + h);
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
    if (fp8)
      for (double& v : xt) v = vt::Fp8E4M3ToFloat(vt::numerics::QuantizeFp8(static_cast<float>(v), 1.0f / a13));
    for (int64_t j = 0; j < k; ++j) {
      const int64_t e = order[j];
      const double w = cfg.norm_topk_prob ? p[e] / top : p[e];
      const double sc13 = fp8 ? double(a13) * s13[e] : 1.0, sc2 = fp8 ? double(a2) * ws2[e] : 1.0;
      std::vector<double> a(I);
      for (int64_t i = 0; i < I; ++i) {
        double g = 0, u = 0;
        for (int64_t h = 0; h < H; ++h) {
          g += xt[h] * wgu[e][i * H + h];
          u += xt[h] * wgu[e][(I + i) * H + h];
        }
        g *= sc13;
        u *= sc13;
        a[i] = g / (1 + std::exp(-g)) * u;
        if (fp8) a[i] = vt::Fp8E4M3ToFloat(vt::numerics::QuantizeFp8(static_cast<float>(a[i]), 1.0f / a2));
      }
      for (int64_t h = 0; h < H; ++h) {
        double s = 0, m = 0;
        for (int64_t i = 0; i < I; ++i) {
          s += a[i] * wd[e][h * I + i];
          m += std::fabs(a[i] * wd[e][h * I + i]);
        }
        out[t * H + h] += w * sc2 * s;
        mag[t * H + h] += w * sc2 * m;
      }
    }
  }
}

// The checkpoint in dir and its layer 1 (sparse) block loaded on its own on the CPU.
struct LayerOne {
  ModelConfig cfg;
  QuantConfig quant;
  Checkpoint ckpt;
  SparseMoeBlock moe;
};
std::unique_ptr<LayerOne> LoadLayerOne(const TempDir& dir, const vt::Queue& q) {
  auto l = std::unique_ptr<LayerOne>(new LayerOne{ModelConfig::FromDir(dir.path()), QuantConfig::FromDir(dir.path()),
                                                  Checkpoint::Open(dir.path()), {}});
  LinearContext lc{&l->ckpt, &l->quant, vt::Device::Cpu(), &q};
  const ModelConfig& cfg = l->cfg;
  l->moe = SparseMoeBlock::Load(
      lc, "model.layers.1.mlp.",
      {cfg.hidden_size, cfg.moe_intermediate_size, cfg.num_experts, cfg.num_experts_per_tok, cfg.norm_topk_prob});
  return l;
}

// Layer 1 (sparse) loaded on its own, run with F32 activations, against LayerRef.
void CheckLayer(const std::string& format) {
  TempDir dir;
  MakeMoeCheckpoint(dir, format);
  const vt::Queue q = vt::Queue::Cpu(2);
  const auto layer = LoadLayerOne(dir, q);
  const ModelConfig& cfg = layer->cfg;
  const Checkpoint& ckpt = layer->ckpt;
  const SparseMoeBlock& moe = layer->moe;
  ASSERT_FALSE(cfg.IsSparseLayer(0));
  ASSERT_TRUE(cfg.IsSparseLayer(1));
  EXPECT_EQ(moe.fp8(), format != "bf16");
  const int64_t T = 13, H = cfg.hidden_size;
  std::mt19937 rng(3);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(T * H));
  for (float& v : x) v = nd(rng);
  ActivationBuffers buf;
  vt::Tensor out = vt::Tensor::Empty({T, H}, vt::DType::kF32);
  moe.Forward(q, vt::Tensor::FromHost(x.data(), {T, H}, vt::DType::kF32), out, buf);
  std::vector<double> want, mag;
  LayerRef(ckpt, cfg, x, T, format != "bf16", want, mag);
  // BF16: only f32 summation orders differ. FP8: the same rounding points, so an e4m3fn code
  // moves by a step only where a sum lands next to a boundary: a few elements within 2^-5 of
  // their magnitude, every other within 1e-4.
  int64_t loose = 0, bad = 0;
  for (int64_t i = 0; i < T * H; ++i) {
    const double err = std::fabs(out.data_as<float>()[i] - want[i]);
    const bool tight = err <= 1e-4 * mag[i] + 1e-7;
    loose += !tight;
    if ((format == "bf16" ? !tight : err > 0x1p-5 * mag[i] + 1e-7) && bad++ < 5)
      ADD_FAILURE() << format << " output " << i << ": " << out.data_as<float>()[i] << " vs " << want[i]
                    << " (magnitude " << mag[i] << ")";
  }
  EXPECT_EQ(bad, 0);
  EXPECT_LE(loose, T * H / 50) << format << ": outputs off by more than summation order";
}

TEST(MoeModel, Bf16SparseLayerMatchesTheDenseFloat64Definition) { CheckLayer("bf16"); }
TEST(MoeModel, ModelOptFp8SparseLayerMatchesVllmsMergedScales) { CheckLayer("fp8-modelopt"); }
TEST(MoeModel, CompressedTensorsFp8SparseLayerMatchesVllmsMergedScales) { CheckLayer("fp8-compressed-tensors"); }

// Static FP8 experts take their input quantized by the RMSNorm before the block (one fused
// op, RmsNormQuantFp8, writing the normed activations for the router and their e4m3 codes):
// the block gives the same bytes with those codes as when it quantizes the input itself, and
// a BF16 forward runs no separate QuantFp8Static for the experts (one per layer is left:
// o_proj's input).
TEST(MoeModel, StaticFp8ExpertsTakeTheFusedNormsQuantization) {
  TempDir dir;
  MakeMoeCheckpoint(dir, "fp8-modelopt");
  const vt::Queue q = vt::Queue::Cpu(2);
  const auto layer = LoadLayerOne(dir, q);
  const ModelConfig& cfg = layer->cfg;
  const SparseMoeBlock& moe = layer->moe;
  ASSERT_TRUE(moe.takes_quantized_input());
  const int64_t T = 7, H = cfg.hidden_size;
  std::mt19937 rng(4);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  vt::Tensor x = vt::Tensor::Empty({T, H}, vt::DType::kBF16);
  for (int64_t i = 0; i < T * H; ++i) x.data_as<uint16_t>()[i] = vt::FloatToBf16(nd(rng));
  const vt::Tensor x8 = vt::Tensor::Empty({T, H}, vt::DType::kF8E4M3);
  vt::QuantFp8Static(q, x8, x, moe.input_scale());
  ActivationBuffers buf;
  const vt::Tensor own = vt::Tensor::Empty({T, H}, vt::DType::kBF16), given = vt::Tensor::Empty({T, H}, vt::DType::kBF16);
  moe.Forward(q, x, own, buf);
  moe.Forward(q, x, given, buf, &x8);
  EXPECT_EQ(std::memcmp(own.data(), given.data(), own.nbytes()), 0);

  auto model = Model::Load(dir.path(), {.device = vt::Device::Cpu(), .dtype = vt::DType::kBF16, .cpu_threads = 2,
                                        .progress = false});
  KvCache cache = model->MakeKvCache(32, 16);
  SequenceKv seq;
  const int64_t quant0 = vt::DispatchCount(vt::OpId::kQuantFp8Static, vt::DeviceType::kCPU);
  const int64_t fused0 = vt::DispatchCount(vt::OpId::kRmsNormQuantFp8, vt::DeviceType::kCPU);
  const std::vector<int32_t> prompt = {3, 17, 200, 5, 99};
  const std::vector<int64_t> pos = {0, 1, 2, 3, 4};
  model->Forward(prompt, pos, {&cache, &seq}, true);
  EXPECT_EQ(vt::DispatchCount(vt::OpId::kQuantFp8Static, vt::DeviceType::kCPU) - quant0, cfg.num_hidden_layers);
  EXPECT_EQ(vt::DispatchCount(vt::OpId::kRmsNormQuantFp8, vt::DeviceType::kCPU) - fused0, 2 * cfg.num_hidden_layers);
}

TEST(MoeModel, EveryFormatLoadsAndGivesFiniteLogits) {
  for (const std::string format : {"bf16", "fp8-modelopt", "fp8-compressed-tensors"}) {
    TempDir dir;
    MakeMoeCheckpoint(dir, format);
    for (vt::DType act : {vt::DType::kF32, vt::DType::kBF16}) {
      auto model = Model::Load(dir.path(), {.device = vt::Device::Cpu(), .dtype = act, .cpu_threads = 2,
                                            .progress = false});
      KvCache cache = model->MakeKvCache(32, 16);
      SequenceKv seq;
      const std::vector<int32_t> prompt = {3, 17, 200, 5, 99};
      const std::vector<int64_t> pos = {0, 1, 2, 3, 4};
      const std::vector<float> logits = model->Forward(prompt, pos, {&cache, &seq}, true);
      ASSERT_EQ(logits.size(), prompt.size() * 256);
      for (float v : logits) ASSERT_TRUE(std::isfinite(v)) << format;
    }
  }
}

// A build without CUDA MoE kernels (the CPU-only build, which has no CUDA kernel at all): the
// load says so, naming the missing ops, before reading any weight. A CUDA build registers
// them (src/vt/cuda/moe.cu); model_cuda_tests runs the MoE fixtures there against the CPU.
TEST(MoeModel, LoadingOnCudaNamesTheMissingMoeOps) {
  if (vt::OpRegistered(vt::OpId::kMoeTopKRouting, vt::DeviceType::kCUDA))
    GTEST_SKIP() << "this build has the CUDA MoE kernels (model_cuda_tests covers MoE on CUDA)";
  TempDir dir;
  MakeMoeCheckpoint(dir, "bf16");
  try {
    Model::Load(dir.path(), {.device = vt::Device::Cuda(0), .dtype = std::nullopt, .progress = false});
    ADD_FAILURE() << "loaded a MoE model on CUDA without MoE kernels";
  } catch (const vt::Error& e) {
    const std::string msg = e.what();
    for (const char* s : {"Qwen3MoeForCausalLM", "no kernel for cuda", "MoeTopKRouting", "MoeExperts"})
      EXPECT_NE(msg.find(s), std::string::npos) << msg;
  }
}

// A quantized expert without its scale: the error names the tensor.
TEST(MoeModel, AMissingExpertScaleIsNamed) {
  TempDir src, dst;
  MakeMoeCheckpoint(src, "fp8-modelopt");
  const Checkpoint c = Checkpoint::Open(src.path());
  SafetensorsWriter w;
  w.SetMetadata("format", "pt");
  const std::string dropped = "model.layers.2.mlp.experts.5.up_proj.input_scale";
  for (const std::string& n : c.names())
    if (n != dropped) w.Add(n, c.Get(n));
  w.Write(dst / "model.safetensors");
  for (const char* f : {"config.json", "generation_config.json", "hf_quant_config.json"})
    std::filesystem::copy_file(src / f, dst / f);
  try {
    Model::Load(dst.path(), {.device = vt::Device::Cpu(), .dtype = std::nullopt, .cpu_threads = 2, .progress = false});
    ADD_FAILURE() << "loaded without " << dropped;
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find(dropped), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace vtllm::model
