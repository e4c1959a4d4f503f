// The 16-byte vector row kernels (norm.cu, activation.cu, quant.cu) and the per-token-group
// recipes (fused_group_quant.cu) on decode-batch shapes of the
// 0.6B and 8B models: byte-identical to the CPU, with the launch counters proving that the
// vector kernel ran; rows that start unaligned take the scalar kernels and give the same
// bytes, and so do SiLU-mul steps below the vector kernel's size. The op table
// (tests/vt/op_table_test.cpp) compares both paths with the CPU over its row shapes and
// dtypes.
#include "cuda_test_util.h"
#include "vt/cuda/kernels.h"

namespace {

using vt::DType;

// The per-token-group recipes are registered on CUDA only on request (fused_group_quant.cu);
// this binary tests them (set before main, so before vt registers its kernels on first use),
// also in the op table.
const int kFusedGroupQuantOn = setenv("VT_CUDA_FUSED_GROUP_QUANT", "1", 0);

// [rows, width] of dtype d on the CUDA device, starting `offset` elements into a larger
// allocation (offset 1: rows not 16-byte aligned).
vt::Tensor DeviceRows(const std::vector<float>& v, DType d, int64_t rows, int64_t width, int64_t offset) {
  std::vector<float> padded(static_cast<size_t>(offset), 0.5f);
  padded.insert(padded.end(), v.begin(), v.end());
  vt::Tensor all = vtt::HostTensor(padded, d, {offset + rows * width}).To(vtt::kCuda);
  return all.Slice(0, offset, offset + rows * width).View({rows, width});
}

TEST(CudaRowKernels, VectorKernelsMatchCpuAndAreDispatched) {
  VT_REQUIRE_CUDA();
  vt::Queue gpu = vt::Queue::Cuda(0), cpu = vt::Queue::Cpu();
  struct Shape {
    int64_t rows, H;
  };
  for (const Shape s : {Shape{1, 1024}, Shape{256, 1024}, Shape{1, 2560}, Shape{1, 4096}, Shape{256, 4096},
                        Shape{3, 8192}}) {
    for (const int64_t offset : {int64_t{0}, int64_t{1}}) {
      SCOPED_TRACE(testing::Message() << s.rows << " x " << s.H << " offset " << offset);
      const auto xv = vtt::Normal(static_cast<size_t>(s.rows * s.H), 1, 3.0f);
      const auto rv = vtt::Normal(static_cast<size_t>(s.rows * s.H), 2);
      const auto wv = vtt::Normal(static_cast<size_t>(s.H), 3);
      const auto gu = vtt::Normal(static_cast<size_t>(s.rows * 6 * s.H), 4, 4.0f);
      const vt::Tensor x = DeviceRows(xv, DType::kBF16, s.rows, s.H, offset);
      const vt::Tensor w = DeviceRows(wv, DType::kBF16, 1, s.H, 0).View({s.H});
      vt::Tensor res = DeviceRows(rv, DType::kBF16, s.rows, s.H, offset);
      vt::Tensor q = vt::Tensor::Empty({s.rows, s.H}, DType::kF8E4M3, vtt::kCuda);
      vt::Tensor normed = vt::Tensor::Empty({s.rows, s.H}, DType::kBF16, vtt::kCuda);
      vt::Tensor xh = x.To(vt::Device::Cpu()), wh = w.To(vt::Device::Cpu()), rh = res.To(vt::Device::Cpu());
      vt::Tensor qh = vt::Tensor::Empty({s.rows, s.H}, DType::kF8E4M3, vt::Device::Cpu());
      vt::Tensor nh = vt::Tensor::Empty({s.rows, s.H}, DType::kBF16, vt::Device::Cpu());

      const int64_t norm_before = vt::cuda::RmsNormVecLaunches();
      const int64_t wide_before = vt::cuda::RmsNormWideVecLaunches();
      vt::RmsNormQuantFp8(gpu, q, x, w, 1e-6f, 0.013f, &res, &normed);
      vt::RmsNormQuantFp8(cpu, qh, xh, wh, 1e-6f, 0.013f, &rh, &nh);
      gpu.Synchronize();
      EXPECT_EQ(vt::cuda::RmsNormVecLaunches() - norm_before, offset == 0 ? 1 : 0);
      // Rows over 2048 wide take a CTA of one thread per vector (512 or 1024 threads).
      EXPECT_EQ(vt::cuda::RmsNormWideVecLaunches() - wide_before, offset == 0 && s.H > 2048 ? 1 : 0);
      EXPECT_TRUE(vtt::SameBytes(q, qh));
      EXPECT_TRUE(vtt::SameBytes(res, rh));
      EXPECT_TRUE(vtt::SameBytes(normed, nh));

      // The FP8 quantization of x alone (a prefill's o_proj input): vectors from 131072
      // elements.
      vt::Tensor xq = vt::Tensor::Empty({s.rows, s.H}, DType::kF8E4M3, vtt::kCuda);
      vt::Tensor xqh = vt::Tensor::Empty({s.rows, s.H}, DType::kF8E4M3, vt::Device::Cpu());
      const int64_t quant_before = vt::cuda::QuantFp8VecLaunches();
      vt::QuantFp8Static(gpu, xq, x, 0.013f);
      vt::QuantFp8Static(cpu, xqh, xh, 0.013f);
      gpu.Synchronize();
      EXPECT_EQ(vt::cuda::QuantFp8VecLaunches() - quant_before, offset == 0 && s.rows * s.H >= (1 << 17) ? 1 : 0);
      EXPECT_TRUE(vtt::SameBytes(xq, xqh));

      // SiLU-mul with an MLP three times as wide, to FP8 and to BF16.
      const int64_t I = 3 * s.H;
      const vt::Tensor g = DeviceRows(gu, DType::kBF16, s.rows, 2 * I, offset);
      vt::Tensor gq = vt::Tensor::Empty({s.rows, I}, DType::kF8E4M3, vtt::kCuda);
      vt::Tensor gb = vt::Tensor::Empty({s.rows, I}, DType::kBF16, vtt::kCuda);
      vt::Tensor gh = g.To(vt::Device::Cpu());
      vt::Tensor gqh = vt::Tensor::Empty({s.rows, I}, DType::kF8E4M3, vt::Device::Cpu());
      vt::Tensor gbh = vt::Tensor::Empty({s.rows, I}, DType::kBF16, vt::Device::Cpu());
      const int64_t silu_before = vt::cuda::SiluMulVecLaunches();
      vt::SiluMulQuantFp8(gpu, gq, g, 0.021f);
      vt::SiluMul(gpu, gb, g);
      vt::SiluMulQuantFp8(cpu, gqh, gh, 0.021f);
      vt::SiluMul(cpu, gbh, gh);
      gpu.Synchronize();
      // (the vector kernel from 131072 elements: 256 rows here, not 1 or 3)
      EXPECT_EQ(vt::cuda::SiluMulVecLaunches() - silu_before, offset == 0 && s.rows * I >= (1 << 17) ? 2 : 0);
      EXPECT_TRUE(vtt::SameBytes(gq, gqh));
      EXPECT_TRUE(vtt::SameBytes(gb, gbh));
    }
  }
}

// The per-token-group recipes (fused_group_quant.cu) on model shapes: the 8B's hidden rows
// (staged in shared memory), a row past the staging limit (formed again from global memory),
// the 8B's SiLU-mul width and the gated norm's 128-wide heads; the CUDA op equals the CPU's
// composite (RMSNorm or SiLU-mul to BF16, then QuantFp8PerTokenGroup) byte for byte, fp8
// codes, scales, the updated residual and the BF16 side output, and the launch counters
// prove the fused kernel ran on the path expected.
TEST(CudaRowKernels, GroupQuantRecipesMatchCpuCompositeAndAreDispatched) {
  VT_REQUIRE_CUDA();
  ASSERT_EQ(kFusedGroupQuantOn, 0);
  ASSERT_TRUE(vt::OpRegistered(vt::OpId::kRmsNormQuantFp8PerTokenGroup, vt::DeviceType::kCUDA));
  vt::Queue gpu = vt::Queue::Cuda(0), cpu = vt::Queue::Cpu();
  const vt::Device host = vt::Device::Cpu();
  struct Case {
    int64_t rows, H, group;
    float amax_floor, scale_floor;
    DType d;
  };
  const float bf = vt::kFp8BlockAmaxFloor, tf = vt::kFp8PerTokenScaleFloor;
  for (const Case c : {Case{1, 4096, 128, bf, 0.0f, DType::kBF16}, Case{256, 4096, 128, bf, 0.0f, DType::kBF16},
                       Case{3, 4096, 4096, 0.0f, tf, DType::kBF16}, Case{2, 20000, 128, bf, 0.0f, DType::kBF16},
                       Case{1, 12288, 128, bf, 0.0f, DType::kBF16}, Case{1, 16384, 128, bf, 0.0f, DType::kBF16},
                       Case{64, 128, 128, bf, 0.0f, DType::kBF16}, Case{3, 4096, 128, bf, 0.0f, DType::kF32}}) {
    SCOPED_TRACE(testing::Message() << c.rows << " x " << c.H << " group " << c.group << " " << vt::DTypeName(c.d));
    // BF16 rows up to 16384 wide: the vector kernel (SiLU-mul at any width, in slices of
    // whole groups); F32 ones: the scalar kernel, staged up to 16384, else from global memory.
    const bool vec = c.d == DType::kBF16, fits = c.H <= 16384;
    const int64_t G = (c.H + c.group - 1) / c.group;
    auto dev = [&](const std::vector<float>& v, const vt::Shape& shape) {
      return vtt::HostTensor(v, c.d, shape).To(vtt::kCuda);
    };
    const vt::Shape shape{c.rows, c.H};
    const vt::Tensor x = dev(vtt::Normal(static_cast<size_t>(c.rows * c.H), 11, 3.0f), shape);
    const vt::Tensor gate = dev(vtt::Normal(static_cast<size_t>(c.rows * c.H), 12, 2.0f), shape);
    const vt::Tensor w = dev(vtt::Normal(static_cast<size_t>(c.H), 13), {c.H});
    const vt::Tensor gu = dev(vtt::Normal(static_cast<size_t>(c.rows * 2 * c.H), 14, 4.0f), {c.rows, 2 * c.H});
    vt::Tensor res = dev(vtt::Normal(static_cast<size_t>(c.rows * c.H), 15), shape);
    vt::Tensor res_h = res.To(host);
    auto out8 = [&](vt::Device d) { return vt::Tensor::Empty(shape, DType::kF8E4M3, d); };
    auto scales = [&](vt::Device d) { return vt::Tensor::Empty({c.rows, G}, DType::kF32, d); };
    vt::FusedArgs want;  // the CPU composite
    want.x = x.To(host);
    want.weight = w.To(host);
    want.eps = 1e-6f;
    want.group_size = c.group;
    want.amax_floor = c.amax_floor;
    want.scale_floor = c.scale_floor;

    // RmsNorm with the residual and the BF16 side output.
    vt::Tensor q = out8(vtt::kCuda), s = scales(vtt::kCuda), normed = vt::Tensor::Empty(shape, DType::kBF16, vtt::kCuda);
    want.out = out8(host);
    want.scales = scales(host);
    want.residual = res_h;
    want.normed_out = vt::Tensor::Empty(shape, DType::kBF16, host);
    auto before = vt::cuda::FusedGroupQuantLaunches();
    vt::RmsNormQuantFp8PerTokenGroup(gpu, q, s, x, w, 1e-6f, c.group, c.amax_floor, c.scale_floor, &res, &normed);
    vt::FusedChainComposite(cpu, vt::recipes::kRmsNormQuantFp8PerTokenGroup, want);
    gpu.Synchronize();
    auto after = vt::cuda::FusedGroupQuantLaunches();
    EXPECT_EQ(after.launches - before.launches, 1);
    EXPECT_EQ(after.vec - before.vec, vec && fits ? 1 : 0);
    EXPECT_EQ(after.staged - before.staged, !vec && fits ? 1 : 0);
    EXPECT_TRUE(vtt::SameBytes(q, want.out));
    EXPECT_TRUE(vtt::SameBytes(s, want.scales));
    EXPECT_TRUE(vtt::SameBytes(res, want.residual));
    EXPECT_TRUE(vtt::SameBytes(normed, want.normed_out));

    // Gated RmsNorm.
    want.residual = vt::Tensor();
    want.normed_out = vt::Tensor();
    want.gate = gate.To(host);
    want.out = out8(host);
    want.scales = scales(host);
    before = vt::cuda::FusedGroupQuantLaunches();
    vt::RmsNormGatedQuantFp8PerTokenGroup(gpu, q, s, x, gate, w, 1e-6f, c.group, c.amax_floor, c.scale_floor);
    vt::FusedChainComposite(cpu, vt::recipes::kRmsNormGatedQuantFp8PerTokenGroup, want);
    gpu.Synchronize();
    after = vt::cuda::FusedGroupQuantLaunches();
    EXPECT_EQ(after.launches - before.launches, 1);
    EXPECT_EQ(after.vec - before.vec, vec && fits ? 1 : 0);
    EXPECT_TRUE(vtt::SameBytes(q, want.out));
    EXPECT_TRUE(vtt::SameBytes(s, want.scales));

    // SiLU-mul of [gate | up] rows twice as wide.
    want.x = gu.To(host);
    want.out = out8(host);
    want.scales = scales(host);
    before = vt::cuda::FusedGroupQuantLaunches();
    vt::SiluMulQuantFp8PerTokenGroup(gpu, q, s, gu, c.group, c.amax_floor, c.scale_floor);
    vt::FusedChainComposite(cpu, vt::recipes::kSiluMulQuantFp8PerTokenGroup, want);
    gpu.Synchronize();
    after = vt::cuda::FusedGroupQuantLaunches();
    EXPECT_EQ(after.launches - before.launches, 1);
    EXPECT_EQ(after.vec - before.vec, vec ? 1 : 0);
    EXPECT_EQ(after.staged - before.staged, !vec && fits ? 1 : 0);
    EXPECT_TRUE(vtt::SameBytes(q, want.out));
    EXPECT_TRUE(vtt::SameBytes(s, want.scales));
  }
}

}  // namespace
