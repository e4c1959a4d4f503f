#!/usr/bin/env bash
# The test command (README, .ci/run): set up a fresh machine, build, run every test.
#  1. the main build (with the CUDA backend compiled when nvcc is present; GPU tests
#     report SKIPPED without a GPU), all tests;
#  2. an ASan+UBSan build of the parsers, the vt core and the server's request handling, their tests;
#  3. the aarch64 cross build of vt, the model layer, the tokenizer, the engine, the server, the
#     CLI and the C API (NEON kernel levels), its CI subset run under qemu-aarch64: vt's with the
#     CPU models max, neoverse-n1 and cortex-a53, the model's with max, the engine's with max
#     and neoverse-n1, the C API program and the OpenAI end-to-end test against `vtllm serve`
#     with max (docs/arm.md).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --arm  # --arm: the aarch64 cross compiler, qemu-user and libraries for stage 3

JOBS=${JOBS:-$(nproc)}
export CCACHE_DIR=${CCACHE_DIR:-$HOME/.cache/vtllm-ccache}
export CCACHE_BASEDIR=$PWD  # cache hits across checkouts in different folders
CUDA_FLAGS=()
if command -v nvcc >/dev/null || [ -x /usr/local/cuda/bin/nvcc ]; then
  export PATH=$PATH:/usr/local/cuda/bin
  CUDA_FLAGS=(-DVT_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90a)
fi

echo "== mutation patterns (each of tools/mutation's mutations still finds the code it breaks)"
CHECK_PATTERNS=1 bash tools/mutation/run_mutations.sh
echo "== build (main configuration: ${CUDA_FLAGS[*]:-CPU only})"
cmake -S . -B build/ci -G Ninja -DCMAKE_BUILD_TYPE=Release "${CUDA_FLAGS[@]}" >/dev/null
cmake --build build/ci -j"$JOBS"
echo "== tests (main configuration)"
ctest --test-dir build/ci --output-on-failure -j"$JOBS" --no-tests=error

echo "== build (ASan+UBSan: vt core, parsers, engine, server)"
cmake -S . -B build/asan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DVTLLM_SANITIZE=ON -DVTLLM_BENCH=OFF >/dev/null
SAN_TARGETS=$(cmake --build build/asan --target help | sed -n 's/^\(vt_tests\|tokenizer_tests\|model_tests\|engine_tests\|server_tests\): .*/\1/p' | tr '\n' ' ')
cmake --build build/asan -j"$JOBS" --target $SAN_TARGETS
echo "== tests (ASan+UBSan)"
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  ctest --test-dir build/asan --output-on-failure -j"$JOBS" --no-tests=error -L 'vt|tokenizer|model|engine|server' -E 'Peer|Bench|Large'

echo "== aarch64: cross build and the CI subset under qemu-aarch64 (scripts/build_aarch64.sh --ci)"
JOBS=$JOBS bash scripts/build_aarch64.sh --ci
