#!/usr/bin/env bash
# Mutation check of the FP8 numeric core: applies each known mutation alone to a scratch
# copy of the tree, rebuilds vt_tests there, runs it, and prints whether the tests caught it.
#
#   tools/mutation/run_mutations.sh [SCRATCH_DIR]      (default: a fresh /tmp directory)
#
# Every mutation edits every implementation of its step (scalar reference, the shared
# scalar conversions, the vector kernels, the matmul epilogues found by grep), so that no
# unmutated path can mask it. The working tree is never modified. Not part of CI.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
SCRATCH="${1:-$(mktemp -d /tmp/vtllm-mutation.XXXXXX)}"
SRC="$SCRATCH/src"
PRISTINE="$SCRATCH/pristine"
BUILD="$SCRATCH/build"
JOBS="${JOBS:-2}"

echo "scratch: $SCRATCH"
mkdir -p "$SRC" "$PRISTINE"
tar -C "$ROOT" --exclude='./build*' --exclude='./.git' --exclude='./tests/js' -cf - . | tar -C "$SRC" -xf -
tar -C "$ROOT" --exclude='./build*' --exclude='./.git' --exclude='./tests/js' -cf - . | tar -C "$PRISTINE" -xf -
# Mutants may leave a variable unused; warnings must not stop them from building.
sed -i 's/^set(VTLLM_WARNINGS -Wall -Wextra -Werror)/set(VTLLM_WARNINGS -Wall -Wextra)/' "$SRC/CMakeLists.txt"
cmake -S "$SRC" -B "$BUILD" -G Ninja -DVTLLM_BENCH=OFF >"$SCRATCH/configure.log" 2>&1

# Files each mutation touches (relative to the tree); restored from the pristine copy
# before the next mutation.
TOUCHED=(include/vt/dtype.h include/vt/detail/numerics.h src/vt/cpu/reference.cpp src/vt/cpu/simd_vec.h)
for f in "$SRC"/src/vt/cpu/matmul/*.cpp; do TOUCHED+=("${f#$SRC/}"); done

restore() {
  for f in "${TOUCHED[@]}"; do cp "$PRISTINE/$f" "$SRC/$f"; done
}

# edit FILE PERL_EXPR: applies a perl substitution; fails the mutation if nothing changed.
APPLIED_OK=1
edit() {
  local file="$SRC/$1" expr="$2"
  local before
  before="$(md5sum "$file")"
  perl -0pi -e "$expr" "$file"
  if [[ "$(md5sum "$file")" == "$before" ]]; then
    echo "  !! pattern not found in $1: $expr" >&2
    APPLIED_OK=0
  fi
}

mutate_scale_ignored() {
  edit src/vt/cpu/reference.cpp 's/const float inv = 1\.0f \/ input_scale;/const float inv = 1.0f;/'
  edit src/vt/cpu/simd_vec.h 's/inv\(Set1\(1\.0f \/ input_scale\)\)/inv(Set1(1.0f))/'
}
mutate_divide() {
  edit src/vt/cpu/reference.cpp 's/numerics::QuantizeFp8\(LoadFloat\(x\.data\(\), x\.dtype\(\), i\), inv\)/numerics::QuantizeFp8(LoadFloat(x.data(), x.dtype(), i) \/ input_scale, 1.0f)/'
  edit src/vt/cpu/simd_vec.h 's/V v = Mul\(x, s\.inv\);/V v = Div(x, s.scale);/'
}
mutate_no_saturation() {
  edit include/vt/detail/numerics.h 's/\n\s*if \(v > kFp8E4M3Max\) v = kFp8E4M3Max;\n\s*if \(v < -kFp8E4M3Max\) v = -kFp8E4M3Max;//'
  edit src/vt/cpu/simd_vec.h 's/\n\s*v = Min\(Set1\(448\.0f\), v\);\n\s*v = Max\(Set1\(-448\.0f\), v\);//'
}
mutate_truncate() {
  # Normal range: drop the round-up; subnormal range: truncate instead of the magic-add RNE.
  edit include/vt/dtype.h 's/\n\s*if \(rest > 0x80000u \|\| \(rest == 0x80000u && \(q & 1u\)\)\) \+\+q;//'
  edit include/vt/dtype.h 's/(\* 0x1p9f;\n\s*const float r = )\(scaled \+ 0x1p23f\) - 0x1p23f;/$1__builtin_truncf(scaled);/'
  edit src/vt/cpu/simd_vec.h 's/AddI\(AddI\(a, Set1I\(0x7FFFF\)\), lsb\)/AddI(a, AndI(lsb, Set1I(0)))/'
  edit src/vt/cpu/simd_vec.h 's/CvttI\(RoundToInteger\(Mul\(AsF\(a\), Set1\(0x1p9f\)\)\)\)/CvttI(Mul(AsF(a), Set1(0x1p9f)))/'
}
mutate_alpha_ignored() {
  edit src/vt/cpu/reference.cpp 's/float v = alpha \* acc;/float v = acc;/'
  # Fast-path epilogues: every "<x.>alpha * " in the CPU matmul sources.
  for f in "$SRC"/src/vt/cpu/matmul/*.cpp; do
    if grep -qE '\b([A-Za-z_]+\.)?alpha \* ' "$f"; then edit "${f#$SRC/}" 's/\b(?:[A-Za-z_]+\.)?alpha \* //g'; fi
  done
}

# The outer-product kernels on re-laid-out weights (matmul/packed_*.cpp): each row of a
# read one element late, so every K pair meets the wrong activations.
mutate_packed_k_shift() {
  edit src/vt/cpu/matmul/packed_avx512.cpp 's/std::memcpy\(&p0, a \+ i \* lda \+ 4 \* s, 4\);/std::memcpy(&p0, a + i * lda + 4 * s + 1, 4);/'
  edit src/vt/cpu/matmul/packed_avx2.cpp 's/_mm256_broadcast_ss\(a \+ i \* lda \+ 2 \* p\);/_mm256_broadcast_ss(a + i * lda + 2 * p + 1);/'
}
# The parts walk of the outer-product kernels (ForEachPackedTile, M <= 16): a tile's
# blocks are `stride` blocks apart, but their results stored as if adjacent.
mutate_parts_c_stride() {
  for f in src/vt/cpu/matmul/packed_avx512.cpp src/vt/cpu/matmul/packed_avx2.cpp; do
    edit "$f" 's/ldc, stride \* kCols\);/ldc, kCols);/'
  done
}
# The matmul epilogue (every vector width) truncating to BF16 instead of rounding.
mutate_epilogue_bf16_truncate() {
  edit src/vt/cpu/matmul/matmul.cpp 's/dst\[j\] = FloatToBf16\(alpha \* \(c\[j\] \* unscale\)\);/{ const float v = alpha * (c[j] * unscale); uint32_t u; std::memcpy(&u, &v, 4); dst[j] = static_cast<uint16_t>(u >> 16); }/'
}
# The f32-bits fp8 decode (AVX2 stream and packed kernel) without clearing the caller's
# denormals-are-zero: subnormal weights would count as 0.
mutate_no_denormal_guard() {
  for f in src/vt/cpu/matmul/gemm_avx2.cpp src/vt/cpu/matmul/packed_avx2.cpp; do
    edit "$f" 's/if \(\(csr & kDazFtz\) != 0\) _mm_setcsr\(csr & ~kDazFtz\);//'
  done
}

# run NAME: builds and runs vt_tests; prints "failed|passed|names of failed tests" or a reason.
run_tests() {
  local name="$1" log="$SCRATCH/$1.log"
  if ! ninja -C "$BUILD" -j"$JOBS" vt_tests >"$log" 2>&1; then
    echo "build failed (see $log)"
    return
  fi
  "$BUILD/tests/vt_tests" --gtest_brief=1 >>"$log" 2>&1 || true
  local ran passed names
  ran="$(grep -E '^\[==========\] [0-9]+ tests? from' "$log" | tail -1 | grep -oE '[0-9]+' | head -1 || true)"
  passed="$(grep -E '^\[  PASSED  \] [0-9]+ test' "$log" | grep -oE '[0-9]+' | head -1 || true)"
  names="$(grep -E '^\[  FAILED  \] [A-Za-z0-9_]+\.[A-Za-z0-9_]+' "$log" | sed -E 's/^\[  FAILED  \] ([^ ]+).*/\1/' | sort -u | paste -sd' ' || true)"
  if [[ -z "$ran" ]]; then echo "did not run (see $log)"; return; fi
  echo "$(( ran - ${passed:-0} ))|${passed:-0}|$names"
}

MUTATIONS=(scale_ignored divide no_saturation truncate alpha_ignored packed_k_shift parts_c_stride epilogue_bf16_truncate no_denormal_guard)
declare -A RESULT
restore
RESULT[baseline]="$(run_tests baseline)"
for m in "${MUTATIONS[@]}"; do
  restore
  APPLIED_OK=1
  "mutate_$m"
  if [[ $APPLIED_OK == 0 ]]; then
    RESULT[$m]="not applied"
  else
    RESULT[$m]="$(run_tests "$m")"
  fi
  echo "  $m: ${RESULT[$m]}"
done
restore

printf '\n%-18s | %-14s | %-8s | %s\n' "mutation" "tests failed" "caught?" "failing tests"
printf -- '-------------------+----------------+----------+--------------\n'
status=0
for m in baseline "${MUTATIONS[@]}"; do
  r="${RESULT[$m]}"
  if [[ "$r" == *"|"* ]]; then
    failed="${r%%|*}"
    names="${r##*|}"
    if [[ $m == baseline ]]; then verdict=$([[ $failed == 0 ]] && echo "clean" || echo "NOT CLEAN"); else
      verdict=$([[ $failed -gt 0 ]] && echo "yes" || echo "NO"); fi
    [[ $verdict == "NO" || $verdict == "NOT CLEAN" ]] && status=1
    printf '%-18s | %-14s | %-8s | %s\n' "$m" "$failed" "$verdict" "$names"
  else
    printf '%-18s | %-14s | %-8s |\n' "$m" "-" "$r"
    status=1
  fi
done
echo "logs: $SCRATCH/*.log"
exit $status
