#!/usr/bin/env bash
# Cross-builds vt, the model layer, the tokenizer, the engine, the server, the `vtllm` command
# and the C API for aarch64 (GCC cross compiler, CPU only; the NEON and NEON-BF16 kernel levels
# and the portable ones) into build/aarch64 and runs their tests under qemu-aarch64: vt's once
# per qemu CPU model, the model's under the first, the engine's under the first and
# neoverse-n1 (ENGINE_CPUS), then the C API test program, `vtllm bench latency` and the
# OpenAI end-to-end test (node, on this machine) against `vtllm serve` under the first.
# cpp-httplib is compiled header-only, without HTTPS and compressed bodies (docs/arm.md).
# Needs: bash scripts/setup.sh --arm (g++-aarch64-linux-gnu, qemu-user, libgtest-dev sources,
# Debian's arm64 pcre2, utf8proc and xxhash and cpp-httplib's header-only httplib.h in
# VTLLM_AARCH64_DEPS) and scripts/setup.sh's npm ci (the Qwen3 tokenizer, the openai client).
#
#   bash scripts/build_aarch64.sh          all of vt_tests per CPU model, all of model_tests under
#                                          the first, all of engine_tests under ENGINE_CPUS
#   bash scripts/build_aarch64.sh --ci     the CI subset (scripts/test.sh): vt_ci_tests (the op table,
#                                          the dispatch, queue and kernel tests) under the first CPU
#                                          model, its op table and dispatch tests under the others;
#                                          model_ci_tests (the qwen3-tiny oracles) under the first;
#                                          engine_ci_tests (scheduler, engine end to end, async
#                                          scheduling, FP8 KV
#                                          cache, MoE with BF16 and FP8 experts, the kernels each
#                                          level runs) under ENGINE_CPUS (max: neonbf16,
#                                          neoverse-n1: neon)
#                                          (--ci also compiles vt_kernels_bench, without running it)
#   bash scripts/build_aarch64.sh --bench  also builds vt_kernels_bench for aarch64 (to copy to ARM hardware)
#   both modes then run the frontends under the first CPU model: capi_test (every function of
#   vtllm.h on a random tiny checkpoint and the embedded default model), `vtllm bench latency
#   --json` (the level it names; then under -cpu max with --cpu-isa neon and neonbf16, each
#   of which it must name), tests/js/server/e2e_openai.mjs (the official openai client
#   against `vtllm serve` on loopback: completions, chat, streaming, logprobs, tools, errors,
#   api key, `vtllm bench serve`, a clean SIGTERM exit); FRONTEND_TESTS=0 skips them
#
# Environment: AARCH64_BUILD_DIR (default build/aarch64, relative to the repository), JOBS
# (default nproc), QEMU_CPUS (default "max neoverse-n1 cortex-a53": vt_tests runs once per
# model, model_tests under the first), ENGINE_CPUS (default "max neoverse-n1": the models of
# QEMU_CPUS that run the engine's tests), TARGETS (default "vt_tests model_tests
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
ENGINE_CPUS=${ENGINE_CPUS:-"max neoverse-n1"}
FRONTEND_TESTS=${FRONTEND_TESTS:-1}
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
  # op table (every op, every level of the model), the dispatch records, the byte hashes
  # tied to x86's (IsaBytes) and the NEON fp8 cache decode against the scalar one, all 256
  # codes bit for bit (Fp8DecodeNeon).
  NARROW_FILTER=${NARROW_FILTER:-"*OpTable*:IsaDispatch.*:IsaBytes.*:Queue.*:Fp8DecodeNeon.*"}
  # The ARM kernel benchmark is compiled (not run), so that it cannot break unnoticed.
  BENCH=1
fi
[ "${BENCH:-0}" = 1 ] && TARGETS="$TARGETS vt_kernels_bench"
BUILD_TARGETS=$TARGETS
[ "$FRONTEND_TESTS" = 1 ] && BUILD_TARGETS="$BUILD_TARGETS vtllm capi_test make_random_checkpoint"

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

# nlohmann/json and CLI11 are header-only and the same for every target; a folder holding
# just them keeps the cross compiler off the host's /usr/include.
mkdir -p $B/host-headers
ln -sfn /usr/include/nlohmann $B/host-headers/nlohmann
ln -sfn /usr/include/CLI $B/host-headers/CLI
[ -f "$DEPS/cpp-httplib/httplib.h" ] || {
  echo "build_aarch64: no header-only cpp-httplib in $DEPS/cpp-httplib (bash scripts/setup.sh --arm)" >&2; exit 1; }

t0=$(date +%s)
cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_TOOLCHAIN_FILE=cmake/toolchain-aarch64-linux-gnu.cmake \
  -DVTLLM_CORE_ONLY=OFF -DVTLLM_FRONTENDS=ON -DVTLLM_AARCH64_DEPS="$DEPS" \
  -DVTLLM_BENCH=${BENCH:-OFF} -DVT_CUDA=OFF -DVTLLM_STATIC_RUNTIME=ON \
  -DVTLLM_GTEST_SOURCE_DIR=/usr/src/googletest -DVTLLM_JSON_INCLUDE_DIR=$PWD/$B/host-headers \
  -DVTLLM_CLI11_INCLUDE_DIR=$PWD/$B/host-headers -DVTLLM_HTTPLIB_INCLUDE_DIR="$DEPS/cpp-httplib" >/dev/null
cmake --build $B -j"$JOBS" --target $BUILD_TARGETS
t1=$(date +%s)
echo "== build_aarch64: build took $((t1 - t0)) s"

rc=0
first=1
for cpu in $QEMU_CPUS; do
  for t in $TARGETS; do
    [ "$t" = vt_kernels_bench ] && continue
    case "$t" in
      model_*) [ $first -eq 0 ] && continue ;;
      engine_*) case " $ENGINE_CPUS " in *" $cpu "*) ;; *) continue ;; esac ;;
    esac
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

if [ "$FRONTEND_TESTS" = 1 ]; then
  cpu=${QEMU_CPUS%% *}
  want=$(ExpectedIsa "$cpu")
  # The aarch64 programs as commands the host's tests can start (no binfmt_misc here).
  W=$PWD/$B/qemu-run
  mkdir -p "$W"
  for tool in src/cli/vtllm tools/make_random_checkpoint; do
    printf '#!/bin/sh\nexec env QEMU_LD_PREFIX=%s QEMU_CPU=%s qemu-aarch64 -cpu %s -L %s %s "$@"\n' \
      $SYSROOT "$cpu" "$cpu" $SYSROOT "$PWD/$B/$tool" > "$W/$(basename $tool)"
    chmod +x "$W/$(basename $tool)"
  done

  echo "== capi_test under qemu-aarch64 -cpu $cpu"
  s=$(date +%s)
  log=$B/tests/capi_test.$cpu.log
  # The checkpoint of tests/capi (a random tiny Qwen3 with the real Qwen3 tokenizer).
  if ! { [ -f $B/tests/capi/model/model.safetensors ] || \
         cmake -DMAKE_CHECKPOINT="$W/make_random_checkpoint" -DSOURCE_DIR="$PWD" -DOUT="$PWD/$B/tests/capi/model" \
           -P tests/capi/make_test_model.cmake >"$log.setup" 2>&1; }; then
    cat "$log.setup"; rm -rf $B/tests/capi/model; rc=1
  fi
  (cd $B/tests/capi && QEMU_LD_PREFIX=$SYSROOT QEMU_CPU=$cpu \
     qemu-aarch64 -cpu "$cpu" -L $SYSROOT ./capi_test ./model) >"$log" 2>&1 || rc=1
  tail -n 5 "$log"
  if grep -q '^capi_test: all checks passed' "$log"; then capi=1; else capi=0; rc=1; fi
  echo "== capi_test -cpu $cpu: $capi passed, $(( $(date +%s) - s )) s (log: $log)"

  echo "== vtllm bench latency --json under qemu-aarch64 -cpu $cpu (expected level: $want)"
  s=$(date +%s)
  log=$B/tests/vtllm_bench.$cpu.log
  if "$W/vtllm" bench latency tests/fixtures/oracles/qwen3-tiny/fp8_modelopt --input-len 8 --output-len 4 \
       --threads 2 --rounds 1 --json >"$log" 2>&1; then
    ran=$(python3 -c 'import json, sys; print(json.loads(open(sys.argv[1]).read().splitlines()[-1])["cpu_isa"])' "$log" \
          2>/dev/null || echo "?")
    echo "vtllm bench latency ran the $ran kernels"
    if [ -n "$want" ] && [ "$ran" != "$want" ]; then echo "build_aarch64: expected $want" >&2; rc=1; fi
  else
    tail -n 20 "$log"; rc=1
  fi
  echo "== vtllm bench latency -cpu $cpu: $(( $(date +%s) - s )) s (log: $log)"

  # --cpu-isa with each ARM level's name, under -cpu max (which has both): the JSON must name
  # the level asked for, so that a level the flag does not reach (or a spelling it rejects)
  # fails.
  printf '#!/bin/sh\nexec env QEMU_LD_PREFIX=%s QEMU_CPU=max qemu-aarch64 -cpu max -L %s %s "$@"\n' \
    $SYSROOT $SYSROOT "$PWD/$B/src/cli/vtllm" > "$W/vtllm-max"
  chmod +x "$W/vtllm-max"
  for level in neon neonbf16; do
    echo "== vtllm bench latency --cpu-isa $level --json under qemu-aarch64 -cpu max"
    s=$(date +%s)
    log=$B/tests/vtllm_bench.max.$level.log
    if "$W/vtllm-max" bench latency tests/fixtures/oracles/qwen3-tiny/fp8_modelopt --input-len 8 --output-len 4 \
         --threads 2 --rounds 1 --cpu-isa $level --json >"$log" 2>&1; then
      ran=$(python3 -c 'import json, sys; print(json.loads(open(sys.argv[1]).read().splitlines()[-1])["cpu_isa"])' \
            "$log" 2>/dev/null || echo "?")
      echo "vtllm bench latency --cpu-isa $level ran the $ran kernels"
      if [ "$ran" != "$level" ]; then echo "build_aarch64: expected $level" >&2; rc=1; fi
    else
      tail -n 20 "$log"; rc=1
    fi
    echo "== vtllm bench latency --cpu-isa $level -cpu max: $(( $(date +%s) - s )) s (log: $log)"
  done

  echo "== tests/js/server/e2e_openai.mjs against vtllm serve under qemu-aarch64 -cpu $cpu"
  s=$(date +%s)
  log=$B/tests/server_e2e_openai.$cpu.log
  node tests/js/server/e2e_openai.mjs "$W/vtllm" "$W/make_random_checkpoint" "$PWD" \
    "$PWD/$B/tests/server/work_e2e_openai" >"$log" 2>&1 || rc=1
  grep -E '^(FAIL|[0-9]+ passed)' "$log" || tail -n 20 "$log"
  passed=$(sed -n 's/^\([0-9]*\) passed, \([0-9]*\) failed$/\1/p' "$log")
  if [ -z "$passed" ] || [ "$passed" -eq 0 ]; then echo "build_aarch64: e2e_openai ran no check" >&2; rc=1; fi
  echo "== e2e_openai -cpu $cpu: ${passed:-0} checks passed, $(( $(date +%s) - s )) s (log: $log)"
fi
exit $rc
