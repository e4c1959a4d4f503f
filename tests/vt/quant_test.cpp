// QuantFp8Static against an independent reference built from the e4m3fn format, on every
// CPU ISA level this machine has, and against PyTorch's float8_e4m3fn casts.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <cmath>
#include <fstream>
#include <iterator>
#include <random>

#include "elementwise_test_util.h"

namespace {

using vt_test::QuantRef;

struct Case {
  std::string what;
  float scale;
  std::vector<float> x;
};

// Runs the op on every ISA level and input dtype; each output byte must equal QuantRef of
// the value the input tensor actually holds.
void CheckAllPaths(const Case& c) {
  const float inv = 1.0f / c.scale;
  const int64_t n = static_cast<int64_t>(c.x.size());
  for (vt::DType dt : {vt::DType::kF32, vt::DType::kBF16, vt::DType::kF16}) {
    vt::Tensor x = vt_test::MakeTensor(c.x, {n}, dt);
    std::vector<uint8_t> want(n);
    for (int64_t i = 0; i < n; ++i) want[i] = QuantRef(static_cast<float>(vt_test::ValueAt(x, i)), inv);
    for (vt::CpuIsa isa : vt_test::IsaLevels()) {
      vt::Queue q = vt_test::QueueFor(isa);
      vt::Tensor out = vt::Tensor::Empty({n}, vt::DType::kF8E4M3);
      vt::QuantFp8Static(q, out, x, c.scale);
      const std::vector<uint8_t> got = vt_test::BytesOf(out);
      int64_t bad = 0, first = -1;
      for (int64_t i = 0; i < n; ++i)
        if (got[i] != want[i] && bad++ == 0) first = i;
      EXPECT_EQ(bad, 0) << c.what << " scale " << c.scale << " " << vt_test::Name(dt) << " on "
                        << vt::CpuIsaName(isa) << ": " << bad << " of " << n << " bytes differ; first x["
                        << first << "] = " << (first >= 0 ? vt_test::ValueAt(x, first) : 0.0) << " got 0x"
                        << std::hex << int(first >= 0 ? got[first] : 0) << " want 0x"
                        << int(first >= 0 ? want[first] : 0) << std::dec;
    }
  }
}

TEST(QuantFp8Static, ReportsIsaLevels) {
  std::cout << "[ QuantFp8Static runs on ISA levels: " << vt_test::IsaNames() << " ]\n";
  for (vt::CpuIsa isa : vt_test::IsaLevels()) EXPECT_EQ(vt::Queue::Cpu(1, isa).cpu_isa(), isa);
}

TEST(QuantFp8Static, RandomInputsOverLogUniformScales) {
  std::mt19937 rng(1234);
  std::uniform_real_distribution<double> log_scale(std::log(1e-4), std::log(1e3));
  std::uniform_real_distribution<double> log_mag(std::log(1e-4), std::log(600.0));
  for (int s = 0; s < 24; ++s) {
    Case c{"random", static_cast<float>(std::exp(log_scale(rng))), {}};
    const int n = 4096 + 37 * s + 1;  // odd sizes: vector tails on every path
    for (int i = 0; i < n; ++i) {
      const double m = std::exp(log_mag(rng)) * c.scale;
      c.x.push_back(static_cast<float>((rng() & 1) ? -m : m));
    }
    CheckAllPaths(c);
  }
}

// Exact midpoints between neighbouring e4m3fn magnitudes, times the scale, and a few ulps
// around them: where rounding ties decide, x * (1/s) and x / s round differently.
std::vector<float> TieInputs(float scale) {
  std::vector<float> x;
  for (int c = 0; c < 0x7E; ++c) {
    const float mid = static_cast<float>((vt_test::DecodeE4M3(c) + vt_test::DecodeE4M3(c + 1)) / 2);
    const float t = mid * scale;
    float lo = t, hi = t;
    for (int k = 0; k < 3; ++k) {
      lo = std::nextafter(lo, 0.0f);
      hi = std::nextafter(hi, 1e30f);
    }
    for (float v = lo; v <= hi; v = std::nextafter(v, 1e30f)) {
      x.push_back(v);
      x.push_back(-v);
    }
  }
  return x;
}

TEST(QuantFp8Static, TiesAtScalesWhereDivideDiffers) {
  for (float scale : {0.0092f, 0.13f, 0.77f}) {
    Case c{"ties", scale, TieInputs(scale)};
    const float inv = 1.0f / scale;
    int differ = 0;
    for (float v : c.x) {
      const float d = v / scale;
      const uint8_t by_divide = std::isnan(d) ? 0x7F : vt_test::NearestE4M3(std::fmax(-448.0, std::fmin(448.0, d)));
      differ += by_divide != QuantRef(v, inv);
    }
    std::cout << "[ scale " << scale << ": " << differ << " of " << c.x.size()
              << " tie inputs quantize differently with x / s than with x * (1/s) ]\n";
    EXPECT_GT(differ, 0) << "the tie set at scale " << scale << " would not catch a divide";
    CheckAllPaths(c);
  }
}

TEST(QuantFp8Static, SaturationSubnormalsZerosInfNaN) {
  const float inf = std::numeric_limits<float>::infinity();
  for (float scale : {1.0f, 0.0092f, 0.77f, 3.5f}) {
    Case c{"specials", scale, {}};
    for (double m : {448.0, 448.5, 449.0, 463.9, 464.0, 464.1, 479.0, 480.0, 481.0, 1000.0, 1e6, 1e30})
      for (double sg : {1.0, -1.0}) c.x.push_back(static_cast<float>(sg * m * scale));
    for (float v : {inf, -inf, 0.0f, -0.0f, std::numeric_limits<float>::max(), -std::numeric_limits<float>::max(),
                    std::numeric_limits<float>::denorm_min(), -std::numeric_limits<float>::denorm_min(), 1e-40f,
                    -1e-40f, std::numeric_limits<float>::min()})
      c.x.push_back(v);
    // NaNs of both signs with several payloads.
    for (uint32_t bits : {0x7FC00000u, 0xFFC00000u, 0x7F800001u, 0xFF800001u, 0x7FFFFFFFu, 0xFFFFFFFFu, 0x7FA00000u})
      c.x.push_back(vt_test::FromBits(bits));
    // e4m3fn subnormals (k * 2^-9), their midpoints and the boundary to normals, times the scale.
    for (int k = 0; k <= 17; ++k)
      for (double sg : {1.0, -1.0}) c.x.push_back(static_cast<float>(sg * std::ldexp(k, -10) * scale));
    CheckAllPaths(c);
  }
  // The clamp, spelled out: +-Inf and huge values saturate to +-448, NaN keeps its sign.
  vt::Queue q = vt::Queue::Cpu(1);
  vt::Tensor x = vt_test::MakeTensor({inf, -inf, 1e30f, -1e30f, vt_test::FromBits(0x7FC00000u),
                                      vt_test::FromBits(0xFFC00000u), -0.0f, 0.0f},
                                     {8}, vt::DType::kF32);
  vt::Tensor out = vt::Tensor::Empty({8}, vt::DType::kF8E4M3);
  vt::QuantFp8Static(q, out, x, 1.0f);
  EXPECT_EQ(vt_test::BytesOf(out), (std::vector<uint8_t>{0x7E, 0xFE, 0x7E, 0xFE, 0x7F, 0xFF, 0x80, 0x00}));
}

TEST(QuantFp8Static, MultiThreadedSplitsMatchSingleThread) {
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.0f, 3.0f);
  std::vector<float> v(300001);
  for (float& f : v) f = nd(rng);
  vt::Tensor x = vt_test::MakeTensor(v, {static_cast<int64_t>(v.size())}, vt::DType::kBF16);
  std::vector<uint8_t> want;
  for (int threads : {1, 2, 3, 8}) {
    vt::Queue q = vt::Queue::Cpu(threads);
    vt::Tensor out = vt::Tensor::Empty(x.shape(), vt::DType::kF8E4M3);
    vt::QuantFp8Static(q, out, x, 0.013f);
    if (want.empty()) want = vt_test::BytesOf(out);
    EXPECT_EQ(vt_test::FirstDiff(want, vt_test::BytesOf(out)), -1) << threads << " threads";
  }
}

// ---- PyTorch oracle ----------------------------------------------------------------------

std::vector<char> ReadFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  EXPECT_TRUE(f.good()) << "cannot open " << path;
  return std::vector<char>(std::istreambuf_iterator<char>(f), {});
}

TEST(QuantFp8Static, ByteIdenticalToPyTorchFloat8Casts) {
  const std::string dir = std::string(VTLLM_FIXTURES_DIR) + "/oracles/fp8ops/";
  std::ifstream mf(dir + "meta.json");
  ASSERT_TRUE(mf.good()) << "missing " << dir << "meta.json";
  const nlohmann::json meta = nlohmann::json::parse(mf);
  int cases = 0;
  for (const auto& c : meta.at("quant")) {
    const std::string name = c.at("name");
    const float scale = c.at("scale_f32").get<float>();
    ASSERT_EQ(1.0f / scale, c.at("inv_f32").get<float>()) << name << ": the f32 reciprocal must match PyTorch's";
    const std::vector<char> xb = ReadFile(dir + name + ".x.f32");
    const std::vector<char> qb = ReadFile(dir + name + ".q.u8");
    const int64_t n = c.at("n").get<int64_t>();
    ASSERT_EQ(xb.size(), static_cast<size_t>(n) * 4) << name;
    ASSERT_EQ(qb.size(), static_cast<size_t>(n)) << name;
    vt::Tensor x = vt::Tensor::FromHost(xb.data(), {n}, vt::DType::kF32);
    const std::vector<uint8_t> want(qb.begin(), qb.end());
    // The independent reference agrees with PyTorch too.
    std::vector<uint8_t> ref(n);
    for (int64_t i = 0; i < n; ++i) ref[i] = QuantRef(x.data_as<float>()[i], 1.0f / scale);
    EXPECT_EQ(vt_test::FirstDiff(ref, want), -1) << name << ": test reference vs PyTorch";
    for (vt::CpuIsa isa : vt_test::IsaLevels()) {
      vt::Queue q = vt_test::QueueFor(isa);
      vt::Tensor out = vt::Tensor::Empty({n}, vt::DType::kF8E4M3);
      vt::QuantFp8Static(q, out, x, scale);
      EXPECT_EQ(vt_test::FirstDiff(vt_test::BytesOf(out), want), -1) << name << " on " << vt::CpuIsaName(isa);
    }
    ++cases;
  }
  EXPECT_EQ(cases, 28);
}

}  // namespace
