#!/usr/bin/env bash
# The main job (README): set up a fresh machine, build, and run
#  1. the CPU kernel benchmark in quick mode (memory bandwidth, fp8 GEMV/GEMM vs BF16), and
#  2. a static-FP8 (ModelOpt) checkpoint generating greedily on the CPU.
# There is no embedded default model yet; the FP8 checkpoint is the small test model.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
JOBS=${JOBS:-$(nproc)}
export CCACHE_DIR=${CCACHE_DIR:-$HOME/.cache/vtllm-ccache}
export CCACHE_BASEDIR=$PWD
cmake -S . -B build/release -G Ninja -DCMAKE_BUILD_TYPE=Release -DVTLLM_TESTS=OFF >/dev/null
cmake --build build/release -j"$JOBS"
echo "== vt kernel benchmark (quick)"
./build/release/bench/vt_kernels_bench --quick
echo "== vtllm generate: static FP8 W8A8 checkpoint on the CPU"
./build/release/src/cli/vtllm generate tests/fixtures/oracles/qwen3-tiny/fp8_modelopt \
  --prompt-ids 411,410,55,150,509 --max-tokens 16 --temperature 0 --json
