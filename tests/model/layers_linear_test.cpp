// Linear layers: the FP8 requantization of merged shards against a reference built from the
// e4m3fn format (all 256 codes enumerated), and merged FP8/BF16 linears against float64
// products of the weights as stored.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <random>
#include <vector>

#include "model/checkpoint.h"
#include "model/layers/linear.h"
#include "model/quant_config.h"
#include "model/safetensors_writer.h"
#include "vt/cpu/matmul/kernels.h"
#include "vt/vt.h"

namespace vtllm::model {
namespace {

// e4m3fn value of a code, from the format: bias 7, 3 mantissa bits, subnormals below 2^-6.
double Decode(uint8_t b) {
  const int e = (b >> 3) & 0xF, m = b & 7;
  const double v = e == 0 ? m * std::ldexp(1.0, -9) : (1.0 + m / 8.0) * std::ldexp(1.0, e - 7);
  return (b & 0x80) ? -v : v;
}

// Nearest finite code to v (clamped to +-448), ties to the even code.
uint8_t NearestCode(double v) {
  if (v > 448) v = 448;
  if (v < -448) v = -448;
  int best = -1;
  double best_err = INFINITY;
  for (int c = 0; c < 256; ++c) {
    if ((c & 0x7F) == 0x7F) continue;  // NaN
    if ((c & 0x80) != (std::signbit(v) ? 0x80 : 0)) continue;
    const double err = std::fabs(Decode(static_cast<uint8_t>(c)) - v);
    if (err < best_err || (err == best_err && (c & 1) == 0)) {
      best = c;
      best_err = err;
    }
  }
  return static_cast<uint8_t>(best);
}

TEST(Fp8Requantize, EveryCodeMatchesTheNearestCodeOfTheRescaledValue) {
  vt::Queue q = vt::Queue::Cpu(1);
  std::vector<uint8_t> codes(256);
  for (int c = 0; c < 256; ++c) codes[c] = static_cast<uint8_t>(c);
  for (auto [s_old, s_new] : {std::pair{0.0007280622f, 0.0007934571f}, std::pair{0.5f, 0.75f}, std::pair{1.0f, 1.0f},
                              std::pair{0.001f, 0.0123f}}) {
    vt::Tensor w = vt::Tensor::FromHost(codes.data(), {16, 16}, vt::DType::kF8E4M3);
    vt::Tensor out = vt::Tensor::Empty({16, 16}, vt::DType::kF8E4M3);
    RequantizeFp8(q, out, w, s_old, s_new);
    std::vector<uint8_t> got(256);
    out.CopyToHost(got.data());
    const float inv = 1.0f / s_new;
    for (int c = 0; c < 256; ++c) {
      if ((c & 0x7F) == 0x7F) continue;
      // The contract's arithmetic: decode * old scale in f32, * (1/new scale) in f32, then RNE.
      const float v = static_cast<float>(Decode(static_cast<uint8_t>(c))) * s_old;
      const uint8_t want = NearestCode(static_cast<double>(v * inv));
      EXPECT_EQ(got[c], want) << "code " << c << " scales " << s_old << " -> " << s_new;
    }
  }
}

// A checkpoint directory with three FP8 shards q/k/v of different scales and a BF16 linear.
class LinearCheckpoint : public ::testing::Test {
 protected:
  static constexpr int64_t K = 32;
  const std::vector<int64_t> rows = {8, 4, 4};
  const std::vector<float> wscale = {0.01f, 0.013f, 0.008f}, iscale = {0.02f, 0.05f, 0.03f};
  std::string dir;
  std::vector<std::vector<uint8_t>> w8;
  std::vector<uint16_t> bf16_w;

  void SetUp() override {
    dir = (std::filesystem::temp_directory_path() / ("vtllm_linear_" + std::to_string(getpid()))).string();
    std::filesystem::create_directories(dir);
    std::mt19937 rng(5);
    SafetensorsWriter wr;
    const char* names[] = {"q_proj", "k_proj", "v_proj"};
    for (size_t i = 0; i < 3; ++i) {
      std::vector<uint8_t> w(static_cast<size_t>(rows[i] * K));
      for (auto& b : w) {
        b = static_cast<uint8_t>(rng() & 0xFF);
        if ((b & 0x7F) == 0x7F) b = 0x38;  // no NaN weights
      }
      w8.push_back(w);
      const std::string p = std::string("layer.") + names[i];
      wr.Add(p + ".weight", vt::DType::kF8E4M3, {rows[i], K}, w.data());
      wr.Add(p + ".weight_scale", vt::DType::kF32, {}, &wscale[i]);
      wr.Add(p + ".input_scale", vt::DType::kF32, {}, &iscale[i]);
    }
    bf16_w.resize(6 * K);
    std::normal_distribution<float> nd;
    for (auto& h : bf16_w) h = vt::FloatToBf16(nd(rng));
    wr.Add("plain.weight", vt::DType::kBF16, {6, K}, bf16_w.data());
    wr.Write(dir + "/model.safetensors");
    std::ofstream(dir + "/config.json") << R"({"quantization_config": {"quant_method": "modelopt", "quant_algo": "FP8",
      "exclude_modules": ["plain"]}})";
  }
  void TearDown() override { std::filesystem::remove_all(dir); }
};

// On every CPU level: the merged weight's shards give the same bits as the whole, within
// half an fp8 step of the stored weights times their scales. Where the level multiplies a
// re-laid-out copy (AVX2, AVX-512 and vdpbf16ps levels), the copies are made at load (none
// at the first products) and the merged copy's bytes are freed.
TEST_F(LinearCheckpoint, MergedFp8UsesMaxScalesAndMatchesTheStoredWeights) {
  for (vt::CpuIsa isa : {vt::CpuIsa::kScalar, vt::CpuIsa::kAvx2, vt::CpuIsa::kAvx512, vt::CpuIsa::kAvx512Bf16,
                         vt::CpuIsa::kAmx, vt::CpuIsa::kNeon, vt::CpuIsa::kNeonBf16}) {
    vt::Queue q = vt::Queue::Cpu(2, isa);
    if (isa != vt::CpuIsa::kScalar && q.cpu_isa() != isa) continue;  // not on this processor
    SCOPED_TRACE(vt::CpuIsaName(isa));
    Checkpoint ckpt = Checkpoint::Open(dir);
    QuantConfig quant = QuantConfig::FromDir(dir);
    LinearContext ctx{&ckpt, &quant, vt::Device::Cpu(), &q};
    const int64_t copies_before = vt::cpu::matmul::PackedCopiesMade();
    Linear lin = Linear::Load(ctx, {{"layer.q_proj", 8}, {"layer.k_proj", 4}, {"layer.v_proj", 4}}, K, false);
    const int64_t copies_at_load = vt::cpu::matmul::PackedCopiesMade() - copies_before;
    const bool relaid = isa == vt::CpuIsa::kAvx2 || isa == vt::CpuIsa::kAvx512 || isa == vt::CpuIsa::kAvx512Bf16;
    EXPECT_EQ(copies_at_load > 0, relaid);
    EXPECT_EQ(lin.weight_bytes_released(), relaid);
    EXPECT_TRUE(lin.takes_quantized_input());
    EXPECT_EQ(lin.input_scale(), 0.05f);  // the shards' max
    EXPECT_EQ(lin.out_features(), 16);
    // x is a multiple of the input scale on the fp8 grid, so quantizing it is exact and the
    // only approximation left is the requantized weight (half an fp8 step, 2^-4 relative).
    const int64_t T = 3;
    std::vector<float> x(static_cast<size_t>(T * K));
    std::mt19937 rng(9);
    for (auto& v : x) v = static_cast<float>(Decode(static_cast<uint8_t>(rng() % 0x70))) * 0.05f;
    vt::Tensor tx = vt::Tensor::FromHost(x.data(), {T, K}, vt::DType::kF32);
    vt::Tensor all = vt::Tensor::Empty({T, 16}, vt::DType::kF32);
    lin.Apply(q, tx, all);
    std::vector<vt::Tensor> outs = {vt::Tensor::Empty({T, 8}, vt::DType::kF32),
                                    vt::Tensor::Empty({T, 4}, vt::DType::kF32),
                                    vt::Tensor::Empty({T, 4}, vt::DType::kF32)};
    lin.ApplyShards(q, tx, outs);
    std::vector<float> got(static_cast<size_t>(T * 16));
    all.CopyToHost(got.data());
    int64_t col = 0;
    for (size_t s = 0; s < 3; ++s) {
      std::vector<float> shard(static_cast<size_t>(T * rows[s]));
      outs[s].CopyToHost(shard.data());
      for (int64_t t = 0; t < T; ++t)
        for (int64_t n = 0; n < rows[s]; ++n) {
          double ref = 0, mag = 0;
          for (int64_t k = 0; k < K; ++k) {
            const double w = Decode(w8[s][n * K + k]) * wscale[s];
            ref += x[t * K + k] * w;
            mag += std::fabs(x[t * K + k] * w);
          }
          const float a = got[t * 16 + col + n], b = shard[t * rows[s] + n];
          EXPECT_EQ(a, b) << "shard " << s << " differs from the merged output";
          EXPECT_NEAR(a, ref, mag / 16 + 1e-6) << "shard " << s << " row " << t << " col " << n;
        }
      col += rows[s];
    }
    EXPECT_EQ(vt::cpu::matmul::PackedCopiesMade() - copies_before, copies_at_load);
    // One shard with its scales as stored: the weight is the checkpoint's mapping, whose
    // pages are handed back after the layout; the products still read right.
    Linear one = Linear::Load(ctx, {{"layer.k_proj", 4}}, K, false);
    EXPECT_EQ(one.weight_bytes_released(), relaid);
    vt::Tensor out_k = vt::Tensor::Empty({T, 4}, vt::DType::kF32);
    one.Apply(q, tx, out_k);
    std::vector<float> got_k(static_cast<size_t>(T * 4));
    out_k.CopyToHost(got_k.data());
    for (int64_t t = 0; t < T; ++t)
      for (int64_t n = 0; n < 4; ++n) {
        double ref = 0, mag = 0;
        for (int64_t k = 0; k < K; ++k) {
          const double w = Decode(w8[1][n * K + k]) * wscale[1];
          ref += x[t * K + k] * w;
          mag += std::fabs(x[t * K + k] * w);
        }
        EXPECT_NEAR(got_k[t * 4 + n], ref, 1e-5 * mag + 1e-6) << "k_proj alone, row " << t << " col " << n;
      }
  }
}

TEST_F(LinearCheckpoint, Bf16LinearIsExactProductOfStoredWeights) {
  vt::Queue q = vt::Queue::Cpu(1);
  Checkpoint ckpt = Checkpoint::Open(dir);
  QuantConfig quant = QuantConfig::FromDir(dir);
  LinearContext ctx{&ckpt, &quant, vt::Device::Cpu(), &q};
  Linear lin = Linear::Load(ctx, {{"plain", 6}}, K, false);
  EXPECT_FALSE(lin.takes_quantized_input());
  std::vector<float> x(K);
  for (int64_t k = 0; k < K; ++k) x[k] = static_cast<float>(k % 5) - 2.0f;
  vt::Tensor out = vt::Tensor::Empty({1, 6}, vt::DType::kF32);
  lin.Apply(q, vt::Tensor::FromHost(x.data(), {1, K}, vt::DType::kF32), out);
  std::vector<float> got(6);
  out.CopyToHost(got.data());
  for (int n = 0; n < 6; ++n) {
    double ref = 0;
    for (int64_t k = 0; k < K; ++k) ref += x[k] * static_cast<double>(vt::Bf16ToFloat(bf16_w[n * K + k]));
    EXPECT_NEAR(got[n], ref, 1e-4);
  }
}

TEST_F(LinearCheckpoint, MixingQuantizedAndPlainShardsIsAnError) {
  vt::Queue q = vt::Queue::Cpu(1);
  Checkpoint ckpt = Checkpoint::Open(dir);
  QuantConfig quant = QuantConfig::FromDir(dir);
  LinearContext ctx{&ckpt, &quant, vt::Device::Cpu(), &q};
  EXPECT_THROW(Linear::Load(ctx, {{"layer.q_proj", 8}, {"plain", 6}}, K, false), vt::Error);
  // A shard with the wrong row count names the tensor.
  try {
    Linear::Load(ctx, {{"layer.q_proj", 9}}, K, false);
    FAIL() << "no error";
  } catch (const vt::Error& e) {
    EXPECT_NE(std::string(e.what()).find("layer.q_proj.weight"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace vtllm::model
