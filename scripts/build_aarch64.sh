#!/usr/bin/env bash
# Cross-builds vt and the model layer for aarch64 (GCC cross compiler, CPU only, portable
# kernels) into build/aarch64 and runs vt_tests and model_tests under qemu-aarch64.
# Needs: bash scripts/setup.sh --arm (g++-aarch64-linux-gnu, qemu-user, libgtest-dev sources).
# Environment: JOBS (default nproc), QEMU_CPUS (default "max neoverse-n1 cortex-a53": vt_tests
# runs once per model, model_tests under the first), TARGETS (default "vt_tests model_tests"),
# GTEST_FILTER (passed to the tests).
set -euo pipefail
cd "$(dirname "$0")/.."

JOBS=${JOBS:-$(nproc)}
QEMU_CPUS=${QEMU_CPUS:-"max neoverse-n1 cortex-a53"}
TARGETS=${TARGETS:-"vt_tests model_tests"}
SYSROOT=/usr/aarch64-linux-gnu
export CCACHE_DIR=${CCACHE_DIR:-$HOME/.cache/vtllm-ccache}
export CCACHE_BASEDIR=$PWD
B=build/aarch64

for tool in aarch64-linux-gnu-g++ qemu-aarch64; do
  command -v $tool >/dev/null || { echo "build_aarch64: $tool missing (bash scripts/setup.sh --arm)" >&2; exit 1; }
done
[ -f /usr/src/googletest/CMakeLists.txt ] || { echo "build_aarch64: /usr/src/googletest missing (libgtest-dev)" >&2; exit 1; }

# nlohmann/json is header-only and the same for every target; a folder holding just it keeps
# the cross compiler off the host's /usr/include.
mkdir -p $B/host-json
ln -sfn /usr/include/nlohmann $B/host-json/nlohmann

t0=$(date +%s)
cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_TOOLCHAIN_FILE=cmake/toolchain-aarch64-linux-gnu.cmake \
  -DVTLLM_CORE_ONLY=ON -DVTLLM_BENCH=OFF -DVT_CUDA=OFF -DVTLLM_STATIC_RUNTIME=ON \
  -DVTLLM_GTEST_SOURCE_DIR=/usr/src/googletest -DVTLLM_JSON_INCLUDE_DIR=$PWD/$B/host-json >/dev/null
cmake --build $B -j"$JOBS" --target $TARGETS
t1=$(date +%s)
echo "== build_aarch64: build took $((t1 - t0)) s"

rc=0
first=1
for cpu in $QEMU_CPUS; do
  for t in $TARGETS; do
    [ "$t" = model_tests ] && [ $first -eq 0 ] && continue
    echo "== $t under qemu-aarch64 -cpu $cpu"
    s=$(date +%s)
    # QEMU_CPU: the CPU model also for the tools a test starts (through qemu, see
    # VTLLM_TOOL_RUNNER in tests/CMakeLists.txt).
    (cd $B/tests && QEMU_LD_PREFIX=$SYSROOT QEMU_CPU=$cpu qemu-aarch64 -cpu "$cpu" -L $SYSROOT ./$t \
       ${GTEST_FILTER:+--gtest_filter=$GTEST_FILTER} --gtest_brief=1) || rc=1
    echo "== $t -cpu $cpu: $(( $(date +%s) - s )) s"
  done
  first=0
done
exit $rc
