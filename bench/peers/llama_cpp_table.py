#!/usr/bin/env python3
"""The table of bench/peers/llama_cpp.sh: medians over rounds of its results.jsonl and the ratios
vtllm / llama.cpp.
usage: llama_cpp_table.py RESULTS.jsonl LLAMA_COMMIT NODE_LLAMA_CPP_VERSION THREADS TG"""
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
commit, npm_version, threads, tg = sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5])

def vals(pred, key):
    return [r[key] for r in rows if pred(r)]

def med(v):
    return statistics.median(v) if v else float("nan")

def ratio(a, b):
    return f"{a / b:.2f}" if a == a and b == b and b else "-"  # no peer figure: "-", not nan

def span(v):
    return f"{min(v):.1f}-{max(v):.1f}" if v else "-"

rounds = len({r["round"] for r in rows})
print(f"llama.cpp {commit} (node-llama-cpp {npm_version}), {threads} threads, {rounds} rounds; "
      f"medians over rounds (range)\n")
# llama-bench: one row per test with avg_ts over its repetitions
lb = lambda t, pp: vals(lambda r: r["tool"] == "llama-bench" and r["type"] == t and
                        (r["n_prompt"] > 0) == pp, "avg_ts")
lat = lambda d, k: vals(lambda r: r["tool"] == "vtllm-latency" and r["type"] == d, k)
print("| batch 1 | tok/s (median) | range | vs llama.cpp Q8_0 | vs llama.cpp BF16 |")
print("|---|---:|---:|---:|---:|")
for what, pp, key in (("prefill 128", True, "prefill_tok_s"), ("decode (tg64)", False, "decode_tok_s")):
    q8, b16 = med(lb("q8_0", pp)), med(lb("bf16", pp))
    print(f"| llama.cpp Q8_0 {what} | {q8:.1f} | {span(lb('q8_0', pp))} | 1.00 | |")
    print(f"| llama.cpp BF16 {what} | {b16:.1f} | {span(lb('bf16', pp))} | | 1.00 |")
    for d in ("fp8", "bf16"):
        v = lat(d, key)
        if v:
            print(f"| vtllm {d.upper()} {what} | {med(v):.1f} | {span(v)} | {ratio(med(v), q8)} | {ratio(med(v), b16)} |")
print()
bb = lambda t, pl, k: vals(lambda r: r["tool"] == "llama-batched-bench" and r["type"] == t and
                           r["pl"] == pl, k)
tp = lambda d, c, k: vals(lambda r: r["tool"] == "vtllm-throughput" and r["type"] == d and
                          r["max_concurrency"] == c, k)
conc = sorted({r["pl"] for r in rows if r["tool"] == "llama-batched-bench"} |
              {r["max_concurrency"] for r in rows if r["tool"] == "vtllm-throughput"})
print(f"Prompt 128, output {tg}, N sequences at once. decode tok/s: llama-batched-bench S_TG "
      f"(N x {tg} / T_TG), vtllm N / median step; output tok/s: N x {tg} / whole run; "
      "TTFT: llama.cpp T_PP (all N prompts in one batch), vtllm median TTFT.\n")
print("| N | run | decode tok/s | output tok/s (incl. prefill) | TTFT s | decode vs llama.cpp Q8_0 | output vs Q8_0 |")
print("|---:|---|---:|---:|---:|---:|---:|")
for c in conc:
    ref_dec, ref_out = med(bb("q8_0", c, "speed_tg")), float("nan")
    t = [a + b for a, b in zip(bb("q8_0", c, "t_pp"), bb("q8_0", c, "t_tg"))]
    if t:
        ref_out = c * tg / med(t)
    for ty in ("q8_0", "bf16"):
        dec = bb(ty, c, "speed_tg")
        if not dec:
            continue
        tt = [a + b for a, b in zip(bb(ty, c, "t_pp"), bb(ty, c, "t_tg"))]
        out = c * tg / med(tt)
        print(f"| {c} | llama.cpp {ty.upper()} | {med(dec):.1f} ({span(dec)}) | {out:.1f} | "
              f"{med(bb(ty, c, 't_pp')):.2f} | {ratio(med(dec), ref_dec)} | {ratio(out, ref_out)} |")
    for d in ("fp8", "bf16"):
        steps = tp(d, c, "step_median_s")
        if not steps:
            continue
        dec = [c / s for s in steps]
        out = tp(d, c, "output_tok_s")
        print(f"| {c} | vtllm {d.upper()} | {med(dec):.1f} ({span(dec)}) | {med(out):.1f} ({span(out)}) | "
              f"{med(tp(d, c, 'ttft_median_s')):.2f} | {ratio(med(dec), ref_dec)} | {ratio(med(out), ref_out)} |")
