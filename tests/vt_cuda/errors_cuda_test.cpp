// The CUDA backend refuses by name: absent devices, tensors on the wrong device, ops with
// no CUDA kernel. The absent-device test also runs (and passes) on machines without a GPU.
#include "cuda_test_util.h"
#include "vt/error_of.h"

namespace {

using vt::DType;
using vtt::ErrorOf;

TEST(CudaErrors, AbsentDeviceIsNamed) {
  const int n = vt::CudaDeviceCount();
  const std::string msg = ErrorOf([&] { vt::Queue::Cuda(n); });
  EXPECT_NE(msg.find("cuda:" + std::to_string(n)), std::string::npos) << msg;
  EXPECT_NE(msg.find("Queue::Cuda"), std::string::npos) << msg;
  const std::string alloc = ErrorOf([&] { vt::Tensor::Empty({4}, DType::kF32, vt::Device::Cuda(n)); });
  EXPECT_NE(alloc.find("cuda:" + std::to_string(n)), std::string::npos) << alloc;
}

TEST(CudaErrors, CudaKernelsAreRegistered) {
  for (vt::OpId op : {vt::OpId::kQuantFp8Static, vt::OpId::kMatmul, vt::OpId::kRmsNorm, vt::OpId::kRmsNormGated,
                      vt::OpId::kSiluMul, vt::OpId::kCast, vt::OpId::kRmsNormQuantFp8, vt::OpId::kRmsNormGatedQuantFp8,
                      vt::OpId::kSiluMulQuantFp8})
    EXPECT_TRUE(vt::OpRegistered(op, vt::DeviceType::kCUDA)) << vt::OpName(op);
}

TEST(CudaErrors, CpuTensorOnCudaQueueIsRefusedByName) {
  VT_REQUIRE_CUDA();
  vt::Queue gpu = vt::Queue::Cuda(0);
  vt::Tensor x_cpu = vtt::HostTensor({1.0f, 2.0f}, DType::kF32, {2});
  vt::Tensor out = vt::Tensor::Empty({2}, DType::kF8E4M3, vtt::kCuda);
  const std::string msg = ErrorOf([&] { vt::QuantFp8Static(gpu, out, x_cpu, 1.0f); });
  EXPECT_NE(msg.find("QuantFp8Static"), std::string::npos) << msg;
  EXPECT_NE(msg.find("x is on cpu"), std::string::npos) << msg;
  EXPECT_NE(msg.find("cuda:0"), std::string::npos) << msg;

  vt::Tensor a = vt::Tensor::Empty({2, 16}, DType::kF8E4M3, vtt::kCuda);
  vt::Tensor b_cpu = vt::Tensor::Empty({4, 16}, DType::kF8E4M3);
  vt::Tensor o = vt::Tensor::Empty({2, 4}, DType::kBF16, vtt::kCuda);
  const std::string mm = ErrorOf([&] { vt::MatmulFp8(gpu, o, a, b_cpu, 1.0f); });
  EXPECT_NE(mm.find("MatmulFp8: b is on cpu"), std::string::npos) << mm;
}

TEST(CudaErrors, CudaTensorOnCpuQueueIsRefusedByName) {
  VT_REQUIRE_CUDA();
  vt::Queue cpu = vt::Queue::Cpu(1);
  vt::Tensor x = vtt::HostTensor({1.0f, 2.0f, 3.0f, 4.0f}, DType::kF32, {1, 4}).To(vtt::kCuda);
  vt::Tensor w = vtt::HostTensor({1.0f, 1.0f, 1.0f, 1.0f}, DType::kF32, {4});
  vt::Tensor out = vt::Tensor::Empty({1, 4}, DType::kF32);
  const std::string msg = ErrorOf([&] { vt::RmsNorm(cpu, out, x, w, 1e-6f); });
  EXPECT_NE(msg.find("RmsNorm: x is on cuda:0 but the queue runs on cpu"), std::string::npos) << msg;
}

TEST(CudaErrors, MissingKernelIsRefusedByName) {
  // The model ops have no CUDA kernel in this build yet: OpRegistered says so, and dispatch
  // would refuse with the op and the devices that have one.
  for (vt::OpId op : {vt::OpId::kPagedAttention, vt::OpId::kKvCacheWrite}) {
    if (vt::OpRegistered(op, vt::DeviceType::kCUDA)) continue;
    const std::string msg = ErrorOf([&] { vt::detail::ThrowNoKernel(op, vt::DeviceType::kCUDA); });
    EXPECT_NE(msg.find(std::string(vt::OpName(op)) + ": no kernel for cuda"), std::string::npos) << msg;
  }
}

TEST(CudaErrors, CudaErrorsNameTheStatement) {
  VT_REQUIRE_CUDA();
  // An allocation far beyond the device's memory fails with a message naming the device.
  const std::string msg = ErrorOf([&] { vt::Tensor::Empty({int64_t{1} << 50}, DType::kU8, vtt::kCuda); });
  EXPECT_NE(msg.find("cuda:0"), std::string::npos) << msg;
}

}  // namespace
