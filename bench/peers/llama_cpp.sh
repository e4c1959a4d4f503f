#!/usr/bin/env bash
# llama.cpp as a peer of vtllm on the CPU, in the same run, on the same random weights.
#
#   bench/peers/llama_cpp.sh [VTLLM_BUILD_DIR]        (or VTLLM_BUILD=...; default build/release)
#
# 1. Fetches llama.cpp's source as the npm package node-llama-cpp ships it (its
#    llama/gitRelease.bundle is a git bundle of one llama.cpp commit), clones it into
#    $PEER_DIR (default $HOME/.cache/vtllm-peers) and builds llama-bench, llama-batched-bench,
#    llama-quantize and llama-completion there with cmake: CPU only, -DGGML_NATIVE=ON, no CUDA,
#    no curl/openssl. Nothing of llama.cpp is kept in this repository.
# 2. Makes a random Qwen3-0.6B-shaped checkpoint (tools/make_random_checkpoint, BF16 and FP8
#    ModelOpt of the same seed: the FP8 weights are the BF16 ones quantized), writes its GGUF
#    with bench/peers/safetensors_to_gguf.py (BF16 byte for byte) and a Q8_0 GGUF with
#    llama-quantize.
# 3. Sanity: the default model (models/default/bf16) through the same GGUF writer, greedy text
#    from llama-completion and from `vtllm generate` on the same prompt, both printed.
# 4. $ROUNDS rounds (default 3), the runs alternated within each round:
#      llama-bench -p 128 -n 64 -t $THREADS on BF16 and Q8_0;
#      llama-batched-bench -npp 128 -ntg $TG -npl 1,4,16 (BF16 and Q8_0);
#      vtllm bench latency (input 128, output 64, batch 1) on FP8 and BF16;
#      vtllm bench throughput (prompt 128, output $TG, C requests at once, C in 1 4 16 64)
#      on FP8 and BF16;
#    then a table of medians and the ratios vtllm / llama.cpp.
#
# Environment: ROUNDS (3), THREADS (2), TG (128: output tokens of the batched runs),
# CONCURRENCY ("1 4 16 64"), PARALLEL ("1,4,16"), LLAMA_TYPES ("q8_0 bf16", llama-bench),
# BATCHED_TYPES (LLAMA_TYPES), LLAMA_CMAKE_ARGS (below), LLAMA_BENCH_REPS (3: llama-bench -r), VTLLM_DTYPES ("fp8 bf16",
# bench latency), THROUGHPUT_DTYPES (VTLLM_DTYPES), NODE_LLAMA_CPP (node-llama-cpp version,
# 3.22.1), PEER_DIR, LLAMA_SRC (an unpacked llama.cpp tree to build instead of the npm
# package's), NICE (10), OUT (results folder, default $PEER_DIR/results-<date>).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
VTLLM_BUILD=$(cd "${1:-${VTLLM_BUILD:-$ROOT/build/release}}" && pwd)
VTLLM=$VTLLM_BUILD/src/cli/vtllm
MAKE_CKPT=$VTLLM_BUILD/tools/make_random_checkpoint
for b in "$VTLLM" "$MAKE_CKPT"; do
  [ -x "$b" ] || { echo "llama_cpp.sh: $b not built (ninja -C $VTLLM_BUILD vtllm make_random_checkpoint)" >&2; exit 1; }
done
ROUNDS=${ROUNDS:-3}
THREADS=${THREADS:-2}
TG=${TG:-128}
CONCURRENCY=${CONCURRENCY:-1 4 16 64}
PARALLEL=${PARALLEL:-1,4,16}
LLAMA_TYPES=${LLAMA_TYPES:-q8_0 bf16}
BATCHED_TYPES=${BATCHED_TYPES:-$LLAMA_TYPES}
LLAMA_BENCH_REPS=${LLAMA_BENCH_REPS:-3}
VTLLM_DTYPES=${VTLLM_DTYPES:-fp8 bf16}
THROUGHPUT_DTYPES=${THROUGHPUT_DTYPES:-$VTLLM_DTYPES}
NODE_LLAMA_CPP=${NODE_LLAMA_CPP:-3.22.1}
PEER_DIR=${PEER_DIR:-$HOME/.cache/vtllm-peers}
NICE="nice -n ${NICE:-10}"
OUT=${OUT:-$PEER_DIR/results-$(date +%Y%m%d-%H%M%S)}
mkdir -p "$PEER_DIR" "$OUT"
RESULTS=$OUT/results.jsonl
: > "$RESULTS"
log() { echo "== $*" >&2; }

# ---- 1. llama.cpp from node-llama-cpp's bundle
# LLAMA_SRC: a llama.cpp source tree already unpacked (a machine without the npm registry);
# otherwise the clone in $PEER_DIR, made again when NODE_LLAMA_CPP changes.
SRC=${LLAMA_SRC:-$PEER_DIR/llama.cpp}
STAMP=$PEER_DIR/llama.cpp.node-llama-cpp-version  # which package the clone came from
if [ -z "${LLAMA_SRC:-}" ] && { [ ! -d "$SRC/.git" ] || [ "$(cat "$STAMP" 2>/dev/null)" != "$NODE_LLAMA_CPP" ]; }; then
  log "fetching node-llama-cpp@$NODE_LLAMA_CPP"
  rm -rf "$PEER_DIR/npm" "$SRC" && mkdir -p "$PEER_DIR/npm"
  (cd "$PEER_DIR/npm" && npm pack --silent "node-llama-cpp@$NODE_LLAMA_CPP" >/dev/null &&
     tar xzf node-llama-cpp-*.tgz package/llama/gitRelease.bundle)
  git clone -q "$PEER_DIR/npm/package/llama/gitRelease.bundle" "$SRC"
  echo "$NODE_LLAMA_CPP" > "$STAMP"
fi
# LLAMA_CMAKE_ARGS: extra cmake arguments, built in a folder of their own. On an AMX machine
# (a Xeon of 2023 on) llama.cpp's native build runs Q8_0 products on its AMX kernels, whose
# llama-bench crashed there (2026-12-06, node-llama-cpp 3.22.1, in ggml_backend_amx_mul_mat):
# build without AMX to take its AVX-512 kernels instead (BF16 does not use the AMX ones):
#   LLAMA_CMAKE_ARGS='-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON
#     -DGGML_AVX512=ON -DGGML_AVX512_VBMI=ON -DGGML_AVX512_VNNI=ON -DGGML_AVX512_BF16=ON'
# (-mno-amx-tile does not do: -march=native comes after it).
LLAMA_CMAKE_ARGS=${LLAMA_CMAKE_ARGS:-}
LLAMA_BUILD_DIR=$SRC/build
[ -z "$LLAMA_CMAKE_ARGS" ] || LLAMA_BUILD_DIR=$SRC/build-$(echo "$LLAMA_CMAKE_ARGS" | md5sum | cut -c1-8)
LLAMA_BIN=$LLAMA_BUILD_DIR/bin
LLAMA_TOOLS=(llama-bench llama-batched-bench llama-quantize llama-completion)
if ! (for t in "${LLAMA_TOOLS[@]}"; do [ -x "$LLAMA_BIN/$t" ] || exit 1; done); then
  log "building llama.cpp (CPU, native${LLAMA_CMAKE_ARGS:+, $LLAMA_CMAKE_ARGS})"
  # shellcheck disable=SC2086  # the extra arguments split on spaces
  cmake -S "$SRC" -B "$LLAMA_BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON \
    -DGGML_CUDA=OFF -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_SERVER=OFF \
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_APP=OFF -DLLAMA_BUILD_UI=OFF \
    $LLAMA_CMAKE_ARGS >/dev/null
  $NICE ninja -C "$LLAMA_BUILD_DIR" -j"$(nproc)" "${LLAMA_TOOLS[@]}" >/dev/null
fi
LLAMA_COMMIT=$(git -C "$SRC" rev-parse --short HEAD 2>/dev/null || cat "$SRC/.commit" 2>/dev/null || echo unknown)

# ---- 2. the weights
M=$PEER_DIR/models
mkdir -p "$M"
if [ ! -f "$M/q06-bf16/model.safetensors" ]; then
  log "random Qwen3-0.6B checkpoints"
  $NICE "$MAKE_CKPT" --out "$M/q06-bf16" --preset qwen3-0.6b --format bf16 --threads "$THREADS"
  $NICE "$MAKE_CKPT" --out "$M/q06-fp8" --preset qwen3-0.6b --format fp8-modelopt --threads "$THREADS"
fi
if [ ! -f "$M/q06-bf16.gguf" ]; then
  $NICE python3 "$ROOT/bench/peers/safetensors_to_gguf.py" "$M/q06-bf16" "$M/q06-bf16.gguf"
fi
if [ ! -f "$M/q06-q8_0.gguf" ]; then
  $NICE "$LLAMA_BIN/llama-quantize" "$M/q06-bf16.gguf" "$M/q06-q8_0.gguf" Q8_0 "$THREADS" > "$OUT/quantize.log" 2>&1
fi
declare -A GGUF=([bf16]=$M/q06-bf16.gguf [q8_0]=$M/q06-q8_0.gguf)
declare -A CKPT=([bf16]=$M/q06-bf16 [fp8]=$M/q06-fp8)

# ---- 3. sanity: the same BF16 weights give the same greedy text
log "sanity: default model, greedy, llama.cpp against vtllm"
python3 "$ROOT/bench/peers/safetensors_to_gguf.py" "$ROOT/models/default/bf16" "$OUT/default-bf16.gguf" >/dev/null
PROMPT="The investment bankers said that the stock"
NTOK=32
$NICE "$LLAMA_BIN/llama-completion" -m "$OUT/default-bf16.gguf" -p "$PROMPT" -n $NTOK --temp 0 \
  -no-cnv --ignore-eos -t "$THREADS" --no-display-prompt --no-warmup 2> "$OUT/sanity-llama.log" \
  | tr -d '\r' > "$OUT/sanity-llama.txt" || { tail -20 "$OUT/sanity-llama.log" >&2; exit 1; }
$NICE "$VTLLM" generate "$ROOT/models/default/bf16" --prompt "$PROMPT" --max-tokens $NTOK \
  --temperature 0 --threads "$THREADS" --json > "$OUT/sanity-vtllm.json"
python3 - "$OUT/sanity-llama.txt" "$OUT/sanity-vtllm.json" "$PROMPT" <<'EOF' | tee "$OUT/sanity.txt"
import json, sys
llama = open(sys.argv[1], encoding="utf-8", errors="replace").read()
if llama.endswith("\n\n"):
    llama = llama[:-2]  # llama-completion ends its output with two newlines of its own
vt = json.load(open(sys.argv[2]))["text"]
n = 0
while n < min(len(llama), len(vt)) and llama[n] == vt[n]:
    n += 1
print(f"prompt:    {sys.argv[3]!r}")
print(f"llama.cpp: {llama!r}")
print(f"vtllm:     {vt!r}")
same = n == min(len(llama), len(vt)) and n > 0
print(f"sanity: {'MATCH' if same else 'DIFFER'}: the first {n} characters agree"
      f" (llama.cpp {len(llama)}, vtllm {len(vt)} characters)")
EOF

# ---- 4. rounds
# Each result line gets the tool, the weights, the round and the 1-minute load average at its
# end (other work on the machine shows there: ggml's and vtllm's threads wait for each other).
tag() { python3 -c 'import json,sys; tags=json.loads(sys.argv[1])
tags["load1"]=float(open("/proc/loadavg").read().split()[0])
for line in sys.stdin:
    line=line.strip()
    if line.startswith("{"):
        d=json.loads(line); d.update(tags); print(json.dumps(d))' "$1" >> "$RESULTS"; }

llama_bench() {  # type
  log "round $r: llama-bench ${1}"
  $NICE "$LLAMA_BIN/llama-bench" -m "${GGUF[$1]}" -p 128 -n 64 -t "$THREADS" -r "$LLAMA_BENCH_REPS" -o jsonl 2>>"$OUT/llama.log" \
    | tag "{\"tool\":\"llama-bench\",\"type\":\"$1\",\"round\":$r}"
}
llama_batched() {  # type
  log "round $r: llama-batched-bench ${1} -npl $PARALLEL"
  local maxb=${PARALLEL##*,}
  $NICE "$LLAMA_BIN/llama-batched-bench" -m "${GGUF[$1]}" -c $((maxb * (128 + TG))) -b 2048 -ub 512 \
    -npp 128 -ntg "$TG" -npl "$PARALLEL" -t "$THREADS" --output-format jsonl 2>>"$OUT/llama.log" \
    | tag "{\"tool\":\"llama-batched-bench\",\"type\":\"$1\",\"round\":$r}"
}
vtllm_latency() {  # dtype
  log "round $r: vtllm bench latency ${1}"
  $NICE "$VTLLM" bench latency "${CKPT[$1]}" --input-len 128 --output-len 64 --batch-size 1 \
    --threads "$THREADS" --json 2>>"$OUT/vtllm.log" | tag "{\"tool\":\"vtllm-latency\",\"type\":\"$1\",\"round\":$r}"
}
vtllm_throughput() {  # dtype concurrency
  log "round $r: vtllm bench throughput ${1} x$2"
  $NICE "$VTLLM" bench throughput "${CKPT[$1]}" --input-len 128 --output-len "$TG" --num-prompts "$2" \
    --max-concurrency "$2" --threads "$THREADS" --json 2>>"$OUT/vtllm.log" \
    | tag "{\"tool\":\"vtllm-throughput\",\"type\":\"$1\",\"round\":$r}"
}

for r in $(seq 1 "$ROUNDS"); do
  for t in $LLAMA_TYPES; do llama_bench "$t"; done
  for d in $VTLLM_DTYPES; do vtllm_latency "$d"; done
  for t in $BATCHED_TYPES; do llama_batched "$t"; done
  for c in $CONCURRENCY; do
    for d in $THROUGHPUT_DTYPES; do vtllm_throughput "$d" "$c"; done
  done
done

# ---- 5. the table
python3 "$ROOT/bench/peers/llama_cpp_table.py" "$RESULTS" "$LLAMA_COMMIT" "$NODE_LLAMA_CPP" "$THREADS" "$TG" | tee "$OUT/table.md"
echo "results: $OUT (results.jsonl, table.md, sanity.txt)" >&2
