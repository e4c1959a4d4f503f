#!/usr/bin/env python3
"""Instructions per decoded weight byte of a streaming GEMV inner loop, from the disassembly.

    gemv_insn_count.py OBJDUMP OBJECT FUNCTION_REGEX MULTIPLY BYTES_PER_MULTIPLY

Disassembles OBJECT with OBJDUMP (aarch64-linux-gnu-objdump, objdump), takes the first
function whose demangled name matches FUNCTION_REGEX (e.g. 'StreamTile<unsigned char, 1, 4>'),
and finds its loops (backward branches). The inner loop is the loop holding the most
MULTIPLY instructions among the innermost ones (fmla, bfdot, vfmadd231ps, vdpbf16ps). One row of a (M = 1) meets each
weight byte in exactly one multiply lane, so a loop iteration decodes
count(MULTIPLY) * BYTES_PER_MULTIPLY weight bytes (fmla on 4 f32 lanes: 4; bfdot: 8;
ymm vfmadd231ps: 8; zmm vdpbf16ps: 32). For a GEMM micro-tile (several rows of a), pass the
products of one multiply instead (bfdot: 8, bfmmla: 16): the figures are then per product.

Two paths are counted: the common path (every forward branch that stays inside the loop
taken, as in the iterations that issue no prefetch) and the whole loop body (every
instruction between the loop head and its back edge once, an upper bound for the iterations
that prefetch). Prints both per iteration and per weight byte, and the mnemonic histogram of
the common path. A static count: no ARM hardware ran it; it says nothing of latencies or
issue widths.
"""
import re
import subprocess
import sys
from collections import Counter

LINE = re.compile(r"^\s*([0-9a-f]+):\s+(\S+)\s*(.*)$")
FUNC = re.compile(r"^[0-9a-f]+ <(.*)>:$")
TARGET = re.compile(r"^([0-9a-f]+)\s*<")


def is_branch(m):
    return m.startswith("b") and m not in ("bic", "bif", "bit", "bsl", "bfdot", "bfmmla", "bfcvt", "bfcvtn",
                                            "bfcvtn2", "bfmlalb", "bfmlalt") or m.startswith("j") or m.startswith(
                                                "cb") or m.startswith("tb")


def branch_target(m, ops):
    # aarch64: "b.ne 2bb8 <...>", "cbz x1, 2bb8 <...>"; x86: "jne 1234 <...>"
    for part in reversed(ops.split(",")):
        t = TARGET.match(part.strip())
        if t:
            return int(t.group(1), 16)
    return None


def disassemble(objdump, obj):
    """The functions of OBJECT in address order: [(demangled name, [(address, mnemonic, operands)])]."""
    text = subprocess.run([objdump, "-d", "-C", "--no-show-raw-insn", obj], check=True, capture_output=True,
                          text=True).stdout
    funcs, cur = [], None
    for line in text.splitlines():
        f = FUNC.match(line)
        if f:
            cur = (f.group(1), [])
            funcs.append(cur)
            continue
        m = LINE.match(line)
        if m and cur:
            cur[1].append((int(m.group(1), 16), m.group(2), m.group(3)))
    return funcs


def innermost_loops(insns):
    """The loops (backward branches) of insns that hold no other loop: [(head index, back-edge index)]."""
    index = {a: i for i, (a, _, _) in enumerate(insns)}
    loops = []
    for i, (a, m, ops) in enumerate(insns):
        if is_branch(m):
            t = branch_target(m, ops)
            if t is not None and t < a and t in index:
                loops.append((index[t], i))
    return [l for l in loops if not any(o != l and l[0] <= o[0] and o[1] <= l[1] for o in loops)]


def main():
    if len(sys.argv) != 6:
        sys.exit(__doc__)
    objdump, obj, func_re, mul, per_mul = sys.argv[1], sys.argv[2], re.compile(sys.argv[3]), sys.argv[4], int(
        sys.argv[5])
    name, insns = next(((n, i) for n, i in disassemble(objdump, obj) if func_re.search(n)), (None, []))
    if not insns:
        sys.exit(f"no function matching {sys.argv[3]} in {obj}")
    index = {a: i for i, (a, _, _) in enumerate(insns)}
    # Innermost loops only (no other loop inside), then the one with the most multiplies.
    inner = [(sum(1 for x in insns[h:b + 1] if x[1] == mul), -(b + 1 - h), h, b) for h, b in innermost_loops(insns)]
    if not inner:
        sys.exit("no loop found")
    muls, _, head, back = max(inner)
    if muls == 0:
        sys.exit(f"no {mul} in any loop of {name}")
    lo, hi = insns[head][0], insns[back][0]
    # Common path: from the head, take forward branches that stay in the loop.
    path, i, seen = [], head, set()
    while i <= back and i not in seen:
        seen.add(i)
        a, m, ops = insns[i]
        path.append(m)
        if i == back:
            break
        if is_branch(m):
            t = branch_target(m, ops)
            if t is not None and lo < t <= hi and t > a:
                i = index[t]
                continue
        i += 1
    nbytes = muls * per_mul
    whole = back - head + 1
    print(f"{name}")
    print(f"  inner loop {lo:#x}..{hi:#x}: {muls} x {mul} = {nbytes} weight bytes per iteration")
    print(f"  common path: {len(path)} instructions = {len(path) / nbytes:.3f} per weight byte")
    print(f"  whole body:  {whole} instructions = {whole / nbytes:.3f} per weight byte")
    hist = Counter(path)
    print("  common path mnemonics: " + ", ".join(f"{k} {v}" for k, v in sorted(hist.items(), key=lambda x: -x[1])))


if __name__ == "__main__":
    main()
