#!/usr/bin/env python3
"""The embedded default model through the `vtllm` binary with no MODEL argument: greedy
`generate` gives the tokens PyTorch gave for the FP8 checkpoint (tools/default_model/
reference.py, tests/fixtures/default_model/reference.json) up to the first near-tie, the
BF16 copy in float32 gives the BF16 reference exactly, and `bench throughput` runs.
usage: default_model_cli_test.py VTLLM SOURCE_DIR"""
import json
import os
import subprocess
import sys
import tempfile

vtllm, root = sys.argv[1], sys.argv[2]
ref = json.load(open(os.path.join(root, "tests/fixtures/default_model/reference.json")))
failures = 0
env = dict(os.environ, XDG_CACHE_HOME=tempfile.mkdtemp(prefix="vtllm-cache-"))


def check(ok, what):
    global failures
    if not ok:
        failures += 1
        print("FAIL:", what)


def run(*args):
    p = subprocess.run([vtllm, *args], capture_output=True, env=env)
    return p.returncode, p.stdout.decode("utf-8"), p.stderr.decode("utf-8")


def agree_until_near_tie(got, want, margins, label, near_tie=0.005):
    n = 0
    while n < len(margins) and margins[n] >= near_tie:
        n += 1
    check(got[:n] == want[:n], f"{label}: {got} vs reference {want} (first {n} must agree)")
    print(f"{label}: {sum(1 for a, b in zip(got, want) if a == b)} of {len(want)} tokens agree "
          f"(first near-tie at step {n})")


# float32 activations: the references' arithmetic, so every token up to a near-tie agrees.
# The default (BF16 activations) must run; its agreement is printed, not required.
for sub, flags, strict in [(None, ["--dtype", "float32"], True), ("bf16", ["--dtype", "float32"], True),
                           (None, [], False)]:
    kind = "fp8" if sub is None else "bf16"
    args = ["generate"] + ([os.path.join(root, "models/default", sub)] if sub else []) + [
        "--prompt", ref["greedy_prompt"], "--max-tokens", "24", "--temperature", "0", "--json", *flags]
    rc, out, err = run(*args)
    check(rc == 0, f"generate ({kind}): exit {rc}: {err}")
    if rc != 0:
        continue
    j = json.loads(out)
    want = ref[kind]["greedy"]["token_ids"]
    margins = [s["margin"] for s in ref[kind]["greedy"]["steps"]]
    eos = set(ref["eos_token_ids"])
    cut = next((i + 1 for i, t in enumerate(want) if t in eos), len(want))  # the engine stops at EOS
    if strict:
        agree_until_near_tie(j["token_ids"], want[:cut], margins[:cut], f"default model {kind} float32")
    else:
        agree = sum(1 for a, b in zip(j["token_ids"], want) if a == b)
        print(f"default model {kind}, BF16 activations: {agree} of {len(want)} tokens as the reference")
        check(len(j["token_ids"]) > 0, f"{kind}: no tokens")
    check(len(j["text"]) > 0, f"{kind}: no text")

# Perplexity through the engine's prompt logprobs, window by window against PyTorch's.
# BF16 weights in f32: the same math, an absolute bound. FP8: PyTorch's float32 emulation,
# where a summation order that differs by an ulp flips an activation's fp8 code and moves a
# window's NLL: a bound relative to the window's NLL (its ~511 tokens), 0.15% in f32 and
# 0.3% with BF16 activations. (Absolute bounds of 1.5 and 3.0 nats held on a Zen 5 machine;
# a Zen 3 one measured 1.8 and 3.7, at every ISA level, with code older than the bounds.)
for kind, sub, flags, tol in [("bf16", "bf16", ["--dtype", "float32"], 1e-2), ("fp8", "fp8", ["--dtype", "float32"], -1.5e-3),
                              ("fp8", None, [], -3e-3)]:
    args = ["perplexity"] + ([os.path.join(root, "models/default", sub)] if sub else []) + [
        "--file", os.path.join(root, ref["heldout"]["file"]), "--window", str(ref["window"]), "--max-windows", "4",
        "--json", *flags]
    rc, out, err = run(*args)
    check(rc == 0, f"perplexity {kind} {flags}: exit {rc}: {err}")
    if rc != 0:
        continue
    j = json.loads(out)
    for got, want in zip(j["windows"], ref[kind]["windows"]):
        check(got["start"] == want["start"] and got["scored"] == want["scored"], f"window {got} vs {want}")
        bound = tol if tol > 0 else -tol * abs(want["nll_sum"])  # negative: relative
        check(abs(got["nll_sum"] - want["nll_sum"]) <= bound,
              f"perplexity {kind} {flags}: window {got['start']} NLL {got['nll_sum']} vs {want['nll_sum']}")
    print(f"perplexity {kind} {flags or 'default dtype'}: {j['perplexity']:.4f} over {j['scored_tokens']} tokens")

rc, out, err = run("bench", "throughput", "--num-prompts", "4", "--input-len", "16", "--output-len", "8", "--json")
check(rc == 0 and json.loads(out)["output_tok_s"] > 0 if rc == 0 else False, f"bench throughput: exit {rc}: {err}")
# vtllm chat from stdin lines: a greedy answer per turn; after /reset the same question gets the
# same answer as in a fresh conversation, while the second turn (with history) may differ.
p = subprocess.run([vtllm, "chat", "--temperature", "0", "--max-tokens", "20"], capture_output=True, env=env,
                   input=b"The jury said\nAnd then?\n/reset\nThe jury said\n/exit\nnever read\n")
answers = p.stdout.decode("utf-8").rstrip("\n").split("\n")
check(p.returncode == 0, f"chat: exit {p.returncode}: {p.stderr.decode()}")
check(len(answers) == 3 and all(answers), f"chat: three answers expected, got {answers}")
if len(answers) == 3:
    check(answers[0] == answers[2], f"chat: /reset did not forget the history: {answers}")

rc, out, err = run("generate", "/no/such/dir", "--prompt", "x")
check(rc != 0 and "/no/such/dir" in err, f"a missing MODEL directory is named: {err}")
print(f"{failures} failed" if failures else "all passed")
sys.exit(1 if failures else 0)
