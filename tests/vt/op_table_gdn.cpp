// Table cases of the Gated DeltaNet ops: mixed batches (prefill rows, decode rows, a padding
// row, slots out of order with untouched ones between), F32 and BF16. The CPU runs one
// scalar definition on every ISA level, so the CPU targets match byte for byte; a backend
// with another summation order (a CUDA kernel, later) gets the tolerance: f32 sums of Kw
// terms rounded once for the conv (2 units of the output dtype plus 8 f32 units of its
// scale), and for the delta rule 2^-14 of the values' scale (about 1) plus 2 output units.
// gdn_test.cpp holds the float64 references.
#include <cfloat>
#include <cmath>
#include <cstring>

#include "op_table.h"
#include "vt/ops/gdn.h"
#include "vt/ops/norm.h"

namespace vt_table {

namespace {

using vt::DType;

std::vector<int32_t> Starts(const std::vector<int>& lens) {
  std::vector<int32_t> qs{0};
  for (int l : lens) qs.push_back(qs.back() + l);
  return qs;
}

vt::Tensor I32(const std::vector<int32_t>& v) { return HostOf(v, {static_cast<int64_t>(v.size())}, DType::kI32); }

struct Batch {
  std::vector<int> lens;
  std::vector<int32_t> slots;
  int64_t num_slots;
};
const Batch kBatches[] = {
    {{1}, {0}, 1},                            // one decode row
    {{1, 1, 1, 1}, {3, 0, 2, -1}, 5},         // a decode step with a padding row
    {{1, 1, 1, 1, 1, 1, 1, 1}, {6, 0, 3, 7, 1, -1, -1, -1}, 8},  // 5 rows padded to a graph's bucket of 8
    {{70, 1, 3, 1, 9}, {4, 0, 2, 6, 1}, 7},   // prefill over a chunk boundary mixed with decodes
};

}  // namespace

std::vector<OpCase> CausalConv1dCases() {
  std::vector<OpCase> cases;
  uint32_t seed = 1;
  for (DType dt : {DType::kF32, DType::kBF16})
    for (const Batch& b : kBatches)
      for (int64_t Kw : {4, 2}) {
        const int64_t C = 37;
        const std::vector<int32_t> qs = Starts(b.lens);
        const int64_t T = qs.back();
        OpCase c;
        c.name = vt::StrCat(vt::DTypeName(dt), " T=", T, " seqs=", b.lens.size(), " C=", C, " Kw=", Kw);
        c.inputs = {Host(Normal(static_cast<size_t>(T * C), seed++), {T, C}, dt),
                    Host(Normal(static_cast<size_t>(C * Kw), seed++, 0.5f), {C, Kw}, dt), I32(qs), I32(b.slots)};
        c.outputs = {Filled({T, C}, dt),
                     Host(Normal(static_cast<size_t>(b.num_slots * C * (Kw - 1)), seed++), {b.num_slots, C, Kw - 1}, dt)};
        c.run = [](const vt::Queue& q, const Tensors& in, const Tensors& out) {
          vt::CausalConv1d(q, out[0], in[0], in[1], out[1], in[2], in[3]);
        };
        c.tol = [dt](size_t k, int64_t, double want) {
          return k == 1 ? 0.0 : 2 * Ulp(dt, want) + 8 * FLT_EPSILON * (1 + std::fabs(want));
        };
        cases.push_back(std::move(c));
      }
  return cases;
}

std::vector<OpCase> GatedDeltaRuleCases() {
  std::vector<OpCase> cases;
  uint32_t seed = 100;
  struct Heads {
    int64_t nk, nv, dk, dv;
  };
  for (DType dt : {DType::kF32, DType::kBF16})
    for (const Batch& b : kBatches)
      for (const Heads& h : {Heads{2, 4, 16, 8}, Heads{1, 1, 8, 12}})
        for (int chunk : {0, 64}) {
          const std::vector<int32_t> qs = Starts(b.lens);
          const int64_t T = qs.back();
          OpCase c;
          c.name = vt::StrCat(vt::DTypeName(dt), " T=", T, " seqs=", b.lens.size(), " nk=", h.nk, " nv=", h.nv,
                              " dk=", h.dk, " dv=", h.dv, " chunk=", chunk);
          std::vector<float> A_log, dt_bias;
          for (int64_t i = 0; i < h.nv; ++i) {
            A_log.push_back(std::log(1.0f + 3.0f * static_cast<float>(i)));
            dt_bias.push_back(std::log(std::expm1(0.01f + 0.02f * static_cast<float>(i))));
          }
          c.inputs = {Host(Normal(static_cast<size_t>(T * h.nk * h.dk), seed++), {T, h.nk, h.dk}, dt),
                      Host(Normal(static_cast<size_t>(T * h.nk * h.dk), seed++), {T, h.nk, h.dk}, dt),
                      Host(Normal(static_cast<size_t>(T * h.nv * h.dv), seed++), {T, h.nv, h.dv}, dt),
                      Host(Normal(static_cast<size_t>(T * h.nv), seed++, 0.5f), {T, h.nv}, dt),
                      Host(Normal(static_cast<size_t>(T * h.nv), seed++), {T, h.nv}, dt),
                      Host(A_log, {h.nv}, DType::kF32),
                      Host(dt_bias, {h.nv}, DType::kF32),
                      I32(qs),
                      I32(b.slots)};
          c.outputs = {Filled({T, h.nv, h.dv}, dt),
                       Host(Normal(static_cast<size_t>(b.num_slots * h.nv * h.dk * h.dv), seed++, 0.3f),
                            {b.num_slots, h.nv, h.dk, h.dv}, DType::kF32)};
          c.run = [chunk](const vt::Queue& q, const Tensors& in, const Tensors& out) {
            vt::GatedDeltaRule(q, out[0], in[0], in[1], in[2], in[3], in[4], in[5], in[6], out[1], in[7], in[8],
                               chunk);
          };
          c.tol = [dt](size_t k, int64_t, double want) {
            return (k == 0 ? 2 * Ulp(dt, want) : 0.0) + 0x1p-14 * (1 + std::fabs(want));
          };
          cases.push_back(std::move(c));
        }
  return cases;
}

// Qwen3-Next's zero-centred RMSNorm (the other norms' cases are in op_table_elementwise.cpp):
// rows with specials, F32/BF16, weight in x's dtype or F32, with and without a residual;
// widths with vector tails and Qwen3.5's 2048. Every CPU ISA level byte-exact.
std::vector<OpCase> RmsNormZeroCentredCases() {
  std::vector<OpCase> cases;
  uint32_t seed = 300;
  for (int64_t width : {1, 31, 64, 257, 2048})
    for (DType xd : {DType::kF32, DType::kBF16})
      for (DType wd : {xd, DType::kF32})
        for (bool with_res : {false, true}) {
          const int64_t rows = 5;
          OpCase c;
          c.name = vt::StrCat(vt::DTypeName(xd), " [", rows, ", ", width, "] weight ", vt::DTypeName(wd),
                              with_res ? " residual" : "");
          c.inputs = {Host(RowsWithSpecials(rows, width, seed++), {rows, width}, xd),
                      Host(Normal(static_cast<size_t>(width), seed++, 0.1f), {width}, wd)};
          c.outputs = {Filled({rows, width}, xd)};
          if (with_res) c.outputs.push_back(Host(Normal(static_cast<size_t>(rows * width), seed++), {rows, width}, xd));
          c.run = [](const vt::Queue& q, const Tensors& in, const Tensors& out) {
            vt::RmsNormZeroCentred(q, out[0], in[0], in[1], 1e-6f, out.size() > 1 ? &out[1] : nullptr);
          };
          cases.push_back(std::move(c));
        }
  return cases;
}

}  // namespace vt_table
