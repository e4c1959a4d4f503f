#!/usr/bin/env bash
# The main job (README): set up a fresh machine, build, start `vtllm serve` with the embedded
# default model (a small Qwen3 in static FP8 W8A8) on 127.0.0.1:${PORT:-8000}, print one
# completion and one chat answer through the HTTP API, then keep serving in the foreground
# (Ctrl-C stops it cleanly).
#   bash scripts/run.sh          # serve until Ctrl-C
#   bash scripts/run.sh --once   # stop after the samples (tests use it)
# VTLLM_BUILD_DIR picks the build folder (default build/release; an existing one is reused
# as configured).
set -euo pipefail
cd "$(dirname "$0")/.."
ONCE=0
[ "${1:-}" = "--once" ] && ONCE=1
bash scripts/setup.sh
JOBS=${JOBS:-$(nproc)}
export CCACHE_DIR=${CCACHE_DIR:-$HOME/.cache/vtllm-ccache}
export CCACHE_BASEDIR=$PWD
BUILD=${VTLLM_BUILD_DIR:-build/release}
if [ ! -f "$BUILD/CMakeCache.txt" ]; then
  cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DVTLLM_TESTS=OFF -DVTLLM_BENCH=OFF >/dev/null
fi
cmake --build "$BUILD" -j"$JOBS" --target vtllm
VTLLM="$BUILD/src/cli/vtllm"
PORT=${PORT:-8000}
URL="http://127.0.0.1:$PORT"

"$VTLLM" serve --port "$PORT" &
SERVER=$!
stop() {
  if kill -0 "$SERVER" 2>/dev/null; then
    kill -INT "$SERVER"
    wait "$SERVER"
  fi
}
trap stop EXIT
trap 'stop; exit 0' INT TERM
for _ in $(seq 1 300); do
  curl -sf "$URL/health" >/dev/null 2>&1 && break
  kill -0 "$SERVER" 2>/dev/null || { echo "run.sh: vtllm serve exited" >&2; exit 1; }
  sleep 0.2
done
curl -sf "$URL/health" >/dev/null || { echo "run.sh: the server did not come up on $URL" >&2; exit 1; }

echo "== POST $URL/v1/completions  {\"prompt\": \"The jury said\", \"max_tokens\": 32}"
curl -sf "$URL/v1/completions" -H 'Content-Type: application/json' \
  -d '{"prompt": "The jury said", "max_tokens": 32, "temperature": 0}' |
  python3 -c 'import json, sys; r = json.load(sys.stdin); print("The jury said" + r["choices"][0]["text"]); print("usage:", r["usage"])'
echo "== POST $URL/v1/chat/completions  {\"messages\": [{\"role\": \"user\", \"content\": \"Tell me about the jury.\"}]}"
curl -sf "$URL/v1/chat/completions" -H 'Content-Type: application/json' \
  -d '{"messages": [{"role": "user", "content": "Tell me about the jury."}], "max_tokens": 48, "seed": 1}' |
  python3 -c 'import json, sys; r = json.load(sys.stdin); print(r["choices"][0]["message"]["content"])'

if [ "$ONCE" = 1 ]; then
  stop
  trap - EXIT
  exit 0
fi
echo
echo "vtllm is serving the default model on $URL (Ctrl-C stops it). Try:"
echo "  curl $URL/v1/chat/completions -H 'Content-Type: application/json' -d '{\"messages\": [{\"role\": \"user\", \"content\": \"Hello\"}]}'"
wait "$SERVER"
