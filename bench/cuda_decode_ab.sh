#!/usr/bin/env bash
# A CUDA decode switch A/B in one run: `vtllm bench latency --device cuda` at batch 1 (CUDA
# graphs, engine step medians) with an environment variable at each of the given values in
# turn, the whole round twice, on random checkpoints made by tools/make_random_checkpoint:
# Qwen3-0.6B and Qwen3-8B shapes in ModelOpt static FP8 and Qwen3-0.6B in BF16.
# Usage: bench/cuda_decode_ab.sh BUILD_DIR VARIABLE "VALUE VALUE ..." [SCRATCH_DIR]
#   e.g. bench/cuda_decode_ab.sh build/cuda VT_CUDA_PDL "1 0"
# VARIABLE FLAG switches a `bench latency` flag instead: each value is passed as an argument
#   e.g. bench/cuda_decode_ab.sh build/cuda FLAG "--async-scheduling --no-async-scheduling"
# MODELS="q06 q8 b06" picks the checkpoints (default all three); ROUNDS=N the rounds (default 2);
# INPUT_LEN / OUTPUT_LEN the prompt and output lengths (default 128 / 64); BATCH the batch size
# (default 1); BENCH_ARGS adds
# arguments to each `bench latency` (e.g. "--max-model-len 32768": a server's CUDA graphs,
# recorded for that block-table width; "--kv-cache-dtype fp8": an F8E4M3 cache).
set -euo pipefail
BUILD=${1:?usage: bench/cuda_decode_ab.sh BUILD_DIR VARIABLE \"VALUES\" [SCRATCH_DIR]}
VAR=${2:?the environment variable to switch}
VALUES=${3:?the values to alternate}
SCRATCH=${4:-/tmp/vtllm-decode-ab}
VTLLM=$BUILD/src/cli/vtllm
MAKE=$BUILD/tools/make_random_checkpoint
for f in "$VTLLM" "$MAKE"; do [ -x "$f" ] || { echo "cuda_decode_ab: $f is missing (build vtllm and make_random_checkpoint)"; exit 1; }; done
mkdir -p "$SCRATCH"
declare -A PRESET=([q06]=qwen3-0.6b [q8]=qwen3-8b [b06]=qwen3-0.6b)
declare -A FORMAT=([q06]=fp8-modelopt [q8]=fp8-modelopt [b06]=bf16)
for m in ${MODELS:-q06 q8 b06}; do
  [ -f "$SCRATCH/$m/config.json" ] || "$MAKE" --out "$SCRATCH/$m" --preset "${PRESET[$m]}" --format "${FORMAT[$m]}" >/dev/null
done
for round in $(seq 1 "${ROUNDS:-2}"); do
  for m in ${MODELS:-q06 q8 b06}; do
    for v in $VALUES; do
      echo "== ${PRESET[$m]} ${FORMAT[$m]}, batch ${BATCH:-1}, prompt ${INPUT_LEN:-128}, $VAR=$v (round $round)"
      if [ "$VAR" = FLAG ]; then env=(); flag=("$v"); else env=("$VAR=$v"); flag=(); fi
      env "${env[@]}" "$VTLLM" bench latency "$SCRATCH/$m" --device cuda --batch-size "${BATCH:-1}" --input-len "${INPUT_LEN:-128}" \
        --output-len "${OUTPUT_LEN:-64}" --rounds 3 ${BENCH_ARGS:-} "${flag[@]}" | grep -E "^[a-z -]*:$|decode:|bandwidth|graphs|async"
    done
  done
done
