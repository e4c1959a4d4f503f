// The CUDA Gated DeltaNet ops (src/vt/cuda/gdn.cu, gdn_chunked.cu) beyond the op table's
// small cases: the shapes of Qwen3-Next / Qwen3.5 heads (dk = dv = 128, which take the
// column-split kernel and, for sequences of 32 tokens or more, the chunked one; the op
// table's small heads take the shared-memory one) over long prompts mixed with decode rows
// and padding, against the CPU kernel (whose float64 checks are in
// tests/vt/gdn_test.cpp), for both chunk sizes; the conv at the model's channel count, in a
// prefill step (the token-parallel kernels, prompts shorter and longer than the kernel's
// history) and a decode step; and bad metadata, recorded on the device and reported by name
// at the next synchronization.
#include <algorithm>
#include <cmath>
#include <random>
#include <string>

#include "cuda_test_util.h"
#include "vt/cuda/kernels.h"  // GatedDeltaRule{Column,Chunked}Launches, CausalConv1dTokenLaunches
#include "vt/ops/gdn.h"

namespace {

using vt::DType;
using vt::Tensor;

using vtt::Normal;

Tensor I32(const std::vector<int32_t>& v) {
  return Tensor::FromHost(v.data(), {static_cast<int64_t>(v.size())}, DType::kI32);
}

// max |got - want| / (1 + |want|) over all elements.
double MaxRelErr(const Tensor& got, const Tensor& want) {
  const std::vector<float> g = vtt::Floats(got), w = vtt::Floats(want);
  double m = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    if (!std::isfinite(g[i])) return INFINITY;
    m = std::max(m, std::fabs(static_cast<double>(g[i]) - w[i]) / (1.0 + std::fabs(w[i])));
  }
  return m;
}

// Two step layouts: a 300-token prompt (four chunks and a short one) beside two decode rows and
// a padding row; and prompts of 31 tokens (one short of the chunked kernel's minimum, so the
// token-by-token kernel's), 32, 64 and 65, a decode row and a 40-token sequence without a slot.
struct DeltaRuleLayout {
  std::vector<int32_t> qs, slots;
};

TEST(CudaGdn, DeltaRuleAtModelShapesMatchesCpu) {
  VT_REQUIRE_CUDA();
  const int64_t nk = 2, nv = 4, dk = 128, dv = 128, slots = 6;
  const std::vector<DeltaRuleLayout> layouts = {{{0, 300, 301, 302, 303}, {4, 0, 2, -1}},
                                                {{0, 31, 63, 127, 192, 193, 233}, {1, 4, 0, 2, 5, -1}}};
  vt::Queue cpu = vt::Queue::Cpu(2), gpu = vt::Queue::Cuda(0);
  for (const DeltaRuleLayout& lay : layouts) {
    const std::vector<int32_t>& qs = lay.qs;
    const std::vector<int32_t>& sl = lay.slots;
    const int64_t T = qs.back();
    for (DType dt : {DType::kBF16, DType::kF32}) {
      const Tensor query = vtt::HostTensor(Normal(T * nk * dk, 1), dt, {T, nk, dk});
      const Tensor key = vtt::HostTensor(Normal(T * nk * dk, 2), dt, {T, nk, dk});
      const Tensor value = vtt::HostTensor(Normal(T * nv * dv, 3), dt, {T, nv, dv});
      const Tensor a = vtt::HostTensor(Normal(T * nv, 4, 0.5f), dt, {T, nv});
      const Tensor b = vtt::HostTensor(Normal(T * nv, 5), dt, {T, nv});
      std::vector<float> A_log, dt_bias;  // decays from about 0.99 (head 0) to 0.5 (head 3) a token
      for (int64_t i = 0; i < nv; ++i) {
        A_log.push_back(std::log(1.0f + 3.0f * static_cast<float>(i)));
        dt_bias.push_back(std::log(std::expm1(0.01f + 0.02f * static_cast<float>(i))));
      }
      const Tensor Al = Tensor::FromHost(A_log.data(), {nv}, DType::kF32);
      const Tensor db = Tensor::FromHost(dt_bias.data(), {nv}, DType::kF32);
      const std::vector<float> s0 = Normal(slots * nv * dk * dv, 6, 0.05f);
      for (int chunk : {0, 64}) {
        const std::string what = std::string(vt::DTypeName(dt)) + " chunk " + std::to_string(chunk) + ", " +
                                 std::to_string(qs.size() - 1) + " sequences";
        const Tensor state_c = Tensor::FromHost(s0.data(), {slots, nv, dk, dv}, DType::kF32);
        const Tensor out_c = Tensor::Empty({T, nv, dv}, dt);
        vt::GatedDeltaRule(cpu, out_c, query, key, value, a, b, Al, db, state_c, I32(qs), I32(sl), chunk);
        const Tensor state_g = Tensor::FromHost(s0.data(), {slots, nv, dk, dv}, DType::kF32, vtt::kCuda);
        const Tensor out_g = Tensor::Empty({T, nv, dv}, dt, vtt::kCuda);
        const int64_t before = vt::DispatchCount(vt::OpId::kGatedDeltaRule, vt::DeviceType::kCUDA);
        const int64_t columns_before = vt::cuda::GatedDeltaRuleColumnLaunches();
        const int64_t chunked_before = vt::cuda::GatedDeltaRuleChunkedLaunches();
        vt::GatedDeltaRule(gpu, out_g, query.To(vtt::kCuda), key.To(vtt::kCuda), value.To(vtt::kCuda),
                           a.To(vtt::kCuda), b.To(vtt::kCuda), Al.To(vtt::kCuda), db.To(vtt::kCuda), state_g,
                           I32(qs).To(vtt::kCuda), I32(sl).To(vtt::kCuda), chunk);
        EXPECT_EQ(vt::DispatchCount(vt::OpId::kGatedDeltaRule, vt::DeviceType::kCUDA), before + 1);
        EXPECT_EQ(vt::cuda::GatedDeltaRuleColumnLaunches(), columns_before + 1) << what;
        EXPECT_EQ(vt::cuda::GatedDeltaRuleChunkedLaunches(), chunked_before + 1) << what;
        const double out_tol = dt == DType::kBF16 ? 1.6e-2 : 2e-4;  // 2 BF16 units, or f32 order
        EXPECT_LE(MaxRelErr(out_g, out_c), out_tol) << what;
        EXPECT_LE(MaxRelErr(state_g, state_c), 2e-4) << what;
        // Slots named by no sequence are untouched, byte for byte.
        const std::vector<float> sg = vtt::Floats(state_g);
        for (int64_t s = 0; s < slots; ++s) {
          if (std::find(sl.begin(), sl.end(), s) != sl.end()) continue;
          for (int64_t e = 0; e < nv * dk * dv; e += 97)
            ASSERT_EQ(sg[s * nv * dk * dv + e], s0[s * nv * dk * dv + e]) << "slot " << s << ", " << what;
        }
        // The rows of the sequence without a slot (the last) are zeros.
        const std::vector<float> og = vtt::Floats(out_g);
        for (int64_t t = qs[qs.size() - 2]; t < T; ++t)
          for (int64_t j = 0; j < nv * dv; ++j) ASSERT_EQ(og[t * nv * dv + j], 0.0f) << "row " << t << ", " << what;
      }
    }
  }
}

TEST(CudaGdn, ConvAtModelWidthEqualsCpu) {
  VT_REQUIRE_CUDA();
  const int64_t C = 8192, slots = 3;
  struct Layout {
    std::vector<int32_t> qs, sl;
  };
  // A decode row, a 129-token prompt and a padding row; prompts of 2 and 1 tokens (fewer
  // than the Kw - 1 = 3 history entries: the new state keeps some old entries); a decode step.
  const Layout layouts[] = {{{0, 1, 130, 131}, {2, 0, -1}}, {{0, 2, 3, 5}, {1, 0, 2}}, {{0, 1, 2, 3}, {2, 0, 1}}};
  vt::Queue cpu = vt::Queue::Cpu(2), gpu = vt::Queue::Cuda(0);
  uint32_t seed = 7;
  for (const Layout& l : layouts)
    for (int64_t Kw : {4, 3}) {
      const int64_t T = l.qs.back(), S = static_cast<int64_t>(l.sl.size());
      const Tensor x = vtt::HostTensor(Normal(T * C, seed++), DType::kBF16, {T, C});
      const Tensor w = vtt::HostTensor(Normal(C * Kw, seed++, 0.5f), DType::kBF16, {C, Kw});
      const std::vector<float> st0 = Normal(slots * C * (Kw - 1), seed++);
      const Tensor st_c = vtt::HostTensor(st0, DType::kBF16, {slots, C, Kw - 1});
      const Tensor st_g = st_c.To(vtt::kCuda);
      const Tensor out_c = Tensor::Empty({T, C}, DType::kBF16);
      const Tensor out_g = Tensor::Empty({T, C}, DType::kBF16, vtt::kCuda);
      vt::CausalConv1d(cpu, out_c, x, w, st_c, I32(l.qs), I32(l.sl));
      const int64_t before = vt::DispatchCount(vt::OpId::kCausalConv1d, vt::DeviceType::kCUDA);
      const int64_t tokens_before = vt::cuda::CausalConv1dTokenLaunches();
      vt::CausalConv1d(gpu, out_g, x.To(vtt::kCuda), w.To(vtt::kCuda), st_g, I32(l.qs).To(vtt::kCuda),
                       I32(l.sl).To(vtt::kCuda));
      EXPECT_EQ(vt::DispatchCount(vt::OpId::kCausalConv1d, vt::DeviceType::kCUDA), before + 1);
      EXPECT_EQ(vt::cuda::CausalConv1dTokenLaunches(), tokens_before + (T > S ? 1 : 0)) << "T " << T;
      // The same sum in the same order: the states (copies of inputs) are equal, the outputs
      // within one BF16 unit (Silu's exp may differ in its last f32 bit).
      EXPECT_TRUE(vtt::SameBytes(st_g, st_c)) << "T " << T << " Kw " << Kw;
      EXPECT_LE(MaxRelErr(out_g, out_c), 8e-3) << "T " << T << " Kw " << Kw;
    }
}

TEST(CudaGdn, BadSlotIsReportedAndTheQueueKeepsServing) {
  VT_REQUIRE_CUDA();
  vt::Queue gpu = vt::Queue::Cuda(0);
  const int64_t C = 8, Kw = 4;
  const Tensor x = vtt::HostTensor(std::vector<float>(2 * C, 1.0f), DType::kF32, {2, C}).To(vtt::kCuda);
  const Tensor w = vtt::HostTensor(std::vector<float>(C * Kw, 1.0f), DType::kF32, {C, Kw}).To(vtt::kCuda);
  const Tensor st = vtt::HostTensor(std::vector<float>(2 * C * (Kw - 1), 0.0f), DType::kF32, {2, C, Kw - 1})
                        .To(vtt::kCuda);
  const Tensor out = Tensor::Empty({2, C}, DType::kF32, vtt::kCuda);
  const std::vector<int32_t> qs = {0, 1, 2}, bad = {0, 7};
  try {
    vt::CausalConv1d(gpu, out, x, w, st, I32(qs).To(vtt::kCuda), I32(bad).To(vtt::kCuda));
    gpu.Synchronize();
    ADD_FAILURE() << "state slot 7 of 2 accepted";
  } catch (const vt::Error& e) {
    EXPECT_NE(std::string(e.what()).find("state_slots[1] = 7 is outside [-1, 2)"), std::string::npos) << e.what();
  }
  EXPECT_NO_THROW(gpu.Synchronize());
  const std::vector<int32_t> good = {1, 0};
  vt::CausalConv1d(gpu, out, x, w, st, I32(qs).To(vtt::kCuda), I32(good).To(vtt::kCuda));
  EXPECT_NO_THROW(gpu.Synchronize());
}

}  // namespace
