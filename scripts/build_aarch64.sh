#!/usr/bin/env bash
# Cross-builds vt, the model layer, the tokenizer and the engine for aarch64 (GCC cross
# compiler, CPU only; the NEON and NEON-BF16 kernel levels and the portable ones) into
# build/aarch64 and runs their tests under qemu-aarch64: vt's once per qemu CPU model, the
# model's and the engine's under the first. The server, the `vtllm` command and the C API are
# not cross-built (-DVTLLM_FRONTENDS=OFF: they need cpp-httplib, which Debian builds as a shared
# library with OpenSSL, brotli and zlib; docs/arm.md).
# Needs: bash scripts/setup.sh --arm (g++-aarch64-linux-gnu, qemu-user, libgtest-dev sources,
# and Debian's arm64 pcre2, utf8proc and xxhash unpacked into VTLLM_AARCH64_DEPS).
#
#   bash scripts/build_aarch64.sh          all of vt_tests per CPU model, all of model_tests and
#                                          engine_tests under the first
#   bash scripts/build_aarch64.sh --ci     the CI subset (scripts/test.sh): vt_ci_tests (the op table,
#                                          the dispatch, queue and kernel tests) under the first CPU
#                                          model, its op table and dispatch tests under the others;
#                                          model_ci_tests (the qwen3-tiny oracles) and engine_ci_tests
#                                          (scheduler, engine end to end, FP8 KV cache, MoE with BF16
#                                          and FP8 experts) under the first
#   bash scripts/build_aarch64.sh --bench  also builds vt_kernels_bench for aarch64 (to copy to ARM hardware)
#
# Environment: AARCH64_BUILD_DIR (default build/aarch64, relative to the repository), JOBS
# (default nproc), QEMU_CPUS (default "max neoverse-n1 cortex-a53": vt_tests runs once per
# model, model_tests and engine_tests under the first), TARGETS (default "vt_tests model_tests
# engine_tests"), GTEST_FILTER (passed to the vt binary), MODEL_FILTER (the model binary),
# ENGINE_FILTER (the engine binary), NARROW_FILTER (--ci: the vt binary's filter for the CPU
# models after the first), VTLLM_AARCH64_DEPS (default ~/.cache/vtllm-aarch64-deps, where
# setup.sh --arm put the aarch64 libraries).
# Each model must be detected as the level ExpectedIsa names (VTLLM_EXPECT_CPU_ISA, checked by
# Queue.CpuDetectionReportsLevelsAndFeatures, IsaDispatch.* and the engine's
# Engine.StepsRunTheVectorKernelsOfTheDetectedLevel), so a detection that finds less, and runs
# narrower kernels, fails.
set -euo pipefail
cd "$(dirname "$0")/.."

MODE=all
for arg in "$@"; do
  case "$arg" in
    --ci) MODE=ci ;;
    --bench) BENCH=1 ;;
    *) echo "build_aarch64: unknown argument $arg" >&2; exit 2 ;;
  esac
done
JOBS=${JOBS:-$(nproc)}
QEMU_CPUS=${QEMU_CPUS:-"max neoverse-n1 cortex-a53"}
TARGETS=${TARGETS:-"vt_tests model_tests engine_tests"}
SYSROOT=/usr/aarch64-linux-gnu
DEPS=${VTLLM_AARCH64_DEPS:-$HOME/.cache/vtllm-aarch64-deps}
export CCACHE_DIR=${CCACHE_DIR:-$HOME/.cache/vtllm-ccache}
export CCACHE_BASEDIR=$PWD
B=${AARCH64_BUILD_DIR:-build/aarch64}
if [ "$MODE" = ci ]; then
  # vt_ci_tests, model_ci_tests and engine_ci_tests: subsets of vt_tests, model_tests and
  # engine_tests (tests/CMakeLists.txt).
  TARGETS="vt_ci_tests model_ci_tests engine_ci_tests"
  # The first model (max) runs every level, scalar, neon and neonbf16, so the others need
  # only prove detection and that the kernels they run use no instruction they lack: the
  # op table (every op, every level of the model) and the dispatch records.
  NARROW_FILTER=${NARROW_FILTER:-"*OpTable*:IsaDispatch.*:Queue.*"}
fi
[ "${BENCH:-0}" = 1 ] && TARGETS="$TARGETS vt_kernels_bench"

# The level each qemu CPU model must be detected as (qemu 7.2: max has bf16; neoverse-n1
# asimd, fp16, dot product; cortex-a53 asimd only).
ExpectedIsa() {
  case "$1" in
    max) echo neonbf16 ;;
    neoverse-n1|cortex-a53|cortex-a57|cortex-a72|a64fx) echo neon ;;
    *) echo "" ;;  # unknown model: not checked
  esac
}

for tool in aarch64-linux-gnu-g++ qemu-aarch64; do
  command -v $tool >/dev/null || { echo "build_aarch64: $tool missing (bash scripts/setup.sh --arm)" >&2; exit 1; }
done
[ -f /usr/src/googletest/CMakeLists.txt ] || { echo "build_aarch64: /usr/src/googletest missing (libgtest-dev)" >&2; exit 1; }
[ -f "$DEPS/packages.txt" ] || {
  echo "build_aarch64: no aarch64 pcre2, utf8proc and xxhash in $DEPS (bash scripts/setup.sh --arm)" >&2; exit 1; }

# nlohmann/json is header-only and the same for every target; a folder holding just it keeps
# the cross compiler off the host's /usr/include.
mkdir -p $B/host-json
ln -sfn /usr/include/nlohmann $B/host-json/nlohmann

t0=$(date +%s)
cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_TOOLCHAIN_FILE=cmake/toolchain-aarch64-linux-gnu.cmake \
  -DVTLLM_CORE_ONLY=OFF -DVTLLM_FRONTENDS=OFF -DVTLLM_AARCH64_DEPS="$DEPS" \
  -DVTLLM_BENCH=${BENCH:-OFF} -DVT_CUDA=OFF -DVTLLM_STATIC_RUNTIME=ON \
  -DVTLLM_GTEST_SOURCE_DIR=/usr/src/googletest -DVTLLM_JSON_INCLUDE_DIR=$PWD/$B/host-json >/dev/null
cmake --build $B -j"$JOBS" --target $TARGETS
t1=$(date +%s)
echo "== build_aarch64: build took $((t1 - t0)) s"

rc=0
first=1
for cpu in $QEMU_CPUS; do
  for t in $TARGETS; do
    [ "$t" = vt_kernels_bench ] && continue
    case "$t" in model_*|engine_*) [ $first -eq 0 ] && continue ;; esac
    filter=${GTEST_FILTER:-}
    [ $first -eq 0 ] && [ -n "${NARROW_FILTER:-}" ] && filter=${GTEST_FILTER:-$NARROW_FILTER}
    case "$t" in
      model_*) filter=${MODEL_FILTER:-} ;;
      engine_*) filter=${ENGINE_FILTER:-} ;;
    esac
    echo "== $t under qemu-aarch64 -cpu $cpu (expected level: $(ExpectedIsa "$cpu"))${filter:+, filter $filter}"
    s=$(date +%s)
    log=$B/tests/$t.$cpu.log
    # QEMU_CPU: the CPU model also for the tools a test starts (through qemu, see
    # VTLLM_TOOL_RUNNER in tests/CMakeLists.txt).
    (cd $B/tests && QEMU_LD_PREFIX=$SYSROOT QEMU_CPU=$cpu VTLLM_EXPECT_CPU_ISA=$(ExpectedIsa "$cpu") \
       qemu-aarch64 -cpu "$cpu" -L $SYSROOT ./$t ${filter:+--gtest_filter=$filter} --gtest_brief=1) >"$log" 2>&1 || rc=1
    tail -n 30 "$log" | grep -v '^\[ ' || true
    # A filter or a build that runs no test must not pass.
    passed=$(sed -n 's/^\[  PASSED  \] \([0-9]*\) test.*/\1/p' "$log")
    if [ -z "$passed" ] || [ "$passed" -eq 0 ]; then
      echo "build_aarch64: $t -cpu $cpu ran no test" >&2
      rc=1
    fi
    echo "== $t -cpu $cpu: ${passed:-0} tests passed, $(( $(date +%s) - s )) s (log: $log)"
  done
  first=0
done
exit $rc
