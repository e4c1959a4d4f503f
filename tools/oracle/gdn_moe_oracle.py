#!/usr/bin/env python3
"""Builds the Qwen3.5 MoE hybrid fixture and the static-FP8 hybrid fixtures (Qwen3.5, Qwen3-Next,
Qwen3.5-MoE) with their references, with gdn_oracle's, moe_oracle's and model_oracle's machinery.

Run from the repository root where PyTorch and transformers 5 (with Qwen3.5 and Qwen3.5-MoE)
are installed, without flash-linear-attention / causal-conv1d (gdn_oracle's rule), on the CPU
in float32:

    python3 tools/oracle/gdn_moe_oracle.py --out OUT_DIR [--only moe|fp8|fp8-next|fp8-moe ...]
    cp -r OUT_DIR/* tests/fixtures/models/

(fp8, fp8-next and fp8-moe read the BF16 fixtures from --fixtures, the committed ones by
default: build moe and copy it in before fp8-moe if it is rebuilt.)

Fixtures (the format of tests/fixtures/models, written by model_oracle.run_cases):
  qwen3_5-moe-tiny  Qwen3_5MoeForCausalLM (flat Qwen3_5MoeTextConfig, model_type
                    qwen3_5_moe_text), qwen3_5-tiny's widths and layer_types [linear, linear,
                    full, linear]; every layer's MLP a sparse MoE (8 experts, 2 per token; HF's
                    Qwen3.5-MoE router always renormalises the top-k, the config has no
                    norm_topk_prob) with a shared expert of 64 behind sigmoid(shared_expert_gate).
                    Saved by transformers' own save_pretrained, so the experts are in the layout
                    transformers writes (reference.json: experts_layout "fused" for
                    mlp.experts.gate_up_proj [E, 2I, H] (gate rows first) + mlp.experts.down_proj
                    [E, H, I], or "per-expert" for mlp.experts.E.{gate,up,down}_proj.weight).
                    reference.json + refI (float32 from the bf16 weights) and reference_bf16.json
                    + bfI (transformers run in bfloat16), as qwen3_5-tiny.
  qwen3_5-tiny-fp8  tests/fixtures/models/qwen3_5-tiny (read from --fixtures) as ModelOpt static
                    per-tensor FP8 W8A8: quantized are the GDN in_proj_qkv, in_proj_z and
                    out_proj, the attention q/k/v/o_proj and the MLP gate/up/down_proj; kept
                    BF16 (exclude_modules) are lm_head and the GDN in_proj_a / in_proj_b (vLLM's
                    GatedDeltaNetAttention builds its merged in_proj_ba with quant_config=None);
                    conv1d is not a linear and stays BF16. The reference (reference.json + refI,
                    same prompts as qwen3_5-tiny) is a float32/float64 emulation of vLLM's
                    static FP8 math, every linear of a vLLM merge (q/k/v -> qkv_proj, gate/up ->
                    gate_up_proj, in_proj_qkv + in_proj_z -> in_proj_qkvz) written with the
                    merge's one weight scale (amax|W| over the merge / 448) and one input scale
                    (amax of its input over calibration and test prompts / 448), so that the
                    merges' requantization (vLLM's and vtllm's) is the identity; x
                    quantized with x * (1/s) in f32, clamp +-448, RNE to e4m3fn; float64 GEMM of
                    the fp8 values, times input_scale * weight_scale in f32. reference.json also
                    records code_flip_sensitivity: how far the emulation's logits move when every
                    quantized input is scaled by 1 + 2^-21 (activations on e4m3 rounding
                    boundaries flip code), the noise floor between two correct f32 runs.

  qwen3-next-tiny-fp8, qwen3_5-moe-tiny-fp8
                    tests/fixtures/models/qwen3-next-tiny and qwen3_5-moe-tiny the same way, the
                    merges of these architectures: in_proj_qkvz (Next) or in_proj_qkv +
                    in_proj_z, out_proj, q/k/v, o_proj, the shared expert's gate/up and down;
                    BF16 (exclude_modules) also in_proj_ba, the router mlp.gate and
                    mlp.shared_expert_gate. The routed experts are written per expert, gate and
                    up with one weight scale per expert, and every expert of a layer carries the
                    block's input scales (amax of the block input; amax of the SwiGLU output
                    over the routed (token, expert) pairs), so that vLLM's fused-MoE merge (max
                    input scale over experts, gate/up requantized to the larger weight scale) is
                    the identity. The reference replaces the fused experts module inside HF's
                    sparse block (EmuExperts; HF's router, renormalisation and sigmoid-gated
                    shared expert run as they are), first with the BF16 weights, which must give
                    HF's own logits, then with the FP8 emulation.

Checks before any reference is written (failing loudly, exit status 1):
- the classes exist and transformers runs the torch GDN fallbacks (gdn_oracle);
- every layer's MLP is a sparse block with a shared expert and a shared_expert_gate;
- the files hold the experts in one recognised layout with the expected shapes, all BF16;
- the reload holds exactly the weights written (no key missing / unexpected / mismatched);
- every GDN layer equals its float64 definition (gdn_oracle.check_gdn_layers), every sparse block
  the float64 definition (softmax top-k renormalised, SwiGLU experts, sigmoid-gated shared expert);
- FP8: qwen3_5-tiny reloads to its own reference logits (all prompts), the emulation replaced
  exactly the intended linears and moves the logits (by how much is logged and recorded: tiny
  random models amplify FP8 rounding, so no plausibility bound is imposed on it).
"""
import argparse
import copy
import json
import math
import os
import shutil
import sys
import traceback

import torch
import torch.nn as nn
import torch.nn.functional as F
import transformers
from safetensors import safe_open
from safetensors.torch import save_file

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gdn_oracle as g  # noqa: E402
import model_oracle as mo  # noqa: E402
import moe_oracle as mx  # noqa: E402

log = mo.log
die = g.die
Q35_MOE_CFG = dict({k: v for k, v in g.COMMON.items()}, layer_types=g.Q35_LAYER_TYPES, num_experts=8,
                   num_experts_per_tok=2, moe_intermediate_size=32, shared_expert_intermediate_size=64,
                   output_router_logits=False)
Q35_MOE_ARCH = "Qwen3_5MoeForCausalLM"
# vLLM keeps in_proj_ba (in_proj_b + in_proj_a; Qwen3-Next's fused in_proj_ba) unquantized in
# its GDN layer, and the MoE router and the shared expert's gate in BF16.
FP8_EXCLUDED = ("linear_attn.in_proj_a", "linear_attn.in_proj_b", "linear_attn.in_proj_ba", "mlp.gate",
                "mlp.shared_expert_gate")
FP8_EXCLUDE_MODULES = ["lm_head", "model.layers.*.linear_attn.in_proj_a", "model.layers.*.linear_attn.in_proj_b"]
FP8_EXCLUDE_MODULES_MOE = ["lm_head", "model.layers.*.linear_attn.in_proj_a", "model.layers.*.linear_attn.in_proj_b",
                           "model.layers.*.linear_attn.in_proj_ba", "model.layers.*.mlp.gate",
                           "model.layers.*.mlp.shared_expert_gate"]


def need_class(name, module):
    cls = getattr(transformers, name, None)
    if cls is None:
        try:
            cls = getattr(__import__(f"transformers.models.{module}", fromlist=[name]), name)
        except (ImportError, AttributeError):
            cls = None
    if cls is None:
        die(f"transformers {transformers.__version__} has no {name}; the fixture needs a transformers with it")
    return cls


def file_tensors(out_dir):
    """name -> (dtype string, shape) over every *.safetensors file of out_dir."""
    files = sorted(f for f in os.listdir(out_dir) if f.endswith(".safetensors"))
    if not files:
        die(f"save_pretrained wrote no .safetensors file into {out_dir}: {sorted(os.listdir(out_dir))}")
    info = {}
    for fn in files:
        with safe_open(os.path.join(out_dir, fn), framework="pt") as f:
            for k in f.keys():
                t = f.get_slice(k)
                info[k] = (t.get_dtype(), list(t.get_shape()))
    log(f"  {len(info)} tensors in {files}")
    return info


def detect_experts_layout(info, cfg):
    E, I, H = cfg["num_experts"], cfg["moe_intermediate_size"], cfg["hidden_size"]
    nl = cfg["num_hidden_layers"]
    expert_keys = sorted(k for k in info if ".mlp.experts." in k)
    fused = [k for k in expert_keys if k.endswith(".mlp.experts.gate_up_proj") or k.endswith(".mlp.experts.down_proj")]
    if fused:
        if len(fused) != len(expert_keys) or len(fused) != 2 * nl:
            die(f"expert tensors mix layouts or miss layers: {expert_keys}")
        for li in range(nl):
            gu, dn = f"model.layers.{li}.mlp.experts.gate_up_proj", f"model.layers.{li}.mlp.experts.down_proj"
            if info.get(gu, (None, None))[1] != [E, 2 * I, H]:
                die(f"{gu}: {info.get(gu)}, want [E, 2I, H] = {[E, 2 * I, H]}")
            if info.get(dn, (None, None))[1] != [E, H, I]:
                die(f"{dn}: {info.get(dn)}, want [E, H, I] = {[E, H, I]}")
        return "fused"
    want = {f"model.layers.{li}.mlp.experts.{e}.{p}_proj.weight": ([H, I] if p == "down" else [I, H])
            for li in range(nl) for e in range(E) for p in ("gate", "up", "down")}
    if set(expert_keys) != set(want):
        die(f"expert tensors in no recognised layout: {expert_keys[:12]} ... ({len(expert_keys)})")
    for k, shape in want.items():
        if info[k][1] != shape:
            die(f"{k}: {info[k]}, want {shape}")
    return "per-expert"


@torch.no_grad()
def check_moe_blocks(model, gen):
    """Every sparse block against its float64 definition (routing always renormalised)."""
    k = model.config.num_experts_per_tok
    for li, layer in enumerate(model.model.layers):
        blk = layer.mlp
        x = torch.randn(1, 37, model.config.hidden_size, generator=gen)
        got = blk(x)
        got = (got[0] if isinstance(got, tuple) else got).reshape(-1, x.shape[-1]).double()
        xs = x.reshape(-1, x.shape[-1]).double()
        p = torch.softmax(xs @ mx.router_weight(blk).double().T, dim=-1)
        top_p, top_i = torch.topk(p, k, dim=-1)
        top_p = top_p / top_p.sum(-1, keepdim=True)
        experts = mx.expert_weights(blk)
        want = torch.zeros_like(xs)
        for t in range(xs.shape[0]):
            for j in range(k):
                gw, uw, dw = (w.double() for w in experts[int(top_i[t, j])])
                want[t] += top_p[t, j] * (dw @ (F.silu(gw @ xs[t]) * (uw @ xs[t])))
        se = blk.shared_expert
        gw, uw, dw = (m.weight.double() for m in (se.gate_proj, se.up_proj, se.down_proj))
        want += torch.sigmoid(xs @ blk.shared_expert_gate.weight.double().T) * ((F.silu(xs @ gw.T) * (xs @ uw.T)) @ dw.T)
        err = float((got - want).abs().max())
        tol = 1e-4 * float(want.abs().max()) + 1e-6
        if not err < tol:
            die(f"layer {li}: sparse block vs its float64 definition: max |diff| {err} > {tol}")
    log("  sparse blocks (renormalised top-k + gated shared expert) match the float64 definition")


def qwen3_5_moe_fixture(out_root, _fixtures):
    log("== qwen3_5-moe-tiny")
    cls = need_class(Q35_MOE_ARCH, "qwen3_5_moe")
    cfg_cls = need_class("Qwen3_5MoeTextConfig", "qwen3_5_moe")
    gen = torch.Generator().manual_seed(351)
    model = cls(cfg_cls(**Q35_MOE_CFG)).eval()
    if g.layer_types_of(model) != g.Q35_LAYER_TYPES:
        die(f"layer_types {g.layer_types_of(model)}, want {g.Q35_LAYER_TYPES}")
    for li, layer in enumerate(model.model.layers):
        if not (mx.is_sparse(layer) and hasattr(layer.mlp, "shared_expert") and hasattr(layer.mlp, "shared_expert_gate")):
            die(f"layer {li}: mlp is {type(layer.mlp).__name__}, not a sparse block with a gated shared expert")
    if getattr(model.config, "norm_topk_prob", None) not in (None, True):
        die(f"config.norm_topk_prob is {model.config.norm_topk_prob}; this script assumes renormalised routing")
    g.check_rotary(model, Q35_MOE_CFG)
    g.randomize(model, gen)
    mo.round_params_to_bf16(model)
    out = os.path.join(out_root, "qwen3_5-moe-tiny")
    if os.path.exists(out):
        shutil.rmtree(out)
    os.makedirs(out)
    bf = copy.deepcopy(model).to(torch.bfloat16)
    bf.config.architectures = [Q35_MOE_ARCH]
    bf.save_pretrained(out)  # transformers' own layout and names
    model.generation_config.save_pretrained(out)
    path = os.path.join(out, "config.json")
    with open(path) as f:
        config = json.load(f)
    if config.get("architectures") != [Q35_MOE_ARCH] or config.get("model_type") != "qwen3_5_moe_text":
        die(f"config.json: architectures {config.get('architectures')}, model_type {config.get('model_type')}")
    for key in ("num_experts", "num_experts_per_tok", "moe_intermediate_size", "shared_expert_intermediate_size",
                "layer_types", "linear_num_key_heads", "linear_num_value_heads"):
        if config.get(key) != Q35_MOE_CFG[key]:
            die(f"config.json: {key} is {config.get(key)}, want {Q35_MOE_CFG[key]}")
    config["dtype"] = "bfloat16"
    config["partial_rotary_factor"] = 0.25
    with open(path, "w") as f:
        json.dump(config, f, indent=2, sort_keys=True)
        f.write("\n")
    info = file_tensors(out)
    not_bf16 = sorted(k for k, (dt, _s) in info.items() if dt not in ("bfloat16", "BF16"))
    if not_bf16:
        die(f"tensors not stored in bf16: {not_bf16[:8]}")
    if any(k.startswith("model.language_model.") for k in info):
        die("save_pretrained wrote model.language_model.* names for the CausalLM; unexpected")
    layout = detect_experts_layout(info, Q35_MOE_CFG)
    log(f"  transformers saved the experts {layout}")
    sd = g.plain_state_dict(model)
    prompts = [torch.randint(0, Q35_MOE_CFG["vocab_size"], (n,), generator=gen).tolist() for n in g.PROMPT_LENS]

    def check(ref):
        check_moe_blocks(ref, gen)
        gap = mx.router_min_gap(ref, prompts)
        log("  router_min_gap", gap)
        return {"router_min_gap": gap}

    extra = {"arch": "qwen3_5_moe_text", "layer_types": g.Q35_LAYER_TYPES, "experts_layout": layout,
             "saved_by": "transformers save_pretrained"}
    g.references(cls, out, sd, prompts, extra, False, gen, post={"sd": g.plain_state_dict, "check": check})
    return "ok"


# ---------------------------------------------------------------------------------------
def fp8_groups(layer):
    """(submodule, [linears]) that vLLM merges into one linear (one weight scale, one input
    scale), the single ones as groups of one. The routed experts of a sparse block are not
    linears (fp8_experts has them); its shared expert's are."""
    if hasattr(layer, "linear_attn"):
        qkvz = ["in_proj_qkvz"] if hasattr(layer.linear_attn, "in_proj_qkvz") else ["in_proj_qkv", "in_proj_z"]
        groups = [("linear_attn", qkvz), ("linear_attn", ["out_proj"])]
    else:
        groups = [("self_attn", ["q_proj", "k_proj", "v_proj"]), ("self_attn", ["o_proj"])]
    mlp = "mlp.shared_expert" if mx.is_sparse(layer) else "mlp"
    return groups + [(mlp, ["gate_proj", "up_proj"]), (mlp, ["down_proj"])]


def submodule(layer, dotted):
    m = layer
    for part in dotted.split("."):
        m = getattr(m, part)
    return m


@torch.no_grad()
def input_amax(model, prompts):
    """max |x| of each decoder linear's input over the prompts."""
    amax, hooks = {}, []
    for name, mod in model.named_modules():
        if isinstance(mod, nn.Linear) and ".layers." in name:
            def hook(_m, inp, _out, name=name):
                amax[name] = max(amax.get(name, 0.0), float(inp[0].abs().max()))
            hooks.append(mod.register_forward_hook(hook))
    for p in prompts:
        model(input_ids=torch.tensor([p], dtype=torch.long))
    for h in hooks:
        h.remove()
    return amax


@torch.no_grad()
def quantize_by_group(model, amax):
    """prefix -> (w8, weight_scale, input_scale), every linear of a vLLM merge quantized with
    the merge's scales: weight_scale = f32(amax|W| over the merge / 448), input_scale =
    f32(max input amax / 448). vLLM's (and vtllm's) merge of per-shard scales (requantize to
    the largest weight scale, the largest input scale) is then the identity, so the checkpoint
    means the same to a loader that merges and to one that does not."""
    f32 = lambda v: float(torch.tensor(v, dtype=torch.float32))  # noqa: E731
    qw = {}
    for li, layer in enumerate(model.model.layers):
        for sub, names in fp8_groups(layer):
            mods = [getattr(submodule(layer, sub), nm) for nm in names]
            pre = [f"model.layers.{li}.{sub}.{nm}" for nm in names]
            ws = f32(max(float(m.weight.abs().max()) for m in mods) / 448.0)
            s = f32(max(amax[p] for p in pre) / 448.0)
            if not (ws > 0 and s > 0):
                die(f"{pre}: weight_scale {ws}, input_scale {s}")
            for m, p in zip(mods, pre):
                qw[p] = (mo.quantize(m.weight, ws), ws, s)
    return qw


class PerturbedEmuLinear(mo.EmuLinear):
    """The emulation with its input scaled by 1 + 2^-21 (a few f32 ulps) before quantization:
    how far the logits move when activations that sit on e4m3 rounding boundaries flip code,
    which is what separates two correct f32 implementations that differ in op order."""

    def forward(self, x):
        return super().forward(x * torch.tensor(1.0 + 2.0 ** -21, dtype=torch.float32))


def install_fp8_emulation(model, qw, cls=mo.EmuLinear):
    n = 0
    for li, layer in enumerate(model.model.layers):
        for sub, names in fp8_groups(layer):
            mod = submodule(layer, sub)
            for nm in names:
                w8, ws, s = qw[f"model.layers.{li}.{sub}.{nm}"]
                setattr(mod, nm, cls(w8, ws, s, getattr(mod, nm).bias))
                n += 1
    if n != len(qw):
        die(f"the emulation replaced {n} linears but {len(qw)} are quantized: {sorted(qw)}")
    left = [name for name, m in model.named_modules()
            if isinstance(m, nn.Linear) and ".layers." in name and not name.endswith(FP8_EXCLUDED)]
    if left:
        die(f"linears left unemulated: {left}")
    log(f"  {n} linears emulated as static FP8 ({cls.__name__})")


@torch.no_grad()
def all_logits(model, prompts):
    return [model(input_ids=torch.tensor([p], dtype=torch.long)).logits[0].float() for p in prompts]


def source_logits(src, src_ref, name, got):
    """The source fixture's reference logits; got (the reload's own) must reproduce them."""
    want = []
    for i, g_i in enumerate(got):
        w = torch.frombuffer(bytearray(open(os.path.join(src, src_ref["cases"][i]["logits_file"]), "rb").read()),
                             dtype=torch.float32).reshape(g_i.shape)
        err = float((g_i - w).abs().max())
        if not err < 1e-3 * float(w.abs().max()) + 1e-4:
            die(f"{name} reloaded gives logits {err} away from its reference.json (a different model?)")
        want.append(w)
    log(f"  {name} reproduces its reference")
    return want


def write_fp8_checkpoint(out, src, sd, entries, exclude_modules):
    """out: src's checkpoint sd with each (prefix, (w8, weight_scale, input_scale)) of entries
    written as ModelOpt static FP8 (0-d f32 scales), src's config with the quantization_config
    and its generation_config."""
    if os.path.exists(out):
        shutil.rmtree(out)
    os.makedirs(out)
    scalar = lambda v: torch.tensor(v, dtype=torch.float32)  # noqa: E731  ModelOpt: 0-d scales
    for p, (w8, ws, s) in entries:
        if p + ".weight" not in sd:
            die(f"{p}.weight is not in the checkpoint")
        sd[p + ".weight"] = w8.contiguous()
        sd[p + ".weight_scale"] = scalar(ws)
        sd[p + ".input_scale"] = scalar(s)
    save_file(sd, os.path.join(out, "model.safetensors"), metadata={"format": "pt"})
    with open(os.path.join(src, "config.json")) as f:
        config = json.load(f)
    config["quantization_config"] = {"quant_method": "modelopt", "quant_algo": "FP8",
                                     "exclude_modules": exclude_modules}
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(config, f, indent=2, sort_keys=True)
        f.write("\n")
    shutil.copy(os.path.join(src, "generation_config.json"), out)


def flip_sensitivity(perturbed_logits, emu_logits):
    per_pos = torch.cat([(a - b).abs().amax(dim=-1) for a, b in zip(perturbed_logits, emu_logits)])
    flips = {"max": float(per_pos.max()), "positions": int(per_pos.numel()),
             "above_1e-4": int((per_pos > 1e-4).sum()), "above_1e-2": int((per_pos > 1e-2).sum()),
             "median": float(per_pos.median())}
    log("  code-flip sensitivity (inputs x (1 + 2^-21)):", flips)
    return flips


def qwen3_5_fp8_fixture(out_root, fixtures):
    log("== qwen3_5-tiny-fp8")
    cls = need_class("Qwen3_5ForCausalLM", "qwen3_5")
    src = os.path.join(fixtures, "qwen3_5-tiny")
    for fn in ("config.json", "model.safetensors", "reference.json", "ref0.logits.f32"):
        if not os.path.isfile(os.path.join(src, fn)):
            die(f"{src}/{fn} is missing (run from the repository root, or pass --fixtures tests/fixtures/models)")
    with open(os.path.join(src, "reference.json")) as f:
        src_ref = json.load(f)
    prompts = [c["prompt"] for c in src_ref["cases"]]
    ref, _ = g.reload_exact(cls, src, None)
    g.check_torch_fallbacks()
    # The reload must reproduce qwen3_5-tiny's own reference (same model, same math).
    want = source_logits(src, src_ref, "qwen3_5-tiny", all_logits(ref, prompts))

    # Input scales from calibration prompts and the test prompts, so that no test activation
    # is clipped at 448 (a clipped activation is exact in both runs, but makes the fixture
    # measure saturation rather than rounding).
    gen = torch.Generator().manual_seed(358)
    calib = [torch.randint(0, ref.config.vocab_size, (48,), generator=gen).tolist() for _ in range(4)]
    qw = quantize_by_group(ref, input_amax(ref, calib + prompts))

    out = os.path.join(out_root, "qwen3_5-tiny-fp8")
    write_fp8_checkpoint(out, src, g.plain_state_dict(ref), qw.items(), FP8_EXCLUDE_MODULES)

    emu, _ = g.reload_exact(cls, src, None)
    install_fp8_emulation(emu, qw)
    emu_logits = all_logits(emu, prompts)
    d = max(float((e - w).abs().max()) for e, w in zip(emu_logits, want))
    if not (d > 0 and math.isfinite(d)):
        die(f"the FP8 emulation moves the logits by {d}")
    log(f"  FP8 emulation vs the f32 model: max |diff| {d:.4g} (max |logit| {max(float(w.abs().max()) for w in want):.4g})")
    pert, _ = g.reload_exact(cls, src, None)
    install_fp8_emulation(pert, qw, PerturbedEmuLinear)
    flips = flip_sensitivity(all_logits(pert, prompts), emu_logits)
    mo.run_cases(emu, prompts, out, extra={
        "arch": "qwen3_5_text", "layer_types": g.Q35_LAYER_TYPES, "quant": "modelopt fp8 static per-tensor",
        "source": "tests/fixtures/models/qwen3_5-tiny", "fp8_excluded": FP8_EXCLUDE_MODULES,
        "emulation": "static FP8 with one weight scale and one input scale per vLLM merge (q/k/v, gate/up, "
                     "in_proj_qkv+in_proj_z), written per linear, so merging is the identity; in_proj_a/b, conv1d, "
                     "lm_head bf16; x*(1/s) f32, clamp 448, RNE e4m3fn; f64 GEMM of fp8 values times s*ws in f32",
        "dtype_ref": "float32 emulation", "fp8_vs_f32_max_abs_logit_diff": d, "code_flip_sensitivity": flips})
    return "ok"


# ---------------------------------------------------------------------------------------
# Static FP8 of the sparse hybrids: the routed experts replaced inside HF's own sparse block
# (HF keeps its router, top-k, renormalisation and gated shared expert; the shared expert's
# linears are emulated like any other).
def experts_call(args, kwargs):
    """(hidden_states [T, H], top_k_index [T, k], top_k_weights [T, k]) of HF's experts call."""
    names = ("hidden_states", "top_k_index", "top_k_weights")
    vals = list(args[:3]) + [kwargs.get(n) for n in names[len(args[:3]):]]
    if len(vals) != 3 or any(v is None for v in vals) or vals[0].ndim != 2 or vals[1].shape != vals[2].shape:
        die(f"the sparse block called its experts with {len(args)} positional arguments and keys {sorted(kwargs)}; "
            f"this script expects (hidden_states [T, H], top_k_index [T, k], top_k_weights [T, k])")
    return vals


class EmuExperts(nn.Module):
    """A sparse block's routed experts for HF's call experts(x, top_k_index, top_k_weights).
    q None: the BF16 weights in f32 (checks the replacement against HF's own experts) and the
    calibration of the input scales (amax of the block input; amax of the SwiGLU output over
    the (token, expert) pairs routed). q = (experts [(w8 gate|up, ws13, w8 down, ws2)], s13, s2):
    vLLM's static per-tensor FP8 MoE, with every expert's input scales already the block's
    (the max over experts) and gate/up one weight scale per expert, so vLLM's merges are the
    identity; x * (1/s) in f32, clamp, RNE e4m3; float64 products of fp8 values times s * ws."""

    def __init__(self, weights, q=None, perturb=1.0):
        super().__init__()
        self.weights, self.q, self.perturb = weights, q, perturb
        self.amax_in = self.amax_mid = 0.0

    def forward(self, *args, **kwargs):
        hidden, top_i, top_w = experts_call(args, kwargs)
        x = hidden.float()
        out = torch.zeros_like(x)
        f32 = lambda v: torch.tensor(v, dtype=torch.float32)  # noqa: E731
        if self.q is None:
            self.amax_in = max(self.amax_in, float(x.abs().max()))
        else:
            experts, s13, s2 = self.q
            x8 = mo.quantize(x * f32(self.perturb), s13).float()
        for t in range(x.shape[0]):
            for j in range(top_i.shape[1]):
                e = int(top_i[t, j])
                if self.q is None:
                    g, u, d = (w.float() for w in self.weights[e])
                    a = F.silu(g @ x[t]) * (u @ x[t])
                    self.amax_mid = max(self.amax_mid, float(a.abs().max()))
                    y = d @ a
                else:
                    w13, ws13, w2, ws2 = experts[e]
                    gu = (x8[t].double() @ w13.double().T).float() * (f32(s13) * f32(ws13))
                    inter = gu.shape[0] // 2
                    a = F.silu(gu[:inter]) * gu[inter:]
                    a8 = mo.quantize(a * f32(self.perturb), s2).float()
                    y = (a8.double() @ w2.double().T).float() * (f32(s2) * f32(ws2))
                out[t] += top_w[t, j].float() * y
        return out.to(hidden.dtype)


def install_experts(model, per_layer):
    """per_layer[li]: the EmuExperts of layer li's sparse block; returns them."""
    for li, layer in enumerate(model.model.layers):
        if not mx.is_sparse(layer):
            die(f"layer {li} has no sparse block")
        if isinstance(layer.mlp.experts, nn.ModuleList):
            die(f"layer {li}: experts are an nn.ModuleList (transformers 4.x); this script replaces the fused "
                "experts module of transformers 5")
        layer.mlp.experts = per_layer[li]
    return per_layer


@torch.no_grad()
def fp8_experts(model, calib):
    """Calibrates and quantizes every sparse block's experts (see EmuExperts); per layer
    (experts [(w8 gate|up, ws13, w8 down, ws2)], s13, s2) and per expert the checkpoint's
    {gate, up, down: (w8, weight_scale, input_scale)}."""
    weights = [[tuple(w.detach().float() for w in gud) for gud in mx.expert_weights(layer.mlp)]
               for layer in model.model.layers]
    emus = install_experts(model, [EmuExperts(w) for w in weights])
    for p in calib:
        model(input_ids=torch.tensor([p], dtype=torch.long))
    f32 = lambda v: float(torch.tensor(v, dtype=torch.float32))  # noqa: E731
    q, ckpt = [], []
    for li, (emu, ws) in enumerate(zip(emus, weights)):
        s13, s2 = f32(emu.amax_in / 448.0), f32(emu.amax_mid / 448.0)
        if not (s13 > 0 and s2 > 0):
            die(f"layer {li}: expert input scales {s13}, {s2} (no token routed?)")
        experts, files = [], []
        for g, u, d in ws:
            ws13 = f32(max(float(g.abs().max()), float(u.abs().max())) / 448.0)
            ws2 = f32(float(d.abs().max()) / 448.0)
            g8, u8, d8 = mo.quantize(g, ws13), mo.quantize(u, ws13), mo.quantize(d, ws2)
            experts.append((torch.cat([g8.float(), u8.float()]), ws13, d8.float(), ws2))
            files.append({"gate": (g8, ws13, s13), "up": (u8, ws13, s13), "down": (d8, ws2, s2)})
        q.append((experts, s13, s2))
        ckpt.append(files)
    return weights, q, ckpt


def moe_fp8_fixture(name, arch, module, out_root, fixtures):
    log(f"== {name}-fp8")
    cls = need_class(arch, module)
    src = os.path.join(fixtures, name)
    for fn in ("config.json", "model.safetensors", "reference.json", "ref0.logits.f32"):
        if not os.path.isfile(os.path.join(src, fn)):
            die(f"{src}/{fn} is missing (run from the repository root, or pass --fixtures tests/fixtures/models)")
    with open(os.path.join(src, "reference.json")) as f:
        src_ref = json.load(f)
    if src_ref.get("experts_layout") != "per-expert":
        die(f"{src}: experts_layout {src_ref.get('experts_layout')}; the FP8 checkpoint is written per expert")
    prompts = [c["prompt"] for c in src_ref["cases"]]
    g.check_torch_fallbacks()

    def load():
        m, _ = g.reload_exact(cls, src, None)
        return m

    ref = load()
    want = source_logits(src, src_ref, name, all_logits(ref, prompts))

    gen = torch.Generator().manual_seed(359)
    calib = [torch.randint(0, ref.config.vocab_size, (48,), generator=gen).tolist() for _ in range(4)] + prompts
    qw = quantize_by_group(ref, input_amax(ref, calib))
    # The replacement experts with BF16 weights give HF's own logits (the call is understood).
    weights, qe, ckpt = fp8_experts(ref, calib)
    d_float = max(float((a - b).abs().max()) for a, b in zip(all_logits(ref, prompts), want))
    if not d_float < 1e-4 * max(float(w.abs().max()) for w in want) + 1e-5:
        die(f"the replaced experts with BF16 weights move HF's logits by {d_float}")
    log(f"  replaced experts, unquantized, vs HF's: max |diff| {d_float:.3g}")

    out = os.path.join(out_root, name + "-fp8")
    with safe_open(os.path.join(src, "model.safetensors"), framework="pt") as f:
        sd = {k: f.get_tensor(k) for k in f.keys()}
    entries = list(qw.items())
    for li, files in enumerate(ckpt):
        for e, projs in enumerate(files):
            entries += [(f"model.layers.{li}.mlp.experts.{e}.{p}_proj", v) for p, v in projs.items()]
    bad = [p for p, _ in entries if p + ".weight" in sd and sd[p + ".weight"].dtype != torch.bfloat16]
    if bad:
        die(f"{src}: quantized tensors not stored in BF16: {bad[:4]}")
    write_fp8_checkpoint(out, src, sd, entries, FP8_EXCLUDE_MODULES_MOE)

    def emulated(perturb, linear_cls):
        m = load()
        install_fp8_emulation(m, qw, linear_cls)
        install_experts(m, [EmuExperts(w, q, perturb) for w, q in zip(weights, qe)])
        return m

    emu = emulated(1.0, mo.EmuLinear)
    emu_logits = all_logits(emu, prompts)
    d = max(float((e - w).abs().max()) for e, w in zip(emu_logits, want))
    if not (d > 0 and math.isfinite(d)):
        die(f"the FP8 emulation moves the logits by {d}")
    log(f"  FP8 emulation vs the f32 model: max |diff| {d:.4g}")
    pert = emulated(1.0 + 2.0 ** -21, PerturbedEmuLinear)
    flips = flip_sensitivity(all_logits(pert, prompts), emu_logits)
    mo.run_cases(emu, prompts, out, extra={
        "arch": src_ref.get("arch"), "layer_types": src_ref.get("layer_types"),
        "quant": "modelopt fp8 static per-tensor", "source": f"tests/fixtures/models/{name}",
        "fp8_excluded": FP8_EXCLUDE_MODULES_MOE, "experts_layout": "per-expert",
        "emulation": "static FP8 with one weight scale and one input scale per vLLM merge (q/k/v, gate/up of the "
                     "shared expert, in_proj_qkv+in_proj_z), written per linear, so merging is the identity; routed "
                     "experts as vLLM's fused MoE (one input scale per projection kind over the block, written to "
                     "every expert; gate/up one weight scale per expert); in_proj_a/b/ba, router, shared_expert_gate, "
                     "conv1d, lm_head bf16; x*(1/s) f32, clamp 448, RNE e4m3fn; f64 GEMM of fp8 values times s*ws "
                     "in f32",
        "dtype_ref": "float32 emulation", "fp8_vs_f32_max_abs_logit_diff": d, "code_flip_sensitivity": flips})
    return "ok"


def qwen3_next_fp8_fixture(out_root, fixtures):
    return moe_fp8_fixture("qwen3-next-tiny", "Qwen3NextForCausalLM", "qwen3_next", out_root, fixtures)


def qwen3_5_moe_fp8_fixture(out_root, fixtures):
    return moe_fp8_fixture("qwen3_5-moe-tiny", Q35_MOE_ARCH, "qwen3_5_moe", out_root, fixtures)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--fixtures", default=os.path.join("tests", "fixtures", "models"),
                    help="where qwen3_5-tiny is read from (default: tests/fixtures/models)")
    ap.add_argument("--only", choices=["moe", "fp8", "fp8-next", "fp8-moe"], action="append",
                    help="build only these fixtures (repeatable); default all")
    args = ap.parse_args()
    torch.set_num_threads(max(1, min(16, os.cpu_count() or 1)))
    log("python", sys.version.split()[0], "torch", torch.__version__, "transformers", transformers.__version__)
    if int(transformers.__version__.split(".")[0]) < 5:
        die(f"transformers {transformers.__version__}: these fixtures need transformers 5")
    os.makedirs(args.out, exist_ok=True)
    g.check_torch_fallbacks()
    jobs = {"moe": qwen3_5_moe_fixture, "fp8": qwen3_5_fp8_fixture, "fp8-next": qwen3_next_fp8_fixture,
            "fp8-moe": qwen3_5_moe_fp8_fixture}
    failed = []
    for name, job in jobs.items():
        if args.only and name not in args.only:
            continue
        try:
            job(args.out, args.fixtures)
        except BaseException:  # noqa: BLE001 - report every fixture, keep going
            failed.append(name)
            traceback.print_exc()
            sys.stdout.flush()
    log("failed fixtures:", failed if failed else "none")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
