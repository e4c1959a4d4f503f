// RmsNorm, RmsNormGated, SiluMul, Cast and the fused recipes on CUDA: byte-identical to
// the CPU kernels, and the fused kernels to FusedChainComposite on CUDA.
#include <cmath>
#include <limits>
#include <random>

#include "cuda_test_util.h"

namespace {

using vt::DType;
using vt::OpId;

// Rows of varied magnitude (so the sum of squares is order-sensitive), with a few NaN,
// zero and large values sprinkled in when `specials`.
std::vector<float> Rows(int64_t rows, int64_t width, uint32_t seed, bool specials) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::uniform_real_distribution<float> ex(-6.0f, 6.0f);
  std::vector<float> v(static_cast<size_t>(rows * width));
  for (auto& x : v) x = nd(rng) * std::exp2(ex(rng));
  if (specials && v.size() > 8) {
    v[1] = 0.0f;
    v[2] = -0.0f;
    v[3] = 3.0e4f;
    if (rows > 2) v[static_cast<size_t>(2 * width)] = std::numeric_limits<float>::quiet_NaN();
  }
  return v;
}

int64_t Count(OpId op) { return vt::DispatchCount(op, vt::DeviceType::kCUDA); }

struct Shape2 {
  int64_t rows, width;
};
// Widths on both sides of the CTA-per-row RMSNorm kernel's range [256, 32768] and inside
// it (12289: past the default 48 KiB of shared memory).
const Shape2 kShapes[] = {{1, 1},    {3, 31},   {5, 33},    {7, 128},   {2, 255},    {4, 256},   {1, 1024},
                          {2, 4097}, {9, 4096}, {33, 100},  {1, 12289}, {1, 32768}, {1, 32769}};

TEST(CudaNorm, RmsNormMatchesCpuBytes) {
  VT_REQUIRE_CUDA();
  vt::Queue cpu = vt::Queue::Cpu(), gpu = vt::Queue::Cuda(0);
  for (const auto& s : kShapes) {
    for (DType xd : {DType::kF32, DType::kBF16, DType::kF16}) {
      for (DType wd : {xd, DType::kF32}) {
        for (bool with_res : {false, true}) {
          const vt::Shape shape{s.rows, s.width};
          vt::Tensor x = vtt::HostTensor(Rows(s.rows, s.width, 1, true), xd, shape);
          vt::Tensor w = vtt::HostTensor(Rows(1, s.width, 2, false), wd, {s.width});
          vt::Tensor res = vtt::HostTensor(Rows(s.rows, s.width, 3, false), xd, shape);
          vt::Tensor res_gpu = res.To(vtt::kCuda);
          vt::Tensor out = vt::Tensor::Empty(shape, xd);
          vt::Tensor out_gpu = vt::Tensor::Empty(shape, xd, vtt::kCuda);
          vt::RmsNorm(cpu, out, x, w, 1e-6f, with_res ? &res : nullptr);
          const int64_t before = Count(OpId::kRmsNorm);
          vt::RmsNorm(gpu, out_gpu, x.To(vtt::kCuda), w.To(vtt::kCuda), 1e-6f, with_res ? &res_gpu : nullptr);
          EXPECT_EQ(Count(OpId::kRmsNorm), before + 1);
          EXPECT_TRUE(vtt::SameBytes(out_gpu, out))
              << s.rows << "x" << s.width << " " << vt::DTypeName(xd) << " w " << vt::DTypeName(wd) << " res " << with_res;
          if (with_res) {
            EXPECT_TRUE(vtt::SameBytes(res_gpu, res)) << "residual " << s.rows << "x" << s.width;
          }
        }
      }
    }
  }
}

TEST(CudaNorm, RmsNormGatedMatchesCpuBytes) {
  VT_REQUIRE_CUDA();
  vt::Queue cpu = vt::Queue::Cpu(), gpu = vt::Queue::Cuda(0);
  for (const auto& s : kShapes) {
    for (DType xd : {DType::kF32, DType::kBF16, DType::kF16}) {
      const vt::Shape shape{s.rows, s.width};
      vt::Tensor x = vtt::HostTensor(Rows(s.rows, s.width, 4, true), xd, shape);
      vt::Tensor g = vtt::HostTensor(Rows(s.rows, s.width, 5, true), xd, shape);
      vt::Tensor w = vtt::HostTensor(Rows(1, s.width, 6, false), xd, {s.width});
      vt::Tensor out = vt::Tensor::Empty(shape, xd);
      vt::Tensor out_gpu = vt::Tensor::Empty(shape, xd, vtt::kCuda);
      vt::RmsNormGated(cpu, out, x, g, w, 1e-5f);
      const int64_t before = Count(OpId::kRmsNormGated);
      vt::RmsNormGated(gpu, out_gpu, x.To(vtt::kCuda), g.To(vtt::kCuda), w.To(vtt::kCuda), 1e-5f);
      EXPECT_EQ(Count(OpId::kRmsNormGated), before + 1);
      EXPECT_TRUE(vtt::SameBytes(out_gpu, out)) << s.rows << "x" << s.width << " " << vt::DTypeName(xd);
    }
  }
}

TEST(CudaActivation, SiluMulMatchesCpuBytes) {
  VT_REQUIRE_CUDA();
  vt::Queue cpu = vt::Queue::Cpu(), gpu = vt::Queue::Cuda(0);
  for (const auto& s : kShapes) {
    for (DType xd : {DType::kF32, DType::kBF16, DType::kF16}) {
      auto v = Rows(s.rows, 2 * s.width, 8, true);
      for (size_t i = 0; i < v.size(); i += 17) v[i] = (i % 2 ? 1.0f : -1.0f) * 95.0f;  // exp over/underflow
      vt::Tensor x = vtt::HostTensor(v, xd, {s.rows, 2 * s.width});
      vt::Tensor out = vt::Tensor::Empty({s.rows, s.width}, xd);
      vt::Tensor out_gpu = vt::Tensor::Empty({s.rows, s.width}, xd, vtt::kCuda);
      vt::SiluMul(cpu, out, x);
      const int64_t before = Count(OpId::kSiluMul);
      vt::SiluMul(gpu, out_gpu, x.To(vtt::kCuda));
      EXPECT_EQ(Count(OpId::kSiluMul), before + 1);
      EXPECT_TRUE(vtt::SameBytes(out_gpu, out)) << s.rows << "x" << s.width << " " << vt::DTypeName(xd);
    }
  }
}

TEST(CudaCast, EveryPairMatchesCpuBytes) {
  VT_REQUIRE_CUDA();
  vt::Queue cpu = vt::Queue::Cpu(), gpu = vt::Queue::Cuda(0);
  // Every 16-bit pattern, every fp8 byte, and f32 values around the bf16/f16 rounding points.
  std::vector<vt::Tensor> inputs;
  for (DType d : {DType::kBF16, DType::kF16}) {
    vt::Tensor t = vt::Tensor::Empty({65536}, d);
    for (int i = 0; i < 65536; ++i) t.data_as<uint16_t>()[i] = static_cast<uint16_t>(i);
    inputs.push_back(t);
  }
  vt::Tensor f8 = vt::Tensor::Empty({256}, DType::kF8E4M3);
  for (int i = 0; i < 256; ++i) f8.data_as<uint8_t>()[i] = static_cast<uint8_t>(i);
  inputs.push_back(f8);
  std::vector<float> fv;
  std::mt19937 rng(11);
  std::uniform_int_distribution<uint32_t> bits;
  for (int i = 0; i < 20000; ++i) {
    const uint32_t u = bits(rng);
    float f;
    std::memcpy(&f, &u, 4);
    fv.push_back(f);
  }
  for (float f : {65504.0f, 65520.0f, 65519.99f, 6e-8f, 3e-8f, 2.98e-8f, 1e-40f, -0.0f}) fv.push_back(f);
  inputs.push_back(vtt::HostTensor(fv, DType::kF32, {static_cast<int64_t>(fv.size())}));
  for (const auto& x : inputs) {
    for (DType od : {DType::kF32, DType::kBF16, DType::kF16}) {
      vt::Tensor out = vt::Tensor::Empty(x.shape(), od);
      vt::Tensor out_gpu = vt::Tensor::Empty(x.shape(), od, vtt::kCuda);
      vt::Cast(cpu, out, x);
      const int64_t before = Count(OpId::kCast);
      vt::Cast(gpu, out_gpu, x.To(vtt::kCuda));
      EXPECT_EQ(Count(OpId::kCast), before + 1);
      EXPECT_TRUE(vtt::SameBytes(out_gpu, out)) << vt::DTypeName(x.dtype()) << " -> " << vt::DTypeName(od);
    }
  }
}

const float kScales[] = {0.0092f, 0.13f, 0.77f, 1e-3f};  // 1e-3 saturates many values

TEST(CudaFused, RmsNormQuantFp8EqualsCpuAndComposite) {
  VT_REQUIRE_CUDA();
  vt::Queue cpu = vt::Queue::Cpu(), gpu = vt::Queue::Cuda(0);
  for (const auto& s : kShapes) {
    for (DType xd : {DType::kF32, DType::kBF16, DType::kF16}) {
      for (float scale : kScales) {
        for (int mode = 0; mode < 3; ++mode) {  // 0: plain, 1: residual, 2: residual + BF16 side output
          const vt::Shape shape{s.rows, s.width};
          const bool with_res = mode >= 1, with_normed = mode == 2;
          vt::Tensor x = vtt::HostTensor(Rows(s.rows, s.width, 21, true), xd, shape);
          vt::Tensor w = vtt::HostTensor(Rows(1, s.width, 22, false), xd, {s.width});
          vt::Tensor res0 = vtt::HostTensor(Rows(s.rows, s.width, 23, false), xd, shape);
          // CPU fused.
          vt::Tensor res_c = res0.To(vt::Device::Cpu());
          vt::Tensor q_c = vt::Tensor::Empty(shape, DType::kF8E4M3);
          vt::Tensor n_c = vt::Tensor::Empty(shape, DType::kBF16);
          vt::RmsNormQuantFp8(cpu, q_c, x, w, 1e-6f, scale, with_res ? &res_c : nullptr, with_normed ? &n_c : nullptr);
          // CUDA fused.
          vt::Tensor xg = x.To(vtt::kCuda), wg = w.To(vtt::kCuda);
          vt::Tensor res_g = res0.To(vtt::kCuda);
          vt::Tensor q_g = vt::Tensor::Empty(shape, DType::kF8E4M3, vtt::kCuda);
          vt::Tensor n_g = vt::Tensor::Empty(shape, DType::kBF16, vtt::kCuda);
          const int64_t before = Count(OpId::kRmsNormQuantFp8);
          vt::RmsNormQuantFp8(gpu, q_g, xg, wg, 1e-6f, scale, with_res ? &res_g : nullptr, with_normed ? &n_g : nullptr);
          EXPECT_EQ(Count(OpId::kRmsNormQuantFp8), before + 1);
          // CUDA composite (standalone RmsNorm then QuantFp8Static on CUDA).
          vt::FusedArgs args;
          args.out = vt::Tensor::Empty(shape, DType::kF8E4M3, vtt::kCuda);
          args.x = xg;
          args.weight = wg;
          if (with_res) args.residual = res0.To(vtt::kCuda);
          if (with_normed) args.normed_out = vt::Tensor::Empty(shape, DType::kBF16, vtt::kCuda);
          args.eps = 1e-6f;
          args.input_scale = scale;
          vt::FusedChainComposite(gpu, vt::recipes::kRmsNormQuantFp8, args);
          const std::string what = std::to_string(s.rows) + "x" + std::to_string(s.width) + " " +
                                   std::string(vt::DTypeName(xd)) + " scale " + std::to_string(scale) + " mode " +
                                   std::to_string(mode);
          EXPECT_TRUE(vtt::SameBytes(q_g, q_c)) << "fused cuda vs cpu " << what;
          EXPECT_TRUE(vtt::SameBytes(q_g, args.out)) << "fused vs composite " << what;
          if (with_res) {
            EXPECT_TRUE(vtt::SameBytes(res_g, res_c)) << "residual " << what;
            EXPECT_TRUE(vtt::SameBytes(res_g, args.residual)) << "residual composite " << what;
          }
          if (with_normed) {
            EXPECT_TRUE(vtt::SameBytes(n_g, n_c)) << "normed " << what;
            EXPECT_TRUE(vtt::SameBytes(n_g, args.normed_out)) << "normed composite " << what;
          }
        }
      }
    }
  }
}

TEST(CudaFused, RmsNormGatedQuantFp8EqualsCpuAndComposite) {
  VT_REQUIRE_CUDA();
  vt::Queue cpu = vt::Queue::Cpu(), gpu = vt::Queue::Cuda(0);
  for (const auto& s : kShapes) {
    for (DType xd : {DType::kF32, DType::kBF16, DType::kF16}) {
      for (float scale : kScales) {
        const vt::Shape shape{s.rows, s.width};
        vt::Tensor x = vtt::HostTensor(Rows(s.rows, s.width, 31, true), xd, shape);
        vt::Tensor g = vtt::HostTensor(Rows(s.rows, s.width, 32, true), xd, shape);
        vt::Tensor w = vtt::HostTensor(Rows(1, s.width, 33, false), xd, {s.width});
        vt::Tensor q_c = vt::Tensor::Empty(shape, DType::kF8E4M3);
        vt::RmsNormGatedQuantFp8(cpu, q_c, x, g, w, 1e-6f, scale);
        vt::Tensor xg = x.To(vtt::kCuda), gg = g.To(vtt::kCuda), wg = w.To(vtt::kCuda);
        vt::Tensor q_g = vt::Tensor::Empty(shape, DType::kF8E4M3, vtt::kCuda);
        const int64_t before = Count(OpId::kRmsNormGatedQuantFp8);
        vt::RmsNormGatedQuantFp8(gpu, q_g, xg, gg, wg, 1e-6f, scale);
        EXPECT_EQ(Count(OpId::kRmsNormGatedQuantFp8), before + 1);
        vt::FusedArgs args;
        args.out = vt::Tensor::Empty(shape, DType::kF8E4M3, vtt::kCuda);
        args.x = xg;
        args.gate = gg;
        args.weight = wg;
        args.eps = 1e-6f;
        args.input_scale = scale;
        vt::FusedChainComposite(gpu, vt::recipes::kRmsNormGatedQuantFp8, args);
        EXPECT_TRUE(vtt::SameBytes(q_g, q_c)) << s.rows << "x" << s.width << " " << vt::DTypeName(xd) << " " << scale;
        EXPECT_TRUE(vtt::SameBytes(q_g, args.out)) << "composite " << s.rows << "x" << s.width;
      }
    }
  }
}

TEST(CudaFused, SiluMulQuantFp8EqualsCpuAndComposite) {
  VT_REQUIRE_CUDA();
  vt::Queue cpu = vt::Queue::Cpu(), gpu = vt::Queue::Cuda(0);
  for (const auto& s : kShapes) {
    for (DType xd : {DType::kF32, DType::kBF16, DType::kF16}) {
      for (float scale : kScales) {
        vt::Tensor x = vtt::HostTensor(Rows(s.rows, 2 * s.width, 41, true), xd, {s.rows, 2 * s.width});
        vt::Tensor q_c = vt::Tensor::Empty({s.rows, s.width}, DType::kF8E4M3);
        vt::SiluMulQuantFp8(cpu, q_c, x, scale);
        vt::Tensor xg = x.To(vtt::kCuda);
        vt::Tensor q_g = vt::Tensor::Empty({s.rows, s.width}, DType::kF8E4M3, vtt::kCuda);
        const int64_t before = Count(OpId::kSiluMulQuantFp8);
        vt::SiluMulQuantFp8(gpu, q_g, xg, scale);
        EXPECT_EQ(Count(OpId::kSiluMulQuantFp8), before + 1);
        vt::FusedArgs args;
        args.out = vt::Tensor::Empty({s.rows, s.width}, DType::kF8E4M3, vtt::kCuda);
        args.x = xg;
        args.input_scale = scale;
        vt::FusedChainComposite(gpu, vt::recipes::kSiluMulQuantFp8, args);
        EXPECT_TRUE(vtt::SameBytes(q_g, q_c)) << s.rows << "x" << s.width << " " << vt::DTypeName(xd) << " " << scale;
        EXPECT_TRUE(vtt::SameBytes(q_g, args.out)) << "composite " << s.rows << "x" << s.width;
      }
    }
  }
}

}  // namespace
