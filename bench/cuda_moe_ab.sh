#!/usr/bin/env bash
# The CUDA MoE expert kernels A/B in one run: the tensor-core tiles over the pairs sorted by
# expert (src/vt/cuda/moe_tiled.cu) against the per-pair kernels (VT_CUDA_MOE_TILED=0), each
# run twice alternated, on random checkpoints of real shapes made by tools/make_random_checkpoint:
#  - Qwen3.5-35B-A3B (4 layers: 3 Gated DeltaNet + 1 attention, 256 experts of 512), ModelOpt
#    static FP8: a 2,048-token prefill;
#  - Qwen3-30B-A3B (4 layers, 128 experts of 768), static FP8: a 2,048-token prefill and a
#    batch-32 decode (past 16 tokens, so the tiles run inside the CUDA graphs);
#  - the same in BF16: a 2,048-token prefill.
# Usage: bench/cuda_moe_ab.sh BUILD_DIR [SCRATCH_DIR]   (a CUDA build: -DVT_CUDA=ON)
set -euo pipefail
BUILD=${1:?usage: bench/cuda_moe_ab.sh BUILD_DIR [SCRATCH_DIR]}
SCRATCH=${2:-/tmp/vtllm-moe-ab}
VTLLM=$BUILD/src/cli/vtllm
MAKE=$BUILD/tools/make_random_checkpoint
for f in "$VTLLM" "$MAKE"; do [ -x "$f" ] || { echo "cuda_moe_ab: $f is missing (build vtllm and make_random_checkpoint)"; exit 1; }; done
mkdir -p "$SCRATCH"
make_ckpt() {  # NAME PRESET FORMAT
  [ -f "$SCRATCH/$1/config.json" ] || "$MAKE" --out "$SCRATCH/$1" --preset "$2" --format "$3" --layers 4 >/dev/null
}
make_ckpt h35 qwen3.5-35b-a3b fp8-modelopt
make_ckpt m30 qwen3-30b-a3b fp8-modelopt
make_ckpt b30 qwen3-30b-a3b bf16
ab() {  # TITLE, then bench latency arguments
  local title=$1; shift
  for t in 1 0 1 0; do
    echo "== $title, VT_CUDA_MOE_TILED=$t"
    VT_CUDA_MOE_TILED=$t "$VTLLM" bench latency "$@" --device cuda | grep -E "^[a-z ]*:$|prefill:|decode:|graphs"
  done
}
ab "Qwen3.5-35B-A3B FP8, prefill 2048" "$SCRATCH/h35" --batch-size 1 --input-len 2048 --output-len 8 --rounds 3
ab "Qwen3-30B-A3B FP8, prefill 2048" "$SCRATCH/m30" --batch-size 1 --input-len 2048 --output-len 8 --rounds 3
ab "Qwen3-30B-A3B FP8, batch 32" "$SCRATCH/m30" --batch-size 32 --input-len 128 --output-len 32 --rounds 3
ab "Qwen3-30B-A3B BF16, prefill 2048" "$SCRATCH/b30" --batch-size 1 --input-len 2048 --output-len 8 --rounds 3
