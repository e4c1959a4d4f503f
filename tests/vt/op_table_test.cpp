// The harness of the op table (op_table.h): one test per (op, backend). Each case runs once
// on the reference, the CPU's scalar kernels (2 threads: odd sizes split unevenly), then on
// every target of the backend: every vector ISA level this processor has, or the CUDA
// device. Outputs must match the reference byte for byte or within the case's
// tolerance (byte for byte on the CPU levels where the case says exact_on_cpu), and a
// recipe's outputs its definition's on the same target; the op's dispatch
// count must grow on every run, so a target cannot pass by running another device's code.
// A backend of the build without a kernel for an op reports the op's cases as missing
// (SKIPPED with the count); the CPU backend must have them all. vt_tests runs the CPU
// backend, vt_cuda_tests the CUDA one (and reports SKIPPED without a GPU).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <limits>
#include <tuple>

#include "elementwise_test_util.h"  // IsaLevels, QueueFor
#include "op_table.h"

namespace vt_table {

// ---- helpers of op_table.h -----------------------------------------------------------------

vt::Tensor Host(const std::vector<float>& v, const vt::Shape& shape, vt::DType dtype) {
  return vt_test::MakeTensor(v, shape, dtype);
}

vt::Tensor Filled(const vt::Shape& shape, vt::DType dtype) {
  vt::Tensor t = vt::Tensor::Empty(shape, dtype);
  if (t.nbytes() > 0) std::memset(t.data(), 0x5A, t.nbytes());  // an empty tensor has no data
  return t;
}

// splitmix64: a small, fast generator; the table needs many values, not statistical quality.
uint64_t NextRandom(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Uniform in [0, 1) from 24 random bits.
float Uniform(uint64_t& state) { return static_cast<float>(NextRandom(state) >> 40) * 0x1p-24f; }

std::vector<float> Normal(size_t n, uint32_t seed, float sigma, float spread) {
  // Near-normal values: the sum of four uniforms, scaled to unit variance (Irwin-Hall).
  uint64_t state = seed;
  std::vector<float> v(n);
  for (auto& x : v) {
    const float u = Uniform(state) + Uniform(state) + Uniform(state) + Uniform(state);
    x = (u - 2.0f) * 1.7320508f * sigma;
    if (spread != 0.0f) x *= std::exp2((2.0f * Uniform(state) - 1.0f) * spread);
  }
  return v;
}

std::vector<float> RowsWithSpecials(int64_t rows, int64_t width, uint32_t seed) {
  std::vector<float> v = Normal(static_cast<size_t>(rows * width), seed, 1.0f, 6.0f);
  if (v.size() > 8) {
    v[1] = 0.0f;
    v[2] = -0.0f;
    v[3] = 3.0e4f;
    if (rows > 2) v[static_cast<size_t>(2 * width)] = std::numeric_limits<float>::quiet_NaN();
  }
  return v;
}

double Ulp(vt::DType d, double x) {
  const int mant = d == vt::DType::kF32 ? 23 : d == vt::DType::kBF16 ? 7 : 10;
  const double min_normal = d == vt::DType::kF16 ? 0x1p-14 : 0x1p-126;
  const double a = std::max(std::fabs(x), min_normal);
  return std::exp2(std::floor(std::log2(a)) - mant);
}

double ValueAt(const vt::Tensor& t, int64_t i) {
  if (t.dtype() == vt::DType::kF8E4M3) return vt::Fp8E4M3ToFloat(t.data_as<uint8_t>()[i]);
  return vt_test::ValueAt(t, i);
}

namespace {

bool IsFloat(vt::DType d) { return d == vt::DType::kF32 || d == vt::DType::kBF16 || d == vt::DType::kF16; }

// Element i of a float tensor is NaN, and its sign bit.
bool NanAt(const vt::Tensor& t, int64_t i, bool* negative) {
  const double v = ValueAt(t, i);
  *negative = std::signbit(v);
  return std::isnan(v);
}

}  // namespace

::testing::AssertionResult SameBytes(const vt::Tensor& got, const vt::Tensor& want, bool nan_sign_free) {
  if (got.dtype() != want.dtype() || got.shape() != want.shape())
    return ::testing::AssertionFailure() << got.Describe() << " vs " << want.Describe();
  const size_t es = vt::DTypeSize(got.dtype());
  const auto* g = static_cast<const uint8_t*>(got.data());
  const auto* w = static_cast<const uint8_t*>(want.data());
  const int64_t n = got.numel();
  if (std::memcmp(g, w, static_cast<size_t>(n) * es) == 0) return ::testing::AssertionSuccess();
  int64_t diffs = 0, first = -1;
  for (int64_t i = 0; i < n; ++i) {
    if (std::memcmp(g + i * es, w + i * es, es) == 0) continue;
    bool gn = false, wn = false;
    if (IsFloat(got.dtype()) && NanAt(got, i, &gn) && NanAt(want, i, &wn) && (gn == wn || nan_sign_free)) continue;
    // FP8 NaN is one pattern per sign (0x7F / 0xFF): only the sign can differ.
    if (got.dtype() == vt::DType::kF8E4M3 && nan_sign_free && NanAt(got, i, &gn) && NanAt(want, i, &wn)) continue;
    if (diffs++ == 0) first = i;
  }
  if (diffs == 0) return ::testing::AssertionSuccess();
  auto hex = [&](const uint8_t* p) {
    uint64_t u = 0;
    std::memcpy(&u, p + first * es, es);
    char buf[24];
    std::snprintf(buf, sizeof buf, "0x%llx", static_cast<unsigned long long>(u));
    return std::string(buf);
  };
  return ::testing::AssertionFailure() << diffs << " of " << n << " elements differ; first at " << first << ": "
                                       << hex(g) << " vs " << hex(w);
}

namespace {

using vt::DeviceType;
using vt::OpId;

std::vector<OpCase> CasesOf(OpId op) {
  switch (op) {
    case OpId::kQuantFp8Static: return QuantCases();
    case OpId::kQuantFp8PerTokenGroup: return QuantFp8PerTokenGroupCases();
    case OpId::kMatmulFp8: return MatmulFp8Cases();
    case OpId::kMatmulFp8GroupScaled: return MatmulFp8GroupScaledCases();
    case OpId::kMatmul: return MatmulCases();
    case OpId::kRmsNorm: return RmsNormCases();
    case OpId::kRmsNormGated: return RmsNormGatedCases();
    case OpId::kRmsNormZeroCentred: return RmsNormZeroCentredCases();
    case OpId::kSiluMul: return SiluMulCases();
    case OpId::kSigmoidGatedAdd: return SigmoidGatedAddCases();
    case OpId::kCast: return CastCases();
    case OpId::kRmsNormQuantFp8: return RmsNormQuantFp8Cases();
    case OpId::kRmsNormZeroCentredQuantFp8: return RmsNormZeroCentredQuantFp8Cases();
    case OpId::kRmsNormGatedQuantFp8: return RmsNormGatedQuantFp8Cases();
    case OpId::kSiluMulQuantFp8: return SiluMulQuantFp8Cases();
    case OpId::kMatmulFp8SiluMulQuantFp8: return MatmulFp8SiluMulQuantFp8Cases();
    case OpId::kRmsNormQuantFp8PerTokenGroup: return RmsNormQuantFp8PerTokenGroupCases();
    case OpId::kRmsNormZeroCentredQuantFp8PerTokenGroup: return RmsNormZeroCentredQuantFp8PerTokenGroupCases();
    case OpId::kRmsNormGatedQuantFp8PerTokenGroup: return RmsNormGatedQuantFp8PerTokenGroupCases();
    case OpId::kSiluMulQuantFp8PerTokenGroup: return SiluMulQuantFp8PerTokenGroupCases();
    case OpId::kEmbedding: return EmbeddingCases();
    case OpId::kRotaryEmbedding: return RotaryEmbeddingCases();
    case OpId::kKvCacheWrite: return KvCacheWriteCases();
    case OpId::kQkNormRopeCacheWrite: return QkNormRopeCacheWriteCases();
    case OpId::kPagedAttention: return PagedAttentionCases();
    case OpId::kPagedAttentionQuantFp8: return PagedAttentionQuantFp8Cases();
    case OpId::kTopKLogprobs: return TopKLogprobsCases();
    case OpId::kLogitsMask: return LogitsMaskCases();
    case OpId::kLogitsAddSparse: return LogitsAddSparseCases();
    case OpId::kLogitsPenalties: return LogitsPenaltiesCases();
    case OpId::kSampleTokens: return SampleTokensCases();
    case OpId::kMoeTopKRouting: return MoeTopKRoutingCases();
    case OpId::kMoeExperts: return MoeExpertsCases();
    case OpId::kMoeExpertsFp8: return MoeExpertsFp8Cases();
    case OpId::kMoeExpertsFp8PerToken: return MoeExpertsFp8PerTokenCases();
    case OpId::kMoeExpertsFp8GroupScaled: return MoeExpertsFp8GroupScaledCases();
    case OpId::kCausalConv1d: return CausalConv1dCases();
    case OpId::kGatedDeltaRule: return GatedDeltaRuleCases();
    case OpId::kCount: break;
  }
  return {};
}

std::vector<OpId> AllOps() {
  std::vector<OpId> ops;
  for (int i = 0; i < vt::kNumOps; ++i) ops.push_back(static_cast<OpId>(i));
  return ops;
}

// A backend is in the build when it registered any kernel.
bool BackendBuilt(DeviceType d) {
  for (OpId op : AllOps())
    if (vt::OpRegistered(op, d)) return true;
  return false;
}

struct Target {
  std::string name;
  vt::Queue queue;
};

// The CPU's scalar kernels, the reference of every case.
vt::Queue ReferenceQueue() { return vt_test::QueueFor(vt::CpuIsa::kScalar, 2); }

// The targets compared with the reference: the CPU's vector ISA levels, or the CUDA device.
std::vector<Target> TargetsOf(DeviceType d) {
  std::vector<Target> targets;
  if (d == DeviceType::kCPU) {
    for (vt::CpuIsa isa : vt_test::IsaLevels())
      if (isa != vt::CpuIsa::kScalar) targets.push_back({vt::StrCat("cpu ", vt::CpuIsaName(isa)), vt_test::QueueFor(isa, 2)});
  } else {
    targets.push_back({"cuda:0", vt::Queue::Cuda(0)});
  }
  return targets;
}

// Runs fn on q with copies of the case's outputs (and, off the host, of its inputs, which
// the op only reads) on q's device; returns the outputs on the host.
Tensors RunOn(const vt::Queue& q, const OpCase& c, const RunFn& fn) {
  const bool host = q.device().is_cpu();
  Tensors in, out;
  for (const vt::Tensor& t : c.inputs) in.push_back(host ? t : t.To(q.device()));
  for (const vt::Tensor& t : c.outputs) out.push_back(t.To(q.device()));
  fn(q, in, out);
  q.Synchronize();
  if (host) return out;
  Tensors back;
  for (const vt::Tensor& t : out) back.push_back(t.To(vt::Device::Cpu()));
  return back;
}

// got vs want within c.tol: NaN where the reference has NaN, infinities equal, the rest
// within the tolerance. Reports the first three elements outside it.
void ExpectClose(const OpCase& c, size_t k, const vt::Tensor& got, const vt::Tensor& want, const std::string& where) {
  int64_t bad = 0;
  for (int64_t i = 0; i < want.numel(); ++i) {
    const double g = ValueAt(got, i), w = ValueAt(want, i);
    const bool ok = std::isnan(w) ? std::isnan(g) : std::isinf(w) ? g == w : std::fabs(g - w) <= c.tol(k, i, w);
    if (!ok && bad++ < 3)
      ADD_FAILURE() << where << ": output " << k << " element " << i << " = " << g << ", reference " << w
                    << ", tolerance " << (std::isfinite(w) ? c.tol(k, i, w) : 0.0);
  }
  EXPECT_EQ(bad, 0) << where << ": output " << k;
}

class OpTable : public ::testing::TestWithParam<std::tuple<OpId, DeviceType>> {};

TEST_P(OpTable, MatchesScalarReference) {
  const auto [op, device] = GetParam();
  const std::string op_name(vt::OpName(op)), dev_name(vt::DeviceTypeName(device));
  if (device == DeviceType::kCUDA && vt::CudaDeviceCount() == 0) GTEST_SKIP() << "no CUDA device visible: skipped";
  const std::vector<OpCase> cases = CasesOf(op);
  ASSERT_FALSE(cases.empty()) << op_name << " has no cases in the op table";
  if (!vt::OpRegistered(op, device)) {
    ASSERT_NE(device, DeviceType::kCPU) << op_name << " has no CPU kernel: the CPU backend must have every op";
    GTEST_SKIP() << "MISSING: " << cases.size() << " cases of " << op_name << " (no " << dev_name
                 << " kernel in this build)";
  }
  const vt::Queue reference = ReferenceQueue();
  const std::vector<Target> targets = TargetsOf(device);
  // A recipe's outputs must be its definition's, on the reference and on every target.
  auto expect_definition = [](const OpCase& c, const vt::Queue& q, const Tensors& got, const std::string& where) {
    if (!c.definition) return;
    const Tensors def = RunOn(q, c, c.definition);
    for (size_t k = 0; k < def.size(); ++k)
      EXPECT_TRUE(SameBytes(got[k], def[k], c.nan_sign_free)) << where << ": output " << k << " vs the recipe's composite";
  };
  for (const OpCase& c : cases) {
    const int64_t ref_before = vt::DispatchCount(op, DeviceType::kCPU);
    const Tensors want = RunOn(reference, c, c.run);
    ASSERT_GT(vt::DispatchCount(op, DeviceType::kCPU), ref_before) << op_name << ": the CPU kernel did not run";
    expect_definition(c, reference, want, vt::StrCat(op_name, " ", c.name, " on cpu scalar"));
    for (const Target& t : targets) {
      const std::string where = vt::StrCat(op_name, " ", c.name, " on ", t.name);
      const int64_t before = vt::DispatchCount(op, device);
      const Tensors got = RunOn(t.queue, c, c.run);
      EXPECT_GT(vt::DispatchCount(op, device), before) << where << ": the " << dev_name << " kernel did not run";
      for (size_t k = 0; k < want.size(); ++k) {
        if (c.tol && !(c.exact_on_cpu && device == DeviceType::kCPU)) {
          ExpectClose(c, k, got[k], want[k], where);
        } else {
          EXPECT_TRUE(SameBytes(got[k], want[k], c.nan_sign_free)) << where << ": output " << k;
        }
      }
      expect_definition(c, t.queue, got, where);
    }
  }
  std::cout << "[ " << op_name << ": " << cases.size() << " cases on " << targets.size() << " " << dev_name
            << " target(s) against the cpu scalar kernels ]\n";
}

// vt_tests runs the table on the CPU backend; vt_cuda_tests (tests/vt/CMakeLists.txt) on CUDA.
#ifdef VT_OP_TABLE_CUDA
constexpr DeviceType kBackendUnderTest = DeviceType::kCUDA;
#else
constexpr DeviceType kBackendUnderTest = DeviceType::kCPU;
#endif

INSTANTIATE_TEST_SUITE_P(AllOps, OpTable,
                         ::testing::Combine(::testing::ValuesIn(AllOps()), ::testing::Values(kBackendUnderTest)),
                         [](const ::testing::TestParamInfo<OpTable::ParamType>& info) {
                           return std::string(vt::OpName(std::get<0>(info.param))) + "_" +
                                  std::string(vt::DeviceTypeName(std::get<1>(info.param)));
                         });

// The coverage of the table in this build: per op, whether each backend has a kernel (the
// OpTable tests of a backend without one list its cases as missing).
TEST(OpTableCoverage, EachBackendSaysWhatItLacks) {
  const bool cuda_built = BackendBuilt(DeviceType::kCUDA);
  std::cout << "[ CPU ISA levels: " << vt_test::IsaNames() << " ]\n";
  for (OpId op : AllOps()) {
    EXPECT_TRUE(vt::OpRegistered(op, DeviceType::kCPU)) << vt::OpName(op) << " has no CPU kernel";
    const char* cuda = !cuda_built ? "not in this build"
                       : vt::OpRegistered(op, DeviceType::kCUDA) ? "registered"
                                                                 : "MISSING (no kernel in this build)";
    std::cout << "[ " << vt::OpName(op) << ": cpu every ISA level; cuda " << cuda << " ]\n";
  }
}

}  // namespace
}  // namespace vt_table
