// The 16-byte vector row kernels (norm.cu, activation.cu, quant.cu) on decode-batch shapes of the
// 0.6B and 8B models: byte-identical to the CPU, with the launch counters proving that the
// vector kernel ran; rows that start unaligned take the scalar kernels and give the same
// bytes, and so do SiLU-mul steps below the vector kernel's size. The op table
// (tests/vt/op_table_test.cpp) compares both paths with the CPU over its row shapes and
// dtypes.
#include "cuda_test_util.h"
#include "vt/cuda/kernels.h"

namespace {

using vt::DType;

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

}  // namespace
