// fp8 GEMM on weights re-laid out once, for AVX2 (F32 FMA on 8 lanes; also run by the
// AVX-512 F32 level): the outer-product form of matmul_packed_avx512.cpp with one output
// column per f32 lane. A weight block holds 8 columns; for each K value its 8 codes are 8
// consecutive bytes, decoded by the half trick (sign-extend, shift left by 7, clear bit
// 14: value * 2^-8 as an IEEE half, subnormals included; then vcvtph2ps), and each row of
// a enters as one broadcast f32 (exact fp8 values), so a step of MR rows x NB blocks is NB
// decodes and MR broadcasts for MR * NB FMAs, with no lane sums.
//
// The half trick turns the NaN codes (S.1111.111) into finite values (1.875 * 2^8 * 2^-8),
// so weights holding any NaN code are not laid out for it: pack reports them and the
// driver multiplies such a weight as stored (those paths propagate NaN).
//
// Layout (PackedAvx2Bytes): block j (columns 8j..8j+7) is K steps of 8 bytes, the codes of
// its columns at K value k; columns past N are zero codes.
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "vt/cpu/matmul_kernels.h"

namespace vt::cpu::matmul {

namespace {

constexpr int64_t kCols = 8;
// Bytes ahead in each block's stream to prefetch.
constexpr int64_t kAhead = 1024;

inline int64_t CountNan(__m128i x) {
  const __m128i nan = _mm_cmpeq_epi8(_mm_or_si128(x, _mm_set1_epi8(static_cast<char>(0x80))), _mm_set1_epi8(-1));
  return __builtin_popcount(static_cast<unsigned>(_mm_movemask_epi8(nan)));
}

// Columns [8j, 8j + 8) of b as K steps of 8 codes (zero codes past N); returns the NaN
// codes met. Whole blocks go 16 K values at a time through an 8 x 16 byte transpose.
int64_t PackBlock(const uint8_t* b, int64_t N, int64_t K, int64_t j, uint8_t* d) {
  int64_t nan = 0;
  int64_t k = 0;
  if ((j + 1) * kCols <= N) {
    const uint8_t* rows = b + j * kCols * K;
    for (; k + 16 <= K; k += 16) {
      __m128i r[8];
      for (int i = 0; i < 8; ++i) {
        r[i] = _mm_loadu_si128(reinterpret_cast<const __m128i*>(rows + i * K + k));
        nan += CountNan(r[i]);
      }
      __m128i t[8], u[8];
      for (int i = 0; i < 4; ++i) {
        t[2 * i] = _mm_unpacklo_epi8(r[2 * i], r[2 * i + 1]);      // rows 2i, 2i+1 at k 0..7
        t[2 * i + 1] = _mm_unpackhi_epi8(r[2 * i], r[2 * i + 1]);  // ... at k 8..15
      }
      for (int h = 0; h < 2; ++h) {  // rows 0..3 (h = 0) and 4..7 (h = 1)
        u[4 * h + 0] = _mm_unpacklo_epi16(t[4 * h], t[4 * h + 2]);      // k 0..3, 4 rows each
        u[4 * h + 1] = _mm_unpackhi_epi16(t[4 * h], t[4 * h + 2]);      // k 4..7
        u[4 * h + 2] = _mm_unpacklo_epi16(t[4 * h + 1], t[4 * h + 3]);  // k 8..11
        u[4 * h + 3] = _mm_unpackhi_epi16(t[4 * h + 1], t[4 * h + 3]);  // k 12..15
      }
      auto* out = reinterpret_cast<__m128i*>(d + k * kCols);
      for (int q = 0; q < 4; ++q) {  // k 4q .. 4q+3: two steps of 8 rows per store
        _mm_storeu_si128(out + 2 * q, _mm_unpacklo_epi32(u[q], u[4 + q]));
        _mm_storeu_si128(out + 2 * q + 1, _mm_unpackhi_epi32(u[q], u[4 + q]));
      }
    }
  }
  for (; k < K; ++k)
    for (int64_t c = 0; c < kCols; ++c) {
      const int64_t n = j * kCols + c;
      const uint8_t code = n < N ? b[n * K + k] : 0;
      nan += (code & 0x7F) == 0x7F;
      d[k * kCols + c] = code;
    }
  return nan;
}

size_t PackedBytes(int64_t N, int64_t K) { return static_cast<size_t>((N + kCols - 1) / kCols * K * kCols); }

int64_t PackWeights(const uint8_t* b, int64_t N, int64_t K, int64_t block0, int64_t block1, uint8_t* dst) {
  int64_t nan = 0;
  for (int64_t j = block0; j < block1; ++j) nan += PackBlock(b, N, K, j, dst + j * K * kCols);
  return nan;
}

// 8 codes -> 8 f32 equal to value * 2^-8 (NaN codes: finite, see above).
inline __m256 Decode8(const uint8_t* p) {
  const __m128i s = _mm_cvtepi8_epi16(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
  return _mm256_cvtph_ps(_mm_and_si128(_mm_slli_epi16(s, 7), _mm_set1_epi16(static_cast<int16_t>(0xBF80))));
}

// Rows of fp8 a as exact f32 values in K order (NaN codes as NaN), zero from K to lda.
void PackA(const uint8_t* a, int64_t K, int64_t rows, void* dst, int64_t lda) {
  for (int64_t r = 0; r < rows; ++r) {
    float* d = static_cast<float*>(dst) + r * lda;
    const uint8_t* p = a + r * K;
    int64_t k = 0;
    for (; k + 8 <= K; k += 8) {
      alignas(16) uint8_t codes[16] = {};
      std::memcpy(codes, p + k, 8);
      const __m128i x = _mm_load_si128(reinterpret_cast<const __m128i*>(codes));
      __m256 v = _mm256_mul_ps(Decode8(codes), _mm256_set1_ps(256.0f));
      const __m128i nan8 = _mm_cmpeq_epi8(_mm_or_si128(x, _mm_set1_epi8(static_cast<char>(0x80))), _mm_set1_epi8(-1));
      const __m256 nan = _mm256_castsi256_ps(_mm256_cvtepi8_epi32(nan8));
      v = _mm256_blendv_ps(v, _mm256_set1_ps(__builtin_nanf("")), nan);
      _mm256_storeu_ps(d + k, v);
    }
    for (; k < lda; ++k) {
      if (k >= K) {
        d[k] = 0.0f;
        continue;
      }
      alignas(16) uint8_t codes[16] = {p[k]};
      float v[8];
      _mm256_storeu_ps(v, _mm256_mul_ps(Decode8(codes), _mm256_set1_ps(256.0f)));
      d[k] = (p[k] & 0x7F) == 0x7F ? __builtin_nanf("") : v[0];
    }
  }
}

// c[i * ldc + 8 j + l] = 2^-8 Σ_k a[i, k] · w[column 8 j + l, k] for MR rows and NB blocks.
template <int MR, int NB>
__attribute__((noinline)) void Tile(const float* a, int64_t lda, const uint8_t* w, int64_t block_bytes, int64_t K,
                                    float* c, int64_t ldc) {
  __m256 acc[MR][NB];
  for (int i = 0; i < MR; ++i)
    for (int j = 0; j < NB; ++j) acc[i][j] = _mm256_setzero_ps();
  auto step = [&](int64_t k) __attribute__((always_inline)) {
    __m256 wv[NB];
    for (int j = 0; j < NB; ++j) wv[j] = Decode8(w + j * block_bytes + k * kCols);
    for (int i = 0; i < MR; ++i) {
      const __m256 av = _mm256_broadcast_ss(a + i * lda + k);
      for (int j = 0; j < NB; ++j) acc[i][j] = _mm256_fmadd_ps(av, wv[j], acc[i][j]);
    }
  };
  int64_t k = 0;
  for (; k + 8 <= K; k += 8) {  // 8 steps: 64 bytes of each block
    for (int j = 0; j < NB; ++j)
      _mm_prefetch(reinterpret_cast<const char*>(w + j * block_bytes + k * kCols + kAhead), _MM_HINT_T0);
#pragma GCC unroll 8
    for (int64_t s = 0; s < 8; ++s) step(k + s);
  }
  for (; k < K; ++k) step(k);
  for (int i = 0; i < MR; ++i)
    for (int j = 0; j < NB; ++j) _mm256_storeu_ps(c + i * ldc + j * kCols, acc[i][j]);
}

using TileFn = void (*)(const float*, int64_t, const uint8_t*, int64_t, int64_t, float*, int64_t);

// Up to 2 rows with 4 blocks, up to 6 rows with 2: at most 12 accumulators, which with
// the decoded weights, the broadcast and the mask fit in the 16 vector registers.
template <int MR>
TileFn TileFor(int nb) {
  if constexpr (MR <= 2) {
    if (nb >= 4) return &Tile<MR, 4>;
  }
  return nb >= 2 ? &Tile<MR, 2> : &Tile<MR, 1>;
}
TileFn ChooseTile(int64_t mr, int nb) {
  switch (mr) {
    case 1: return TileFor<1>(nb);
    case 2: return TileFor<2>(nb);
    case 3: return TileFor<3>(nb);
    case 4: return TileFor<4>(nb);
    case 5: return TileFor<5>(nb);
    default: return TileFor<6>(nb);
  }
}

void GemmPacked(const void* av, int64_t lda, int64_t M, const uint8_t* packed, int64_t K, int64_t block0,
                int64_t block1, float* c, int64_t ldc) {
  const auto* a = static_cast<const float*>(av);
  const int64_t block_bytes = K * kCols;
  const int group = M <= 2 ? 4 : 2;
  const int64_t rows_per_tile = M <= 2 ? M : 6;
  for (int64_t j = block0; j < block1; j += group) {
    const int nb = static_cast<int>(std::min<int64_t>(group, block1 - j));
    const uint8_t* w = packed + j * block_bytes;
    float* cj = c + (j - block0) * kCols;
    for (int64_t m = 0; m < M; m += rows_per_tile) {
      const int64_t mr = std::min(rows_per_tile, M - m);
      for (int done = 0; done < nb;) {
        const int take = nb - done >= 4 ? 4 : nb - done >= 2 ? 2 : 1;
        ChooseTile(mr, take)(a + m * lda, lda, w + done * block_bytes, block_bytes, K, cj + m * ldc + done * kCols,
                             ldc);
        done += take;
      }
    }
  }
}

}  // namespace

const PackedFp8Kernels& Avx2PackedKernels() {
  static const PackedFp8Kernels k{"avx2-outer8", kCols, 4, 8, 256.0f, false, &PackedBytes, &PackWeights, &PackA,
                                  &GemmPacked};
  return k;
}

}  // namespace vt::cpu::matmul
