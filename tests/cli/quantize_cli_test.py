#!/usr/bin/env python3
"""`vtllm quantize` and `--quantization fp8` through the binary on the default model's BF16
copy: both layouts are written and load, calibrating on heldout.txt finds the input amax
PyTorch found for models/default/fp8, the quantized copies' and online FP8's perplexity
on the first windows of heldout.txt stay within 3% of the BF16 perplexity measured in the
same run, and bad inputs are errors that name the flag or file.
usage: quantize_cli_test.py VTLLM SOURCE_DIR"""
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile

vtllm, root = sys.argv[1], sys.argv[2]
bf16 = os.path.join(root, "models/default/bf16")
fp8 = os.path.join(root, "models/default/fp8")
heldout = os.path.join(root, "models/default/heldout.txt")
tmp = tempfile.mkdtemp(prefix="vtllm-quantize-")
env = dict(os.environ, XDG_CACHE_HOME=os.path.join(tmp, "cache"))
failures = 0


def check(ok, what):
    global failures
    if not ok:
        failures += 1
        print("FAIL:", what)


def run(*args):
    p = subprocess.run([vtllm, *args], capture_output=True, env=env)
    return p.returncode, p.stdout.decode("utf-8"), p.stderr.decode("utf-8")


def expect_error(args, needles):
    rc, out, err = run(*args)
    check(rc != 0, f"{args}: exit 0, expected an error")
    for n in needles:
        check(n in err, f"{args}: stderr lacks {n!r}: {err.strip()}")


def perplexity(*model_args):
    rc, out, err = run("perplexity", *model_args, "--file", heldout, "--max-windows", "4", "--json", "--threads", "2")
    check(rc == 0, f"perplexity {model_args}: exit {rc}: {err}")
    return json.loads(out)["perplexity"] if rc == 0 else float("nan")


rc, out, err = run("--help")
check("quantize" in out, "vtllm --help does not list quantize")

outs = {}
for fmt in ["modelopt", "compressed-tensors"]:
    d = os.path.join(tmp, fmt)
    rc, out, err = run("quantize", bf16, "--out", d, "--format", fmt, "--threads", "2")
    check(rc == 0, f"quantize --format {fmt}: exit {rc}: {err}")
    if rc != 0:
        continue
    print(out.strip())
    outs[fmt] = d
    cfg = json.load(open(os.path.join(d, "config.json")))
    qc = cfg.get("quantization_config", {})
    check(qc.get("quant_method") == fmt, f"{fmt}: quantization_config {qc}")
    if fmt == "modelopt":
        hq = json.load(open(os.path.join(d, "hf_quant_config.json")))
        check(hq["quantization"]["quant_algo"] == "FP8" and hq["quantization"]["exclude_modules"] == ["lm_head"],
              f"hf_quant_config.json: {hq}")
    else:
        check(qc.get("ignore") == ["lm_head"] and qc.get("format") == "float-quantized", f"{fmt}: {qc}")
    for f in ["tokenizer.json", "tokenizer_config.json", "generation_config.json", "model.safetensors"]:
        check(os.path.exists(os.path.join(d, f)), f"{fmt}: {f} missing")

# Calibrated on heldout.txt (as models/default/fp8 was, by PyTorch in float32, windows of 512):
# every input amax must be PyTorch's (fp8_scales.json "input_amax_own") to f32 rounding.
d = os.path.join(tmp, "heldout-calibrated")
rc, out, err = run("quantize", bf16, "--out", d, "--calibration-file", heldout, "--calibration-tokens", "40000",
                   "--threads", "2")
check(rc == 0, f"quantize --calibration-file heldout.txt: exit {rc}: {err}")
if rc == 0:
    blob = open(os.path.join(d, "model.safetensors"), "rb").read()
    n = struct.unpack("<Q", blob[:8])[0]
    header = json.loads(blob[8:8 + n])

    def scalar(name):
        o = header[name]["data_offsets"][0]
        return struct.unpack("<f", blob[8 + n + o:8 + n + o + 4])[0]

    worst = 0.0
    for p, s in json.load(open(os.path.join(root, "models/default/fp8_scales.json")))["scales"].items():
        check(header[p + ".input_scale"]["shape"] == [] and header[p + ".weight"]["dtype"] == "F8_E4M3", p)
        worst = max(worst, abs(scalar(p + ".input_scale") * 448 / s["input_amax_own"] - 1))
    print(f"input amax vs PyTorch's calibration on heldout.txt: max relative difference {worst:.2g}")
    check(worst <= 1e-5, f"input amax differs from PyTorch's by {worst}")

base = perplexity(bf16)
print(f"perplexity, first 4 windows: bf16 {base:.4f}")
for label, args in [("online fp8", [bf16, "--quantization", "fp8"])] + [(f, [d]) for f, d in outs.items()]:
    p = perplexity(*args)
    print(f"  {label}: {p:.4f} ({100 * (p / base - 1):+.2f}%)")
    check(abs(p / base - 1) <= 0.03, f"{label}: perplexity {p} is not within 3% of bf16 {base}")

# Bad inputs.
expect_error(["quantize", bf16, "--out", os.path.join(tmp, "x"), "--calibration-file", os.path.join(tmp, "nope.txt")],
             ["--calibration-file", "nope.txt"])
if "modelopt" in outs:
    expect_error(["quantize", bf16, "--out", outs["modelopt"]], ["--out", "not empty"])
expect_error(["quantize", fp8, "--out", os.path.join(tmp, "y")], ["already quantized", "BF16"])
expect_error(["quantize", bf16, "--out", os.path.join(tmp, "z"), "--format", "gguf"], ["--format", "gguf"])
for d in ["x", "y", "z"]:
    check(not os.path.exists(os.path.join(tmp, d)), f"a failed quantize left {d}")
expect_error(["generate", bf16, "--prompt", "The", "--max-tokens", "1", "--quantization", "int8"],
             ["--quantization", "int8"])
expect_error(["generate", bf16, "--prompt", "The", "--max-tokens", "1", "--kv-cache-dtype", "fp16"],
             ["--kv-cache-dtype", "fp16"])
expect_error(["generate", fp8, "--prompt", "The", "--max-tokens", "1", "--quantization", "fp8"],
             ["--quantization fp8", "already quantized", "modelopt"])
rc, out, err = run("generate", fp8, "--prompt", "The", "--max-tokens", "2", "--quantization", "modelopt")
check(rc == 0, f"generate --quantization modelopt on the ModelOpt checkpoint: exit {rc}: {err}")

shutil.rmtree(tmp, ignore_errors=True)
print("FAILED" if failures else "OK", failures)
sys.exit(1 if failures else 0)
