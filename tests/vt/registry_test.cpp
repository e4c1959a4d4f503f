// The registry tells the truth and refuses by name; op entry points validate their
// arguments and throw vt::Error naming the op, the argument and the values.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "elementwise_test_util.h"
#include "vt/vt.h"

namespace {

using vt_test::ExpectErrorWith;

TEST(Registry, CpuKernelsAreRegistered) {
  for (vt::OpId op : {vt::OpId::kQuantFp8Static, vt::OpId::kMatmulFp8, vt::OpId::kMatmul, vt::OpId::kRmsNorm,
                      vt::OpId::kRmsNormGated, vt::OpId::kSiluMul, vt::OpId::kCast, vt::OpId::kRmsNormQuantFp8,
                      vt::OpId::kRmsNormGatedQuantFp8, vt::OpId::kSiluMulQuantFp8}) {
    EXPECT_TRUE(vt::OpRegistered(op, vt::DeviceType::kCPU)) << vt::OpName(op);
  }
}

// OpRegistered agrees with what dispatch finds: Kernel<id>(device) returns a kernel exactly
// when OpRegistered says so, and otherwise throws "<Op>: no kernel for <device>".
template <vt::OpId id>
void ExpectTruthful(vt::DeviceType device) {
  const bool registered = vt::OpRegistered(id, device);
  bool found = false;
  try {
    found = vt::Kernel<id>(device) != nullptr;
  } catch (const vt::Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find(std::string(vt::OpName(id)) + ": no kernel for " + vt::DeviceTypeName(device)),
              std::string::npos)
        << msg;
  }
  EXPECT_EQ(registered, found) << vt::OpName(id) << " on " << vt::DeviceTypeName(device);
}

TEST(Registry, OpRegisteredMatchesDispatch) {
  for (vt::DeviceType d : {vt::DeviceType::kCPU, vt::DeviceType::kCUDA}) {
    ExpectTruthful<vt::OpId::kQuantFp8Static>(d);
    ExpectTruthful<vt::OpId::kMatmulFp8>(d);
    ExpectTruthful<vt::OpId::kMatmul>(d);
    ExpectTruthful<vt::OpId::kRmsNorm>(d);
    ExpectTruthful<vt::OpId::kRmsNormGated>(d);
    ExpectTruthful<vt::OpId::kSiluMul>(d);
    ExpectTruthful<vt::OpId::kCast>(d);
    ExpectTruthful<vt::OpId::kRmsNormQuantFp8>(d);
    ExpectTruthful<vt::OpId::kRmsNormGatedQuantFp8>(d);
    ExpectTruthful<vt::OpId::kSiluMulQuantFp8>(d);
  }
}

TEST(Registry, CudaQueueRefusesByNameWhenUnavailable) {
  if (!vt::OpRegistered(vt::OpId::kQuantFp8Static, vt::DeviceType::kCUDA)) {
    // A build without CUDA: nothing is registered there and asking for it is refused by name.
    for (int i = 0; i < vt::kNumOps; ++i)
      EXPECT_FALSE(vt::OpRegistered(static_cast<vt::OpId>(i), vt::DeviceType::kCUDA))
          << vt::OpName(static_cast<vt::OpId>(i));
    ExpectErrorWith([] { vt::Queue::Cuda(); }, {"Queue::Cuda", "without CUDA"});
    ExpectErrorWith([] { vt::Kernel<vt::OpId::kQuantFp8Static>(vt::DeviceType::kCUDA); },
                    {"QuantFp8Static: no kernel for cuda", "registered: cpu"});
    return;
  }
  // A CUDA build: a device index past the visible GPUs is refused with an error naming it.
  const int n = vt::CudaDeviceCount();
  try {
    vt::Queue::Cuda(n);
    ADD_FAILURE() << "Queue::Cuda(" << n << ") succeeded with " << n << " visible GPUs";
  } catch (const vt::Error& e) {
    EXPECT_NE(std::string(e.what()).find("cuda"), std::string::npos) << e.what();
  }
}

TEST(Registry, DispatchCountsTheKernelThatRan) {
  vt::Queue q = vt::Queue::Cpu(1);
  const int64_t before = vt::DispatchCount(vt::OpId::kQuantFp8Static, vt::DeviceType::kCPU);
  vt::Tensor x = vt_test::MakeTensor({1.0f, 2.0f}, {2}, vt::DType::kF32);
  vt::Tensor out = vt::Tensor::Empty({2}, vt::DType::kF8E4M3);
  vt::QuantFp8Static(q, out, x, 1.0f);
  EXPECT_EQ(vt::DispatchCount(vt::OpId::kQuantFp8Static, vt::DeviceType::kCPU), before + 1);
}

// MatmulFp8 applies alpha: out = alpha * Σ a·b against a float64 reference of the fp8 values.
TEST(Registry, MatmulFp8AppliesAlpha) {
  const int64_t M = 3, N = 5, K = 37;
  vt::Tensor a = vt::Tensor::Empty({M, K}, vt::DType::kF8E4M3), b = vt::Tensor::Empty({N, K}, vt::DType::kF8E4M3);
  for (int64_t i = 0; i < M * K; ++i) a.data_as<uint8_t>()[i] = static_cast<uint8_t>((i * 37 + 11) % 0x77);
  for (int64_t i = 0; i < N * K; ++i) b.data_as<uint8_t>()[i] = static_cast<uint8_t>(((i * 53 + 5) % 0x77) | (i % 3 ? 0 : 0x80));
  for (float alpha : {0.37f, 3.0f}) {
    vt::Tensor out = vt::Tensor::Empty({M, N}, vt::DType::kF32);
    vt::MatmulFp8(vt::Queue::Cpu(2), out, a, b, alpha);
    for (int64_t m = 0; m < M; ++m)
      for (int64_t n = 0; n < N; ++n) {
        double ref = 0, mag = 0;
        for (int64_t k = 0; k < K; ++k) {
          const double p = vt_test::DecodeE4M3(a.data_as<uint8_t>()[m * K + k]) *
                           vt_test::DecodeE4M3(b.data_as<uint8_t>()[n * K + k]);
          ref += p;
          mag += std::fabs(p);
        }
        EXPECT_NEAR(out.data_as<float>()[m * N + n], alpha * ref, 4 * K * 1.2e-7 * alpha * mag + 1e-6)
            << "alpha " << alpha << " at [" << m << ", " << n << "]";
      }
  }
}

// ---- validation --------------------------------------------------------------------------

// A tensor that claims to live on cuda:0; dispatch must refuse it before touching its bytes.
vt::Tensor FakeCuda(const vt::Shape& shape, vt::DType dtype) {
  static float dummy[16];
  return vt::Tensor::Borrow(dummy, shape, dtype, vt::Device::Cuda(0), nullptr);
}

TEST(Validation, WrongDeviceTensorIsRefusedByName) {
  vt::Queue q = vt::Queue::Cpu(1);
  vt::Tensor x = vt::Tensor::Empty({4, 8}, vt::DType::kBF16);
  vt::Tensor w = vt::Tensor::Empty({8}, vt::DType::kBF16);
  vt::Tensor q8 = vt::Tensor::Empty({4, 8}, vt::DType::kF8E4M3);
  vt::Tensor y = vt::Tensor::Empty({4, 8}, vt::DType::kBF16);
  vt::Tensor cx = FakeCuda({4, 8}, vt::DType::kBF16);
  ExpectErrorWith([&] { vt::QuantFp8Static(q, q8, cx, 1.0f); }, {"QuantFp8Static", "x", "cuda:0", "cpu"});
  ExpectErrorWith([&] { vt::QuantFp8Static(q, FakeCuda({4, 8}, vt::DType::kF8E4M3), x, 1.0f); },
                  {"QuantFp8Static", "out", "cuda:0"});
  ExpectErrorWith([&] { vt::RmsNorm(q, y, x, FakeCuda({8}, vt::DType::kBF16), 1e-6f); }, {"RmsNorm", "weight", "cuda:0"});
  vt::Tensor cres = FakeCuda({4, 8}, vt::DType::kBF16);
  ExpectErrorWith([&] { vt::RmsNorm(q, y, x, w, 1e-6f, &cres); }, {"RmsNorm", "residual", "cuda:0"});
  ExpectErrorWith([&] { vt::RmsNormGated(q, y, x, cx, w, 1e-6f); }, {"RmsNormGated", "gate", "cuda:0"});
  ExpectErrorWith([&] { vt::SiluMul(q, FakeCuda({4, 4}, vt::DType::kBF16), x); }, {"SiluMul", "out", "cuda:0"});
  ExpectErrorWith([&] { vt::Cast(q, y, cx); }, {"Cast", "x", "cuda:0"});
  ExpectErrorWith([&] { vt::RmsNormQuantFp8(q, q8, cx, w, 1e-6f, 1.0f); }, {"RmsNormQuantFp8", "x", "cuda:0"});
  vt::Tensor cnormed = FakeCuda({4, 8}, vt::DType::kBF16);
  ExpectErrorWith([&] { vt::RmsNormQuantFp8(q, q8, x, w, 1e-6f, 1.0f, nullptr, &cnormed); },
                  {"RmsNormQuantFp8", "normed_out", "cuda:0"});
  ExpectErrorWith([&] { vt::RmsNormGatedQuantFp8(q, q8, x, cx, w, 1e-6f, 1.0f); },
                  {"RmsNormGatedQuantFp8", "gate", "cuda:0"});
  ExpectErrorWith([&] { vt::SiluMulQuantFp8(q, FakeCuda({4, 4}, vt::DType::kF8E4M3), x, 1.0f); },
                  {"SiluMulQuantFp8", "out", "cuda:0"});
}

TEST(Validation, QuantFp8StaticRejectsBadScalesShapesDTypesAndLayouts) {
  vt::Queue q = vt::Queue::Cpu(1);
  vt::Tensor x = vt::Tensor::Empty({4, 8}, vt::DType::kF32);
  vt::Tensor out = vt::Tensor::Empty({4, 8}, vt::DType::kF8E4M3);
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  for (float s : {0.0f, -0.0f, -1.0f, nan, inf, -inf})
    ExpectErrorWith([&] { vt::QuantFp8Static(q, out, x, s); }, {"QuantFp8Static", "input_scale", "finite and > 0"});
  ExpectErrorWith([&] { vt::QuantFp8Static(q, vt::Tensor::Empty({4, 7}, vt::DType::kF8E4M3), x, 1.0f); },
                  {"QuantFp8Static", "out", "[4, 7]", "[4, 8]"});
  ExpectErrorWith([&] { vt::QuantFp8Static(q, vt::Tensor::Empty({4, 8}, vt::DType::kBF16), x, 1.0f); },
                  {"QuantFp8Static", "out", "BF16", "F8E4M3"});
  ExpectErrorWith([&] { vt::QuantFp8Static(q, out, vt::Tensor::Empty({4, 8}, vt::DType::kI32), 1.0f); },
                  {"QuantFp8Static", "x", "I32"});
  vt::Tensor wide = vt::Tensor::Empty({4, 16}, vt::DType::kF32);
  ExpectErrorWith([&] { vt::QuantFp8Static(q, out, wide.Slice(1, 0, 8), 1.0f); },
                  {"QuantFp8Static", "x", "contiguous"});
  ExpectErrorWith([&] { vt::QuantFp8Static(q, out, vt::Tensor(), 1.0f); }, {"QuantFp8Static", "x", "undefined"});
}

TEST(Validation, NormsActivationsAndFusedRejectBadArguments) {
  vt::Queue q = vt::Queue::Cpu(1);
  vt::Tensor x = vt::Tensor::Empty({4, 8}, vt::DType::kBF16);
  vt::Tensor w = vt::Tensor::Empty({8}, vt::DType::kBF16);
  vt::Tensor y = vt::Tensor::Empty({4, 8}, vt::DType::kBF16);
  vt::Tensor q8 = vt::Tensor::Empty({4, 8}, vt::DType::kF8E4M3);
  ExpectErrorWith([&] { vt::RmsNorm(q, y, x, vt::Tensor::Empty({7}, vt::DType::kBF16), 1e-6f); },
                  {"RmsNorm", "weight", "[7]", "[8]"});
  ExpectErrorWith([&] { vt::RmsNorm(q, y, x, w, std::nanf("")); }, {"RmsNorm", "eps", "finite"});
  vt::Tensor res_f32 = vt::Tensor::Empty({4, 8}, vt::DType::kF32);
  ExpectErrorWith([&] { vt::RmsNorm(q, y, x, w, 1e-6f, &res_f32); }, {"RmsNorm", "residual", "F32", "BF16"});
  ExpectErrorWith([&] { vt::RmsNorm(q, y, vt::Tensor::Empty({4, 0}, vt::DType::kBF16), w, 1e-6f); },
                  {"RmsNorm", "x", "[4, 0]"});
  ExpectErrorWith([&] { vt::RmsNormGated(q, y, x, vt::Tensor::Empty({4, 9}, vt::DType::kBF16), w, 1e-6f); },
                  {"RmsNormGated", "gate", "[4, 9]"});
  ExpectErrorWith([&] { vt::SiluMul(q, y, vt::Tensor::Empty({4, 7}, vt::DType::kBF16)); }, {"SiluMul", "x", "even"});
  ExpectErrorWith([&] { vt::SiluMul(q, y, x); }, {"SiluMul", "out", "[4, 8]", "[4, 4]"});
  ExpectErrorWith([&] { vt::Cast(q, vt::Tensor::Empty({4, 8}, vt::DType::kF8E4M3), x); }, {"Cast", "out", "F8E4M3"});
  ExpectErrorWith([&] { vt::Cast(q, vt::Tensor::Empty({8, 4}, vt::DType::kF32), x); }, {"Cast", "out", "[8, 4]"});
  for (float s : {0.0f, -2.0f, std::numeric_limits<float>::infinity(), std::nanf("")}) {
    ExpectErrorWith([&] { vt::RmsNormQuantFp8(q, q8, x, w, 1e-6f, s); }, {"RmsNormQuantFp8", "input_scale"});
    ExpectErrorWith([&] { vt::RmsNormGatedQuantFp8(q, q8, x, x, w, 1e-6f, s); },
                    {"RmsNormGatedQuantFp8", "input_scale"});
    ExpectErrorWith([&] { vt::SiluMulQuantFp8(q, vt::Tensor::Empty({4, 4}, vt::DType::kF8E4M3), x, s); },
                    {"SiluMulQuantFp8", "input_scale"});
  }
  ExpectErrorWith([&] { vt::RmsNormQuantFp8(q, y, x, w, 1e-6f, 1.0f); }, {"RmsNormQuantFp8", "out", "F8E4M3"});
  vt::Tensor normed_f32 = vt::Tensor::Empty({4, 8}, vt::DType::kF32);
  ExpectErrorWith([&] { vt::RmsNormQuantFp8(q, q8, x, w, 1e-6f, 1.0f, nullptr, &normed_f32); },
                  {"RmsNormQuantFp8", "normed_out", "BF16"});
  vt::Tensor wide = vt::Tensor::Empty({4, 16}, vt::DType::kBF16);
  ExpectErrorWith([&] { vt::RmsNormQuantFp8(q, q8, wide.Slice(1, 0, 8), w, 1e-6f, 1.0f); },
                  {"RmsNormQuantFp8", "x", "contiguous"});
  ExpectErrorWith([&] { vt::SiluMulQuantFp8(q, q8, x, 1.0f); }, {"SiluMulQuantFp8", "out", "[4, 4]"});
}

// Tensor::SetReadOnly: every op refuses a read-only tensor where it writes (by op and
// argument name, leaving the bytes as they were), reads it like any other, and the flag
// belongs to the bytes (views and slices share it; a copy is writable).
TEST(Validation, ReadOnlyTensorsAreRefusedAsOutputs) {
  vt::Queue q = vt::Queue::Cpu(1);
  auto ro = [](vt::Tensor t) {
    std::memset(t.data(), 0x11, t.nbytes());
    t.SetReadOnly();
    return t;
  };
  vt::Tensor x = vt::Tensor::Empty({4, 8}, vt::DType::kBF16);
  for (int i = 0; i < 32; ++i) x.data_as<uint16_t>()[i] = vt::FloatToBf16(0.25f * static_cast<float>(i % 7) - 0.5f);
  vt::Tensor w = vt::Tensor::Empty({8}, vt::DType::kBF16);
  for (int i = 0; i < 8; ++i) w.data_as<uint16_t>()[i] = vt::FloatToBf16(1.0f);
  vt::Tensor y = vt::Tensor::Empty({4, 8}, vt::DType::kBF16);
  vt::Tensor q8 = vt::Tensor::Empty({4, 8}, vt::DType::kF8E4M3);

  vt::Tensor y_ro = ro(vt::Tensor::Empty({4, 8}, vt::DType::kBF16));
  vt::Tensor q8_ro = ro(vt::Tensor::Empty({4, 8}, vt::DType::kF8E4M3));
  vt::Tensor half_ro = ro(vt::Tensor::Empty({4, 4}, vt::DType::kBF16));
  vt::Tensor half8_ro = ro(vt::Tensor::Empty({4, 4}, vt::DType::kF8E4M3));
  const std::vector<std::pair<std::function<void()>, std::vector<std::string>>> refused = {
      {[&] { vt::QuantFp8Static(q, q8_ro, x, 1.0f); }, {"QuantFp8Static", "out", "read-only"}},
      {[&] { vt::Cast(q, y_ro, x); }, {"Cast", "out", "read-only"}},
      {[&] { vt::RmsNorm(q, y_ro, x, w, 1e-6f); }, {"RmsNorm", "out", "read-only"}},
      {[&] { vt::RmsNorm(q, y, x, w, 1e-6f, &y_ro); }, {"RmsNorm", "residual", "read-only"}},
      {[&] { vt::RmsNormGated(q, y_ro, x, x, w, 1e-6f); }, {"RmsNormGated", "out", "read-only"}},
      {[&] { vt::SiluMul(q, half_ro, x); }, {"SiluMul", "out", "read-only"}},
      {[&] { vt::RmsNormQuantFp8(q, q8_ro, x, w, 1e-6f, 1.0f); }, {"RmsNormQuantFp8", "out", "read-only"}},
      {[&] { vt::RmsNormQuantFp8(q, q8, x, w, 1e-6f, 1.0f, &y_ro); }, {"RmsNormQuantFp8", "residual", "read-only"}},
      {[&] { vt::RmsNormQuantFp8(q, q8, x, w, 1e-6f, 1.0f, nullptr, &y_ro); },
       {"RmsNormQuantFp8", "normed_out", "read-only"}},
      {[&] { vt::RmsNormGatedQuantFp8(q, q8_ro, x, x, w, 1e-6f, 1.0f); }, {"RmsNormGatedQuantFp8", "out", "read-only"}},
      {[&] { vt::SiluMulQuantFp8(q, half8_ro, x, 1.0f); }, {"SiluMulQuantFp8", "out", "read-only"}},
      {[&] { vt::MatmulFp8(q, ro(vt::Tensor::Empty({4, 4}, vt::DType::kF32)), q8, q8.View({4, 8}), 1.0f); },
       {"MatmulFp8", "out", "read-only"}},
      {[&] { vt::Matmul(q, ro(vt::Tensor::Empty({4, 4}, vt::DType::kF32)), x, x); }, {"Matmul", "out", "read-only"}},
      {[&] {
         vt::Tensor ids = vt::Tensor::Empty({2}, vt::DType::kI32);
         ids.data_as<int32_t>()[0] = 1;
         ids.data_as<int32_t>()[1] = 3;
         vt::Embedding(q, ro(vt::Tensor::Empty({2, 8}, vt::DType::kBF16)), x, ids);
       },
       {"Embedding", "out", "read-only"}},
      {[&] {
         vt::Tensor pos = vt::Tensor::Empty({4}, vt::DType::kI64);
         for (int i = 0; i < 4; ++i) pos.data_as<int64_t>()[i] = i;
         vt::Tensor cs = vt::Tensor::Empty({8, 8}, vt::DType::kF32);
         vt::RotaryEmbedding(q, pos, y_ro, nullptr, cs, 8);
       },
       {"RotaryEmbedding", "query", "read-only"}},
      {[&] {
         vt::Tensor cache = vt::Tensor::Empty({2, 4, 1, 8}, vt::DType::kBF16);
         vt::Tensor slots = vt::Tensor::Empty({4}, vt::DType::kI64);
         for (int i = 0; i < 4; ++i) slots.data_as<int64_t>()[i] = i;
         vt::KvCacheWrite(q, x, x, ro(vt::Tensor::Empty({2, 4, 1, 8}, vt::DType::kBF16)), cache, slots);
       },
       {"KvCacheWrite", "key_cache", "read-only"}},
      {[&] { y_ro.CopyFrom(x); }, {"CopyFrom", "read-only"}},
  };
  for (const auto& [fn, words] : refused) ExpectErrorWith(fn, words);
  // The refused calls left the read-only bytes alone.
  for (const vt::Tensor* t : {&y_ro, &q8_ro, &half_ro, &half8_ro})
    for (size_t i = 0; i < t->nbytes(); ++i) ASSERT_EQ(static_cast<const uint8_t*>(t->data())[i], 0x11) << i;

  // Read-only operands are read like any other: same bytes out as from a writable copy.
  vt::Tensor x_ro = ro(vt::Tensor::Empty({4, 8}, vt::DType::kBF16));
  vt::Tensor x_rw = x_ro.To(vt::Device::Cpu());
  EXPECT_TRUE(x_ro.read_only());
  EXPECT_FALSE(x_rw.read_only());
  EXPECT_TRUE(x_ro.View({8, 4}).read_only());
  EXPECT_TRUE(x_ro.Slice(0, 1, 3).read_only());
  vt::Tensor out_ro = vt::Tensor::Empty({4, 8}, vt::DType::kF8E4M3), out_rw = vt::Tensor::Empty({4, 8}, vt::DType::kF8E4M3);
  vt::RmsNormQuantFp8(q, out_ro, x_ro, w, 1e-6f, 0.5f);
  vt::RmsNormQuantFp8(q, out_rw, x_rw, w, 1e-6f, 0.5f);
  EXPECT_EQ(std::memcmp(out_ro.data(), out_rw.data(), out_rw.nbytes()), 0);
  vt::Tensor mm_ro = vt::Tensor::Empty({4, 4}, vt::DType::kF32), mm_rw = vt::Tensor::Empty({4, 4}, vt::DType::kF32);
  vt::Tensor b8 = vt::Tensor::Empty({4, 8}, vt::DType::kF8E4M3);
  std::memcpy(b8.data(), out_rw.data(), b8.nbytes());
  vt::Tensor b8_ro = b8.To(vt::Device::Cpu());
  b8_ro.SetReadOnly();
  // (At the scalar level, whose kernels read every weight as stored.)
  const vt::Queue q_f32 = vt::Queue::Cpu(1, vt::CpuIsa::kScalar);
  vt::MatmulFp8(q_f32, mm_ro, out_rw, b8_ro, 0.5f);
  vt::MatmulFp8(q_f32, mm_rw, out_rw, b8, 0.5f);
  EXPECT_EQ(std::memcmp(mm_ro.data(), mm_rw.data(), mm_rw.nbytes()), 0);
  y.CopyFrom(x_ro);  // a read-only tensor is a fine source
}

// Tensor::WithBackendLayout: a new storage over the same bytes that holds the layout,
// carried by slices and views, refused for writable tensors, freed with the storage's last
// tensor; ReleaseBytes on it leaves the given tensor's bytes alone. PrepareWeight returns a
// weight unchanged where the backend has no layout for it.
TEST(Validation, BackendLayoutLivesWithItsStorage) {
  struct Layout : vt::BackendLayout {
    int id = 7;
  };
  std::weak_ptr<const vt::BackendLayout> kept;
  const std::vector<float> v = {1, 2, 3, 4, 5, 6, 7, 8};
  {
    vt::Tensor w = vt::Tensor::FromHost(v.data(), {4, 2}, vt::DType::kF32);
    auto layout = std::make_shared<const Layout>();
    kept = layout;
    ExpectErrorWith([&] { (void)w.WithBackendLayout(layout); }, {"WithBackendLayout", "writable", "[4, 2]"});
    EXPECT_EQ(w.backend_layout(), nullptr);
    w.SetReadOnly();
    ExpectErrorWith([&] { (void)w.Slice(1, 0, 1).WithBackendLayout(layout); }, {"WithBackendLayout", "contiguous"});
    const vt::Tensor p = w.Slice(0, 1, 4).WithBackendLayout(std::move(layout));
    EXPECT_EQ(w.backend_layout(), nullptr);
    ASSERT_NE(p.backend_layout(), nullptr);
    EXPECT_EQ(dynamic_cast<const Layout*>(p.backend_layout())->id, 7);
    EXPECT_EQ(p.Slice(0, 1, 3).backend_layout(), p.backend_layout());
    EXPECT_EQ(p.View({6}).backend_layout(), p.backend_layout());
    EXPECT_EQ(p.storage_offset(), 0u);
    EXPECT_EQ(p.Slice(0, 1, 3).storage_offset(), 2 * sizeof(float));
    EXPECT_EQ(p.data(), w.Slice(0, 1, 4).data());
    EXPECT_TRUE(p.read_only());
    EXPECT_EQ(p.shape(), (vt::Shape{3, 2}));
    std::vector<float> copied(6);
    p.To(vt::Device::Cpu()).CopyToHost(copied.data());
    EXPECT_EQ(copied, std::vector<float>(v.begin() + 2, v.end()));
    EXPECT_TRUE(p.ReleaseBytes());
    EXPECT_TRUE(p.bytes_released());
    EXPECT_FALSE(w.bytes_released());
    std::vector<float> back(8);
    w.CopyToHost(back.data());
    EXPECT_EQ(back, v);
    EXPECT_FALSE(kept.expired());
    // The scalar level keeps no layout: the weight comes back as it is.
    const vt::Tensor same = vt::PrepareWeight(vt::Queue::Cpu(1, vt::CpuIsa::kScalar), w, vt::WeightUse::kMatmulB);
    EXPECT_EQ(same.backend_layout(), nullptr);
    EXPECT_EQ(same.data(), w.data());
  }
  EXPECT_TRUE(kept.expired());
}

}  // namespace
