#!/usr/bin/env python3
"""Static instructions per unit of work of the CPU kernels' inner loops, ARM levels against x86.

    python3 bench/kernel_insn_count.py [--rel build/rel] [--arm build/aarch64] [-v]

Extends bench/gemv_insn_count.py (same disassembly parser and branch rules) from the decode
GEMV to the other kernels of issue 23: the prefill GEMM micro-tiles and the fp8 packing they
read, QuantFp8Static and the fused RmsNorm -> FP8 recipe, SiLU-mul, and the decode attention's
score and value loops on an FP8 KV cache. The x86 objects come from a Release build (--rel,
objdump), the aarch64 ones from the cross build (--arm, aarch64-linux-gnu-objdump); a missing
object can be built alone with `ninja -C build/aarch64 <object>`.

For each kernel the script takes the named function, finds its loops (backward branches) and
keeps the innermost ones; among those, the loop with the most KEY instructions that satisfies
the row's operand filter (first in address order on a tie: the main loop precedes its
remainder loop). The unit of work per iteration is count(KEY) * PER_KEY (stated per row:
multiply-adds, weight bytes, elements, cache bytes). Instructions are counted over the whole
loop body, every instruction between the loop head and its back edge once (loop overhead
included; a prefetch or a rarely taken branch inside the loop counts as executed). A row
marked "trace" (a loop body GCC scattered outside its backward-branch range) follows one
iteration's path instead (trace()); a row whose chosen loop has branches leaving it is
flagged with a warning.

A static count: no ARM hardware ran it; it says nothing of latencies, issue widths or
memory. -v prints each chosen loop's mnemonic histogram.
"""
import argparse
import os
import re
import sys
from collections import Counter

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gemv_insn_count import branch_target, disassemble, innermost_loops, is_branch  # noqa: E402

VT = "src/vt/CMakeFiles/vtllm_vt.dir/cpu"
X86, ARM = "objdump", "aarch64-linux-gnu-objdump"
BCAST = r"vbroadcastss|ld1r|\.s\[\d\]"  # the value loop broadcasts softmax weights
NOCALL = r"^(bl|call) |^(fcvtns|vcvtps2dq) "  # not e^x's loop (a call, or the exponent's rounding)

# (section, kernel, level, build, object, function regex, KEY, PER_KEY, unit, filter)
# KEY: a regex matching whole mnemonics (vfmadd...ps: the 132/213/231 forms alike).
# filter: None, ("with", regex) or ("without", regex) over "mnemonic operands" of the body;
# "trace": the loop's body is scattered, follow one iteration's path instead (trace()).
ROWS = [
    # -- prefill GEMM: multiply-adds (f32 FMA lanes, or BF16 products) per instruction
    ("gemm", "f32 panel Tile<3> (3 rows x 4 panel rows)", "avx2", "rel", "matmul/gemm_avx2.cpp.o",
     r"::Tile<3>\(", "vfmadd...ps", 8, "MAC", None),
    ("gemm", "packed Tile<1,4> (M < 9, decodes in loop)", "avx2", "rel", "matmul/packed_avx2.cpp.o",
     r"::Tile<1, 4, false>\(", "vfmadd...ps", 8, "MAC", None),
    ("gemm", "packed PanelTile<4,2> decoding tile (M >= 9)", "avx2", "rel", "matmul/packed_avx2.cpp.o",
     r"::PanelTile<4, 2, true, false, false>\(", "vfmadd...ps", 8, "MAC", None),
    ("gemm", "packed PanelTile<6,2> panel reader (M >= 9)", "avx2", "rel", "matmul/packed_avx2.cpp.o",
     r"::PanelTile<6, 2, false, false, false>\(", "vfmadd...ps", 8, "MAC", None),
    ("gemm", "packed Tile<8,2> VDPBF16PS (LUT decode in loop)", "avx512bf16", "rel", "matmul/packed_avx512.cpp.o",
     r"::Tile<8, 2>\(", "vdpbf16ps", 32, "MAC", None),
    ("gemm", "f32 panel Tile<2> (2 rows x 4 panel rows), FMLA", "neon", "arm", "matmul/gemm_neon.cpp.o",
     r"::Gemm\(", "fmla", 4, "MAC", None),
    ("gemm", "bf16 panel Tile<8> BFMMLA (8 rows x 4 panel rows)", "neonbf16", "arm", "matmul/gemm_neonbf16.cpp.o",
     r"::Gemm\(", "bfmmla", 16, "MAC", None),
    # -- the fp8 -> panel decode each GEMM reads (once per weight byte per K block)
    ("pack", "Pack fp8 -> f32 panel (half trick)", "avx2", "rel", "matmul/gemm_avx2.cpp.o",
     r"::Pack\(", "vcvtph2ps", 8, "weight byte", None),
    ("pack", "Pack fp8 -> f32 panel (half trick, NaN select)", "neon", "arm", "matmul/gemm_neon.cpp.o",
     r"::Pack\(", "fcvtl2", 8, "weight byte", None),
    ("pack", "PackPanel fp8 -> bf16 panel (TBL/TBX)", "neonbf16", "arm", "matmul/gemm_neonbf16.cpp.o",
     r"::PackPanel\(", "tbx", 8, "weight byte", "trace"),
    # -- QuantFp8Static, BF16 in (QuantLoop<kBF16>; the fused recipes call it on each block)
    ("quant", "QuantFp8Static BF16 -> fp8", "avx2", "rel", "elementwise_avx2.cpp.o",
     r"QuantLoop<\(vt::DType\)2>", "vpmovzxwd", 8, "element", None),
    ("quant", "QuantFp8Static BF16 -> fp8", "avx512", "rel", "elementwise_avx512.cpp.o",
     r"QuantLoop<\(vt::DType\)2>", "vpmovzxwd", 16, "element", None),
    ("quant", "QuantFp8Static BF16 -> fp8", "neon", "arm", "elementwise_neon.cpp.o",
     r"QuantLoop<\(vt::DType\)2>", "xtn", 4, "element", None),
    # -- RmsNorm (BF16, no residual) -> FP8: sum of squares pass + normalise pass (BF16 block)
    ("rms", "RmsNorm pass 1: sum of squares", "avx2", "rel", "elementwise_avx2.cpp.o",
     r"RmsNormRowsOf<.*Bf16Rows, false>", "vfmadd231ps", 8, "element", ("without", r"vpaddd")),
    ("rms", "RmsNorm pass 1: sum of squares", "avx512", "rel", "elementwise_avx512.cpp.o",
     r"RmsNormRowsOf<.*Bf16Rows, false>", "vfmadd231ps", 16, "element", ("without", r"vpaddd")),
    ("rms", "RmsNorm pass 1: sum of squares", "neon", "arm", "elementwise_neon.cpp.o",
     r"RmsNormRowsOf<.*Bf16Rows, false>", "fmla", 4, "element", ("without", r"^(add|ushr) v")),
    ("rms", "RmsNorm pass 2: x*inv, *w, to BF16", "avx2", "rel", "elementwise_avx2.cpp.o",
     r"RmsNormRowsOf<.*Bf16Rows, false>", "vmulps", 4, "element", None),
    ("rms", "RmsNorm pass 2: x*inv, *w, to BF16", "avx512", "rel", "elementwise_avx512.cpp.o",
     r"RmsNormRowsOf<.*Bf16Rows, false>", "vmulps", 8, "element", None),
    ("rms", "RmsNorm pass 2: x*inv, *w, to BF16", "neon", "arm", "elementwise_neon.cpp.o",
     r"RmsNormRowsOf<.*Bf16Rows, false>", "fmul", 2, "element", None),
    # -- SiLU-mul, BF16 (silu(gate) * up to BF16; +QuantFp8Static when fused to FP8)
    ("silu", "SiluMul BF16", "avx2", "rel", "elementwise_avx2.cpp.o",
     r"SiluMulRowsOf<.*Bf16Rows>", "vdivps", 8, "element", None),
    ("silu", "SiluMul BF16", "avx512", "rel", "elementwise_avx512.cpp.o",
     r"SiluMulRowsOf<.*Bf16Rows>", "vdivps", 16, "element", None),
    ("silu", "SiluMul BF16", "neon", "arm", "elementwise_neon.cpp.o",
     r"SiluMulRowsOf<.*Bf16Rows>", "fdiv", 4, "element", None),
]
# -- decode attention on an FP8 cache: AttendPass<F8E4M3, no NaN, NH heads sharing the rows>.
# Every cache byte meets one multiply-add per head: bytes per iteration = count(fma) * lanes / NH.
for nh in (1, 4):
    for lvl, build, obj, fma, lanes in (("avx2", "rel", "attention_avx2.cpp.o", "vfmadd231ps", 8),
                                        ("avx512", "rel", "attention_avx512.cpp.o", "vfmadd231ps", 16),
                                        ("neon", "arm", "attention_neon.cpp.o", "fmla", 4)):
        fn = r"AttendPass<\(vt::DType\)3, false, %d>" % nh
        ROWS.append(("attn", f"K (scores), {nh} head{'s' if nh > 1 else ''}", lvl, build, obj, fn, fma,
                     lanes / nh, "K byte", ("without", BCAST + "|" + NOCALL)))
        ROWS.append(("attn", f"V (values), {nh} head{'s' if nh > 1 else ''}", lvl, build, obj, fn, fma,
                     lanes / nh, "V byte", ("with", BCAST)))

_cache = {}


def functions(objdump, obj):
    key = (objdump, obj)
    if key not in _cache:
        _cache[key] = disassemble(objdump, obj)
    return _cache[key]


def inner_loop(insns, key, flt):
    best = None
    for h, b in sorted(innermost_loops(insns)):
        body = insns[h:b + 1]
        if flt:
            hit = any(re.search(flt[1], f"{m} {ops}") for _, m, ops in body)
            if hit != (flt[0] == "with"):
                continue
        n = sum(1 for x in body if re.fullmatch(key, x[1]))
        if n and (best is None or n > best[0]):
            best = (n, body)
    return best


def exits(body):
    """Branches in the body (not its back edge) whose target lies outside it."""
    lo, hi = body[0][0], body[-1][0]
    n = 0
    for _, m, ops in body[:-1]:
        if is_branch(m) and m not in ("ret", "bl", "call"):
            t = branch_target(m, ops)
            if t is not None and not lo <= t <= hi:
                n += 1
    return n


def trace(insns, key):
    """One iteration's path through a loop whose body the compiler scattered (branches out of
    the innermost backward-branch range and back). The head: of the loops holding KEY, the
    address most backward branches return to; its region ends at the last of them. At each
    conditional branch the path takes the side that meets more KEY instructions, walking
    straight on inside the region, before the head comes round (the fall-through on a tie),
    and ends when the head comes round."""
    index = {a: i for i, (a, _, _) in enumerate(insns)}
    backs = {}
    for i, (a, m, ops) in enumerate(insns):
        if is_branch(m):
            t = branch_target(m, ops)
            if t is not None and t < a and t in index and any(re.fullmatch(key, x[1]) for x in insns[index[t]:i + 1]):
                backs.setdefault(index[t], []).append(i)
    if not backs:
        return None
    head = max(backs, key=lambda h: (len(backs[h]), -h))
    end = max(backs[head])

    def follows(m):
        return m in ("b", "jmp")

    def reach(i):
        n = 0
        for _ in range(end - head + 1):
            if not head <= i <= end or i == head:
                break
            a, m, ops = insns[i]
            n += bool(re.fullmatch(key, m))
            if follows(m):
                t = branch_target(m, ops)
                if t is None or t not in index:
                    break
                i = index[t]
            else:
                i += 1
        return n

    path, i = [], head
    while head <= i <= end and len(path) <= end - head + 1:
        a, m, ops = insns[i]
        path.append(insns[i])
        t = branch_target(m, ops) if is_branch(m) and m not in ("bl", "call", "ret") else None
        if t is not None and t in index:
            if index[t] == head:
                break
            if follows(m) or reach(index[t]) > reach(i + 1):
                i = index[t]
                continue
        i += 1
    n = sum(1 for x in path if re.fullmatch(key, x[1]))
    return (n, path) if n else None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rel", default="build/rel")
    ap.add_argument("--arm", default="build/aarch64")
    ap.add_argument("-v", action="store_true")
    args = ap.parse_args()
    print("| section | kernel | level | loop: instructions / work per iteration | instructions per unit |")
    print("|---|---|---|---|---:|")
    per_unit = {}
    for sec, kernel, level, build, obj, fre, key, per, unit, flt in ROWS:
        objdump = X86 if build == "rel" else ARM
        path = os.path.join(args.rel if build == "rel" else args.arm, VT, obj)
        if not os.path.exists(path):
            print(f"| {sec} | {kernel} | {level} | missing {path} | |")
            continue
        fns = [(n, i) for n, i in functions(objdump, path) if re.search(fre, n)]
        if not fns:
            print(f"| {sec} | {kernel} | {level} | no function /{fre}/ | |")
            continue
        name, insns = fns[0]
        got = trace(insns, key) if flt == "trace" else inner_loop(insns, key, flt)
        if got is None:
            print(f"| {sec} | {kernel} | {level} | no loop with {key} | |")
            continue
        n, body = got
        work = n * per
        if flt != "trace" and exits(body):
            kernel += f" (warning: {exits(body)} branches leave the loop; try the trace rule)"
        print(f"| {sec} | {kernel} | {level} | {len(body)} / {work:g} {unit}s ({n} {key}) "
              f"| {len(body) / work:.3f} per {unit} |")
        per_unit[(sec, kernel, level)] = len(body) / work
        if args.v:
            hist = Counter(m for _, m, _ in body)
            print(f"|   | `{name[:90]}` {body[0][0]:#x}..{body[-1][0]:#x}: "
                  + ", ".join(f"{k} {v}" for k, v in hist.most_common()) + " | | | |")


    # Per element of a row: the fused recipes as the kernels run them (EmitRow: the BF16 block,
    # then QuantLoop<kBF16> over it).
    print()
    print("| fused recipe, per element | " + " | ".join(LEVELS) + " |")
    print("|---|" + "---:|" * len(LEVELS))
    for label, parts in (("RmsNorm -> FP8 (pass 1 + pass 2 + QuantFp8Static)",
                          [("rms", "RmsNorm pass 1: sum of squares"), ("rms", "RmsNorm pass 2: x*inv, *w, to BF16"),
                           ("quant", "QuantFp8Static BF16 -> fp8")]),
                         ("SiluMul -> FP8 (SiluMul + QuantFp8Static)",
                          [("silu", "SiluMul BF16"), ("quant", "QuantFp8Static BF16 -> fp8")])):
        cells = []
        for lvl in LEVELS:
            v = [per_unit.get((sec, k, lvl)) for sec, k in parts]
            cells.append(f"{sum(v):.2f}" if None not in v else "")
        print(f"| {label} | " + " | ".join(cells) + " |")


LEVELS = ("avx2", "avx512", "neon")

if __name__ == "__main__":
    main()
