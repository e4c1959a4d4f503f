#!/usr/bin/env python3
"""Runs every `vtllm` command of the README's and docs' sh blocks that needs nothing outside the
repository, with the built binary in place of build/release/src/cli/vtllm, so none can rot.
Commands on a placeholder path (/path/to/...), `serve` (scripts/run.sh --once runs it, a test
of its own) and interactive `chat` without input are listed as not run here.
usage: readme_commands_test.py VTLLM SOURCE_DIR"""
import os
import re
import shlex
import subprocess
import sys
import tempfile

vtllm, root = sys.argv[1], sys.argv[2]
env = dict(os.environ, XDG_CACHE_HOME=tempfile.mkdtemp(prefix="vtllm-cache-"))
failures = ran = 0
for doc in ["README.md"] + [os.path.join("docs", f) for f in sorted(os.listdir(os.path.join(root, "docs")))]:
    text = open(os.path.join(root, doc), encoding="utf-8").read()
    for block in re.findall(r"```sh\n(.*?)```", text, re.S):
        for line in block.splitlines():
            cmd = line.split("#")[0].strip()
            if not cmd.startswith("build/release/src/cli/vtllm"):
                continue
            args = shlex.split(cmd)[1:]
            if "/path/to" in cmd or args[0] == "serve" or args[0] == "chat":
                print(f"not run here: {cmd}")
                continue
            p = subprocess.run([vtllm, *args], cwd=root, capture_output=True, env=env, timeout=600)
            ran += 1
            if p.returncode != 0:
                failures += 1
                print(f"FAIL ({doc}): {cmd}: exit {p.returncode}: {p.stderr.decode()[-400:]}")
            else:
                print(f"ok: {cmd}")
if ran == 0:
    failures += 1
    print("FAIL: no command found")
print(f"{ran - failures} passed, {failures} failed")
sys.exit(1 if failures else 0)
