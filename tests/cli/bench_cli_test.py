#!/usr/bin/env python3
"""`vtllm bench latency` on the tiny FP8 fixture: --cpu-isa caps the CPU kernels (the JSON
names the level that ran), the engine and the bare model steps both decode every token
(output-len - 1 decode steps after the prefill drew the first), greedy or sampled, also with
--max-model-len wider than the run, a batch whose sequences end
inside a KV block runs to the end, a hybrid model runs a batch of 12, and bad flag values are refused with a message naming the
flag and the value; `bench throughput --long-prefill-token-threshold` and
`--max-num-batched-tokens` split a prompt into capped chunks; `bench serve` times the chunks of a model without a tokenizer.
usage: bench_cli_test.py VTLLM SOURCE_DIR"""
import json
import os
import re
import subprocess
import sys

vtllm, root = sys.argv[1], sys.argv[2]
model = os.path.join(root, "tests/fixtures/oracles/qwen3-tiny/fp8_modelopt")
failures = 0


def check(ok, what):
    global failures
    if not ok:
        failures += 1
        print("FAIL:", what)


def bench(*flags, lengths=("--input-len", "8", "--output-len", "4"), ckpt=model):
    p = subprocess.run([vtllm, "bench", "latency", ckpt, *lengths, "--threads", "2", *flags], capture_output=True)
    return p.returncode, p.stdout.decode("utf-8"), p.stderr.decode("utf-8")


for isa in ["scalar", "avx2"]:
    rc, out, err = bench("--cpu-isa", isa, "--json")
    check(rc == 0, f"--cpu-isa {isa}: exit {rc}: {err}")
    if rc == 0:
        j = json.loads(out)
        # A processor without the level runs the highest one it has below it; x86 CI has AVX2.
        check(j.get("cpu_isa") in ([isa] if isa == "scalar" else [isa, "scalar"]),
              f"--cpu-isa {isa}: ran {j.get('cpu_isa')}")
        check(j.get("decode_tok_s", 0) > 0, f"--cpu-isa {isa}: no decode speed")
        check(j.get("decode_steps") == 3, f"--cpu-isa {isa}: the engine ran {j.get('decode_steps')} decode steps, not 3")
        mo = j.get("model_only", {})
        check(mo.get("decode_steps") == 3 and mo.get("decode_tok_s", 0) > 0,
              f"--cpu-isa {isa}: model-only figures {mo}")
        check(len(j.get("per_round", [])) == 2, f"--cpu-isa {isa}: {len(j.get('per_round', []))} rounds, not 2")
        check(j.get("engine_step_over_model_step", 0) > 0, f"--cpu-isa {isa}: no engine/model step ratio")

# Sampled requests (--temperature with top_p / top_k): the JSON echoes what the engine's
# requests drew with, and every token is still decoded; a negative temperature is refused
# naming the field and the value.
rc, out, err = bench("--temperature", "0.7", "--top-p", "0.9", "--top-k", "5", "--rounds", "1", "--json")
check(rc == 0, f"sampled bench: exit {rc}: {err}")
if rc == 0:
    j = json.loads(out)
    check(j.get("sampling") == {"temperature": 0.7, "top_p": 0.9, "top_k": 5}, f"sampled bench: sampling {j.get('sampling')}")
    check(j.get("decode_steps") == 3, f"sampled bench: {j.get('decode_steps')} decode steps, not 3")
rc, out, err = bench("--temperature", "-1", "--rounds", "1")
check(rc != 0 and "temperature" in err and "-1" in err, f"--temperature -1: exit {rc}, {err!r}")

# --max-model-len widens the engine's context (a server's block tables, which its CUDA
# graphs record) and every token is still decoded; one shorter than input + output is refused
# naming the flag and the value.
rc, out, err = bench("--max-model-len", "64", "--rounds", "1", "--json")
check(rc == 0, f"--max-model-len 64: exit {rc}: {err}")
if rc == 0:
    check(json.loads(out).get("decode_steps") == 3, f"--max-model-len 64: {json.loads(out).get('decode_steps')} decode steps")
rc, out, err = bench("--max-model-len", "11", "--rounds", "1")
check(rc != 0 and "--max-model-len" in err and "11" in err, f"--max-model-len 11: exit {rc}, {err!r}")

# 4 sequences of 14 + 4 tokens hold 2 blocks of 16 each: 8 blocks, where 4 x 18 tokens
# alone would round to 5 (the cache was once sized that way and ran out mid-decode).
rc, out, err = bench("--batch-size", "4", "--json", lengths=("--input-len", "14", "--output-len", "4"))
check(rc == 0, f"batch 4 of 14 + 4 tokens: exit {rc}: {err}")
if rc == 0:
    check(json.loads(out).get("decode_tok_s", 0) > 0, "batch 4 of 14 + 4 tokens: no decode speed")

# A hybrid (Gated DeltaNet) model at a batch larger than the model cache's default of 8
# recurrent-state slots: the bare model steps need one slot per sequence.
hybrid = os.path.join(root, "tests/fixtures/models/qwen3-next-tiny")
rc, out, err = bench("--batch-size", "12", "--rounds", "1", "--json", ckpt=hybrid)
check(rc == 0, f"hybrid batch 12: exit {rc}: {err}")
if rc == 0:
    j = json.loads(out)
    check(j.get("decode_steps") == 3 and j.get("model_only", {}).get("decode_steps") == 3,
          f"hybrid batch 12: decode steps {j.get('decode_steps')} / {j.get('model_only', {}).get('decode_steps')}")

# --long-prefill-token-threshold caps one request's prompt tokens per step: a 40-token
# prompt takes ceil(40 / 16) = 3 steps instead of 1, then 2 decode steps draw the rest.
def throughput(*flags):
    p = subprocess.run([vtllm, "bench", "throughput", model, "--num-prompts", "1", "--input-len", "40",
                        "--output-len", "3", "--threads", "2", "--json", *flags], capture_output=True)
    return p.returncode, p.stdout.decode("utf-8"), p.stderr.decode("utf-8")


# --max-num-batched-tokens 8 caps the whole step: ceil(40 / 8) = 5 prompt steps.
for flags, steps in [((), 3), (("--long-prefill-token-threshold", "16"), 5), (("--max-num-batched-tokens", "8"), 7)]:
    rc, out, err = throughput(*flags)
    check(rc == 0, f"bench throughput {flags}: exit {rc}: {err}")
    if rc == 0:
        check(json.loads(out).get("steps") == steps, f"bench throughput {flags}: {json.loads(out).get('steps')} steps, not {steps}")
for flag in ("--long-prefill-token-threshold", "--max-num-batched-tokens"):
    rc, out, err = throughput(flag, "-3")
    check(rc != 0 and flag in err and "-3" in err, f"{flag} -3: exit {rc}, {err!r}")

# `bench serve` against a checkpoint without a tokenizer (its chunks carry empty texts):
# every chunk with a choice is a token event, as vllm bench serve counts them, so TTFT and
# ITL are measured (they once read 0 for such a model).
srv = subprocess.Popen([vtllm, "serve", model, "--port", "0", "--threads", "2"], stderr=subprocess.PIPE, text=True)
base = None
for line in srv.stderr:
    m = re.search(r"on (http://[0-9.]+:[0-9]+)", line)
    if m:
        base = m.group(1)
        break
check(base is not None, "serve printed no address")
if base:
    p = subprocess.run([vtllm, "bench", "serve", "--base-url", base, "--random-input-len", "8", "--random-output-len", "5",
                        "--num-prompts", "4", "--max-concurrency", "2", "--ignore-eos", "--json"], capture_output=True, text=True)
    check(p.returncode == 0, f"bench serve: exit {p.returncode}: {p.stderr}")
    if p.returncode == 0:
        j = json.loads(p.stdout)
        check(j.get("successful_requests") == 4 and j.get("total_output_tokens") == 20, f"bench serve: {j}")
        for k in ("median_ttft_ms", "median_itl_ms", "p99_itl_ms"):
            check(j.get(k, 0) > 0, f"bench serve on a model without a tokenizer: {k} = {j.get(k)}")
srv.terminate()
srv.wait(timeout=60)

for flag, value in [("--cpu-isa", "avx9000"), ("--device", "tpu"), ("--dtype", "int4")]:
    rc, out, err = bench(flag, value)
    check(rc != 0, f"{flag} {value}: accepted")
    check(flag in err and value in err, f"{flag} {value}: message does not name the flag and value: {err!r}")

print("bench_cli_test:", "FAILED" if failures else "ok", f"({failures} failures)")
sys.exit(1 if failures else 0)
