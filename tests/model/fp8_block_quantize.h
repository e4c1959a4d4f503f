// The block-scale FP8 quantization of a BF16 weight that the dynamic FP8 checkpoint copies
// (moe_fp8_dynamic_copy.h, hybrid_fp8_copy.h, moe_fp8_dynamic_test.cpp's fused experts) write.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "fp8_reference_forward.h"
#include "vt/dtype.h"
#include "vt/tensor.h"

namespace vtllm::model::testing {

// The BF16 [N, K] weight whose row r starts at row(r), over [bn, bk] blocks (per-channel:
// bn 1, bk K): per block s = f32(amax / 448) (1 for zeros; rounded to BF16 when bf16_scales,
// and the codes made with that scale) into scales[bi * kb + bj], kb = ceil(K / bk), and the
// codes e4m3(w / s) into codes[r * K + k].
template <typename Row>
void QuantizeBf16Blocks(int64_t N, int64_t K, int64_t bn, int64_t bk, const Row& row, bool bf16_scales,
                        uint8_t* codes, float* scales) {
  const int64_t nb = (N + bn - 1) / bn, kb = (K + bk - 1) / bk;
  for (int64_t bi = 0; bi < nb; ++bi)
    for (int64_t bj = 0; bj < kb; ++bj) {
      float amax = 0.0f;
      for (int64_t r = bi * bn; r < std::min(N, (bi + 1) * bn); ++r)
        for (int64_t k = bj * bk; k < std::min(K, (bj + 1) * bk); ++k)
          amax = std::max(amax, std::fabs(vt::Bf16ToFloat(row(r)[k])));
      float sc = amax > 0.0f ? amax / 448.0f : 1.0f;
      if (bf16_scales) sc = vt::Bf16ToFloat(vt::FloatToBf16(sc));
      scales[bi * kb + bj] = sc;
      for (int64_t r = bi * bn; r < std::min(N, (bi + 1) * bn); ++r)
        for (int64_t k = bj * bk; k < std::min(K, (bj + 1) * bk); ++k)
          codes[r * K + k] = E4m3Code(vt::Bf16ToFloat(row(r)[k]) / sc);
    }
}

// The same of a BF16 [N, K] tensor.
inline void QuantizeBf16Blocks(const vt::Tensor& t, int64_t bn, int64_t bk, bool bf16_scales, uint8_t* codes,
                               float* scales) {
  const uint16_t* w = t.data_as<uint16_t>();
  const int64_t K = t.dim(1);
  QuantizeBf16Blocks(t.dim(0), K, bn, bk, [w, K](int64_t r) { return w + r * K; }, bf16_scales, codes, scales);
}

}  // namespace vtllm::model::testing
