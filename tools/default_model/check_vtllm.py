#!/usr/bin/env python3
"""Compare vtllm with tests/fixtures/default_model/reference.json (standard library only).

Usage: check_vtllm.py VTLLM MODEL_DIR {bf16,fp8} [--dtype float32] [--windows N]

Tokenizes heldout.txt with `vtllm tokenize`, checks the ids against the
reference (count and first ids), then scores the reference's windows with
`vtllm logits` (each window its own prompt, scored from its second token),
and runs `vtllm generate` greedily on the reference prompt. Prints one JSON
object: perplexity over the windows scored, the reference's over the same
windows, the largest per-window NLL difference, and the greedy tokens that
agree before the first difference (with the reference's margin there).
"""
import argparse
import array
import json
import math
import os
import subprocess
import sys
import tempfile

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))


def window_nll(logits_path, ids, vocab):
    """Summed NLL of ids[1:] under the logits rows 0..T-2 (f32 [T, vocab])."""
    a = array.array("f")
    with open(logits_path, "rb") as f:
        a.frombytes(f.read())
    if sys.byteorder != "little":
        a.byteswap()
    assert len(a) == len(ids) * vocab, (len(a), len(ids), vocab)
    total = 0.0
    for t in range(len(ids) - 1):
        row = a[t * vocab:(t + 1) * vocab]
        m = max(row)
        lse = m + math.log(sum(math.exp(x - m) for x in row))
        total += lse - row[ids[t + 1]]
    return total


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("vtllm")
    p.add_argument("model")
    p.add_argument("which", choices=["bf16", "fp8"])
    p.add_argument("--dtype", default="auto")
    p.add_argument("--windows", type=int, default=0, help="score only the first N windows (0: all)")
    p.add_argument("--reference", default=os.path.join(ROOT, "tests/fixtures/default_model/reference.json"))
    args = p.parse_args()

    with open(args.reference) as f:
        ref = json.load(f)
    with open(os.path.join(args.model, "config.json")) as f:
        vocab = json.load(f)["vocab_size"]
    with open(os.path.join(ROOT, ref["heldout"]["file"]), "rb") as f:
        ids = json.loads(subprocess.run([args.vtllm, "tokenize", args.model], stdin=f, check=True,
                                        capture_output=True).stdout)["ids"]
    result = {"model": args.model, "dtype": args.dtype,
              "tokens_match": len(ids) == ref["heldout"]["tokens"] and ids[:16] == ref["heldout"]["first_ids"]}

    windows = ref[args.which]["windows"]
    if args.windows:
        windows = windows[:args.windows]
    nll, ref_nll, scored, worst = 0.0, 0.0, 0, 0.0
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "logits.f32")
        for w in windows:
            chunk = ids[w["start"]:w["end"]]
            subprocess.run([args.vtllm, "logits", args.model, "--prompt-ids", ",".join(map(str, chunk)),
                            "--out", out, "--dtype", args.dtype], check=True, capture_output=True)
            s = window_nll(out, chunk, vocab)
            nll += s
            ref_nll += w["nll_sum"]
            scored += w["scored"]
            worst = max(worst, abs(s - w["nll_sum"]) / w["scored"])
    result.update({"windows": len(windows), "scored_tokens": scored, "perplexity": math.exp(nll / scored),
                   "reference_perplexity": math.exp(ref_nll / scored), "max_window_mean_nll_diff": worst})

    g = ref[args.which]["greedy"]
    gen = json.loads(subprocess.run(
        [args.vtllm, "generate", args.model, "--prompt", ref["greedy_prompt"], "--max-tokens", str(len(g["token_ids"])),
         "--temperature", "0", "--json", "--dtype", args.dtype], check=True, capture_output=True).stdout)
    got = gen["token_ids"]
    agree = 0
    while agree < min(len(got), len(g["token_ids"])) and got[agree] == g["token_ids"][agree]:
        agree += 1
    result.update({"greedy_text": gen["text"], "greedy_agree": agree, "greedy_of": len(g["token_ids"]),
                   "reference_margin_at_first_difference":
                       g["steps"][agree]["margin"] if agree < len(g["steps"]) and agree < len(got) else None})
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
