#!/usr/bin/env python3
"""Builds the tiny Qwen3-MoE fixtures and their Hugging Face references.

Run where PyTorch and transformers 5 are installed (the GPU device machine; everything runs
on its CPU in float32, as tools/oracle/model_oracle.py does):

    python3 tools/oracle/moe_oracle.py OUT_DIR
    cp -r OUT_DIR/qwen3-moe-tiny OUT_DIR/qwen3-moe-tiny-fp8 tests/fixtures/models/

Fixtures (the format of tests/fixtures/models, written by model_oracle.run_cases: per
prompt the float32 logits of every position [T, vocab] in refI.logits.f32, the 20-token
greedy continuation and the top-1/top-2 margins, in reference.json):
  qwen3-moe-tiny      Qwen3MoeForCausalLM, 4 layers of which 0 and 2 dense (mlp_only_layers),
                      8 experts, 2 per token, norm_topk_prob true, bf16 weights
  qwen3-moe-tiny-fp8  the same model as ModelOpt static per-tensor FP8 W8A8 (per-expert
                      weight_scale / input_scale; router and lm_head kept bf16), with the
                      references of an float32/float64 emulation of vLLM's FP8 MoE math

The checkpoint holds the experts under HF's per-expert names
(`model.layers.L.mlp.experts.E.{gate,up,down}_proj.weight`, router `mlp.gate.weight`),
written here from the in-memory parameters whatever layout this transformers keeps them in
(v5: fused 3-D `experts.gate_up_proj` [E, 2I, H] with gate first, `experts.down_proj`
[E, H, I]); the reference is the model transformers reloads from those files, and the
script checks that the reload holds exactly the weights written (no key missing or
unexpected) and that each sparse block equals a float64 dense evaluation of its definition
(softmax over all experts in f32, top-k, renormalise; every expert's SwiGLU; weighted sum).
reference.json also records router_min_gap: the smallest gap between the k-th and
(k+1)-th routing probability over every sparse layer and prompt position (a tiny gap is
a routing near-tie that a rounding may flip).

FP8 emulation (vLLM's fused MoE for static per-tensor FP8): one gate/up input scale per
layer = the max of its experts' gate and up input scales, one down input scale = the max
of the experts' down input scales; each expert's gate and up weights requantized to the
larger of their two weight scales (f32 dequantization, x * (1/s), clamp, RNE). x quantized
with the shared scale; g, u = float64 GEMM of the fp8 values * (input_scale * weight_scale)
in float32; silu(g) * u quantized with the down scale; down likewise; the routing weights
multiply each expert's float32 output and the k are summed. Attention and the dense layers'
MLPs use model_oracle's merged EmuLinear (q/k/v and gate/up merged as vLLM). Input scales
are calibrated as amax/448 over other random prompts, per expert over the tokens routed to
it (an expert no calibration token reached takes the layer's amax); weight scales amax/448.
"""
import argparse
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
from safetensors.torch import save_file

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import model_oracle as mo  # noqa: E402  (run_cases, make_prompts, quantize, EmuLinear, ...)

# head_dim is left to its default (hidden_size / num_attention_heads = 16): not every
# version's Qwen3MoeConfig declares the field.
CFG = dict(vocab_size=384, hidden_size=64, intermediate_size=192, num_hidden_layers=4, num_attention_heads=4,
           num_key_value_heads=2, moe_intermediate_size=48, num_experts=8, num_experts_per_tok=2,
           norm_topk_prob=True, decoder_sparse_step=1, mlp_only_layers=[0, 2], max_position_embeddings=256,
           rms_norm_eps=1e-6, rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
           tie_word_embeddings=False, attention_bias=False, bos_token_id=None, eos_token_id=None, pad_token_id=None,
           output_router_logits=False)
SEED = 21
log = mo.log


# ---------------------------------------------------------------------------------------
# Expert weights in one layout whatever this transformers keeps: per expert (gate [I, H],
# up [I, H], down [H, I]) and the router [E, H].
def is_sparse(layer):
    return hasattr(layer.mlp, "experts")


def expert_weights(block):
    ex = block.experts
    if hasattr(ex, "gate_up_proj"):  # transformers 5: fused 3-D parameters, gate rows first
        gu, dn = ex.gate_up_proj, ex.down_proj
        inter = gu.shape[1] // 2
        assert dn.shape[0] == gu.shape[0] and dn.shape[2] == inter, (gu.shape, dn.shape)
        return [(gu[e, :inter], gu[e, inter:], dn[e]) for e in range(gu.shape[0])]
    return [(m.gate_proj.weight, m.up_proj.weight, m.down_proj.weight) for m in ex]  # nn.ModuleList


def router_weight(block):
    return block.gate.weight  # nn.Linear (4.x) or Qwen3MoeTopKRouter.weight (5.x): [E, H]


def randomize(model, gen):
    """model_oracle's scheme (unit-scale activations, logits of a few units); 3-D expert
    parameters like their 2-D slices; the router N(0, 1/H) so its logits spread ~1."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.copy_(0.6 + 0.8 * torch.rand(p.shape, generator=gen))
            elif name.endswith("embed_tokens.weight"):
                p.copy_(torch.randn(p.shape, generator=gen))
            elif name.endswith("lm_head.weight"):
                p.copy_(torch.randn(p.shape, generator=gen) * (2.0 / math.sqrt(p.shape[1])))
            elif p.ndim in (2, 3):
                p.copy_(torch.randn(p.shape, generator=gen) / math.sqrt(p.shape[-1]))
            else:
                raise RuntimeError("unexpected parameter " + name)


def checkpoint_state_dict(model):
    """HF's on-disk names, bf16; experts per expert."""
    sd = {}
    for k, v in model.state_dict().items():
        if "rotary_emb" in k or ".mlp.experts." in k:
            continue
        sd[k] = v.detach().to(torch.bfloat16).contiguous()
    for li, layer in enumerate(model.model.layers):
        if not is_sparse(layer):
            continue
        sd[f"model.layers.{li}.mlp.gate.weight"] = router_weight(layer.mlp).detach().to(torch.bfloat16).contiguous()
        for e, (g, u, d) in enumerate(expert_weights(layer.mlp)):
            pre = f"model.layers.{li}.mlp.experts.{e}"
            sd[pre + ".gate_proj.weight"] = g.detach().to(torch.bfloat16).contiguous()
            sd[pre + ".up_proj.weight"] = u.detach().to(torch.bfloat16).contiguous()
            sd[pre + ".down_proj.weight"] = d.detach().to(torch.bfloat16).contiguous()
    return sd


def write_config(model, out_dir, quantization_config=None, arch="Qwen3MoeForCausalLM", cfg=None,
                 keys=("num_experts_per_tok", "moe_intermediate_size", "norm_topk_prob", "decoder_sparse_step",
                       "mlp_only_layers")):
    cfg = CFG if cfg is None else cfg
    # A config built in memory (not loaded) has no architectures until a model saves it.
    model.config.architectures = [arch]
    model.config.save_pretrained(out_dir)
    model.generation_config.save_pretrained(out_dir)
    mo.mark_bf16(out_dir)
    path = os.path.join(out_dir, "config.json")
    with open(path) as f:
        config = json.load(f)
    assert config["architectures"] == [arch], config.get("architectures")
    # The fields the engine reads, under the names the config class documents.
    for key in keys:
        config[key] = cfg[key]
    if "num_experts" not in config and "num_local_experts" not in config:
        config["num_experts"] = cfg["num_experts"]
    if quantization_config is not None:
        config["quantization_config"] = quantization_config
    with open(path, "w") as f:
        json.dump(config, f, indent=2, sort_keys=True)
        f.write("\n")


def reload_checked(out_dir, original, cls=None):
    """The reference: transformers' own reload of the files, holding exactly what was written."""
    cls = transformers.Qwen3MoeForCausalLM if cls is None else cls
    model, info = cls.from_pretrained(
        out_dir, dtype=torch.float32, attn_implementation="eager", output_loading_info=True)
    model.eval()
    bad = {k: info.get(k) for k in ("missing_keys", "unexpected_keys", "mismatched_keys") if info.get(k)}
    assert not bad, f"reload of {out_dir}: {bad}"
    want, got = checkpoint_state_dict(original), checkpoint_state_dict(model)
    assert want.keys() == got.keys(), set(want) ^ set(got)
    for k in want:
        assert torch.equal(want[k], got[k]), f"{k} differs after the reload"
    return model


@torch.no_grad()
def check_blocks_against_definition(model, gen):
    """Each sparse block's forward against a float64 dense evaluation of its definition."""
    k, renorm = model.config.num_experts_per_tok, model.config.norm_topk_prob
    for li, layer in enumerate(model.model.layers):
        if not is_sparse(layer):
            continue
        x = torch.randn(1, 37, model.config.hidden_size, generator=gen)
        got = layer.mlp(x)
        got = (got[0] if isinstance(got, tuple) else got).reshape(-1, x.shape[-1]).double()
        xs = x.reshape(-1, x.shape[-1]).double()
        p = torch.softmax(xs @ router_weight(layer.mlp).double().T, dim=-1)
        top_p, top_i = torch.topk(p, k, dim=-1)
        if renorm:
            top_p = top_p / top_p.sum(-1, keepdim=True)
        experts = expert_weights(layer.mlp)
        want = torch.zeros_like(xs)
        for t in range(xs.shape[0]):
            for j in range(k):
                g, u, d = (w.double() for w in experts[int(top_i[t, j])])
                want[t] += top_p[t, j] * (d @ (F.silu(g @ xs[t]) * (u @ xs[t])))
        err = float((got - want).abs().max())
        assert err < 1e-4 * float(want.abs().max()) + 1e-6, f"layer {li}: block vs definition {err}"
    log("  sparse blocks match the float64 definition")


@torch.no_grad()
def router_min_gap(model, prompts):
    k = model.config.num_experts_per_tok
    gaps = []
    hooks = []
    for layer in model.model.layers:
        if is_sparse(layer):
            def hook(mod, inp, _out):
                x = inp[0].reshape(-1, inp[0].shape[-1]).float()
                p = torch.softmax(x @ router_weight(mod).float().T, dim=-1)
                s = torch.sort(p, dim=-1, descending=True).values
                gaps.append(float((s[:, k - 1] - s[:, k]).min()))
            hooks.append(layer.mlp.register_forward_hook(hook))
    for pr in prompts:
        model(input_ids=torch.tensor([pr], dtype=torch.long))
    for h in hooks:
        h.remove()
    return min(gaps)


# ---------------------------------------------------------------------------------------
# FP8: calibration, the checkpoint, and the emulation of vLLM's fused MoE.
class EmuMoe(nn.Module):
    """vLLM's static per-tensor FP8 MoE: shared input scales (max over experts), each
    expert's gate/up requantized to its larger weight scale."""

    def __init__(self, router, experts_q, k, renorm):
        super().__init__()
        self.router = router.detach().float()
        self.k, self.renorm = k, renorm
        self.s13 = max(max(q["gate"][2], q["up"][2]) for q in experts_q)
        self.s2 = max(q["down"][2] for q in experts_q)
        self.ex = []
        for q in experts_q:
            ws = max(q["gate"][1], q["up"][1])
            w13 = torch.cat([mo.requantize(q["gate"][0], q["gate"][1], ws).float(),
                             mo.requantize(q["up"][0], q["up"][1], ws).float()])
            self.ex.append((w13, ws, q["down"][0].float(), q["down"][1]))

    def forward(self, hidden_states):
        shape = hidden_states.shape
        x = hidden_states.reshape(-1, shape[-1]).float()
        p = torch.softmax(x @ self.router.T, dim=-1, dtype=torch.float32)
        top_p, top_i = torch.topk(p, self.k, dim=-1)
        if self.renorm:
            top_p = top_p / top_p.sum(-1, keepdim=True)
        x8 = mo.quantize(x, self.s13).float()
        f32 = lambda v: torch.tensor(v, dtype=torch.float32)  # noqa: E731
        out = torch.zeros_like(x)
        inter = self.ex[0][0].shape[0] // 2
        for t in range(x.shape[0]):
            for j in range(self.k):
                w13, ws13, w2, ws2 = self.ex[int(top_i[t, j])]
                gu = (x8[t].double() @ w13.double().T).float() * (f32(self.s13) * f32(ws13))
                a = F.silu(gu[:inter]) * gu[inter:]
                a8 = mo.quantize(a, self.s2).float()
                y = (a8.double() @ w2.double().T).float() * (f32(self.s2) * f32(ws2))
                out[t] += top_p[t, j] * y
        return out.reshape(shape)


@torch.no_grad()
def calibrate(model, prompts):
    """amax/448 input scales (linears; experts over their routed tokens) and weight scales."""
    amax, hooks = {}, []
    k = model.config.num_experts_per_tok
    for name, mod in model.named_modules():
        if (isinstance(mod, nn.Linear) and ".layers." in name and not name.endswith("mlp.gate")
                and ".mlp.experts." not in name):
            def hook(m, inp, _out, name=name):
                amax[name] = max(amax.get(name, 0.0), float(inp[0].abs().max()))
            hooks.append(mod.register_forward_hook(hook))
    for li, layer in enumerate(model.model.layers):
        if not is_sparse(layer):
            continue
        def moe_hook(mod, inp, _out, li=li):
            x = inp[0].reshape(-1, inp[0].shape[-1]).float()
            p = torch.softmax(x @ router_weight(mod).float().T, dim=-1)
            top_i = torch.topk(p, k, dim=-1).indices
            layer_key = f"model.layers.{li}.mlp"
            amax[layer_key + ".*in"] = max(amax.get(layer_key + ".*in", 0.0), float(x.abs().max()))
            for e, (g, u, d) in enumerate(expert_weights(mod)):
                rows = (top_i == e).any(-1)
                pre = f"{layer_key}.experts.{e}"
                a_all = F.silu(x @ g.float().T) * (x @ u.float().T)
                amax[layer_key + ".*mid"] = max(amax.get(layer_key + ".*mid", 0.0), float(a_all.abs().max()))
                if rows.any():
                    amax[pre + ".in"] = max(amax.get(pre + ".in", 0.0), float(x[rows].abs().max()))
                    amax[pre + ".mid"] = max(amax.get(pre + ".mid", 0.0), float(a_all[rows].abs().max()))
        hooks.append(layer.mlp.register_forward_hook(moe_hook))
    for pr in prompts:
        model(input_ids=torch.tensor([pr], dtype=torch.long))
    for h in hooks:
        h.remove()

    def scale(v):
        return float(torch.tensor(v / 448.0, dtype=torch.float32))

    def qweight(w):
        ws = scale(float(w.abs().max()))
        return mo.quantize(w, ws), ws

    qw, qe = {}, {}
    for name, mod in model.named_modules():
        if name in amax:
            w8, ws = qweight(mod.weight)
            qw[name] = (w8, ws, scale(amax[name]))
    for li, layer in enumerate(model.model.layers):
        if not is_sparse(layer):
            continue
        lk = f"model.layers.{li}.mlp"
        experts = []
        for e, (g, u, d) in enumerate(expert_weights(layer.mlp)):
            pre = f"{lk}.experts.{e}"
            s_in = scale(amax.get(pre + ".in", amax[lk + ".*in"]))
            s_mid = scale(amax.get(pre + ".mid", amax[lk + ".*mid"]))
            q = {}
            for proj, w, s in (("gate", g, s_in), ("up", u, s_in), ("down", d, s_mid)):
                w8, ws = qweight(w.float())
                q[proj] = (w8, ws, s)
            experts.append(q)
        qe[li] = experts
    return qw, qe


def install_emulation(model, qw, qe):
    k, renorm = model.config.num_experts_per_tok, model.config.norm_topk_prob
    for li, layer in enumerate(model.model.layers):
        groups = [("self_attn", ["q_proj", "k_proj", "v_proj"])]
        singles = [("self_attn", "o_proj")]
        if is_sparse(layer):
            layer.mlp = EmuMoe(router_weight(layer.mlp), qe[li], k, renorm)
        else:
            groups.append(("mlp", ["gate_proj", "up_proj"]))
            singles.append(("mlp", "down_proj"))
        for sub, names in groups:
            mod = getattr(layer, sub)
            pre = [f"model.layers.{li}.{sub}.{n}" for n in names]
            s_max = max(qw[p][2] for p in pre)
            w_max = max(qw[p][1] for p in pre)
            for n, p in zip(names, pre):
                w8, ws, _s = qw[p]
                setattr(mod, n, mo.EmuLinear(mo.requantize(w8, ws, w_max), w_max, s_max, getattr(mod, n).bias))
        for sub, n in singles:
            mod = getattr(layer, sub)
            w8, ws, s = qw[f"model.layers.{li}.{sub}.{n}"]
            setattr(mod, n, mo.EmuLinear(w8, ws, s, getattr(mod, n).bias))


def write_fp8_checkpoint(model, qw, qe, out_dir):
    os.makedirs(out_dir, exist_ok=True)
    sd = checkpoint_state_dict(model)
    scalar = lambda v: torch.tensor(v, dtype=torch.float32)  # noqa: E731  ModelOpt: 0-d scales
    for p, (w8, ws, s) in qw.items():
        sd[p + ".weight"] = w8.contiguous()
        sd[p + ".weight_scale"] = scalar(ws)
        sd[p + ".input_scale"] = scalar(s)
    for li, experts in qe.items():
        for e, q in enumerate(experts):
            for proj, (w8, ws, s) in q.items():
                p = f"model.layers.{li}.mlp.experts.{e}.{proj}_proj"
                sd[p + ".weight"] = w8.contiguous()
                sd[p + ".weight_scale"] = scalar(ws)
                sd[p + ".input_scale"] = scalar(s)
    save_file(sd, os.path.join(out_dir, "model.safetensors"), metadata={"format": "pt"})
    write_config(model, out_dir, {"quant_method": "modelopt", "quant_algo": "FP8",
                                  "exclude_modules": ["lm_head", "model.layers.*.mlp.gate"]})


# ---------------------------------------------------------------------------------------
def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    args = ap.parse_args()
    torch.set_num_threads(max(1, min(16, os.cpu_count() or 1)))
    log("torch", torch.__version__, "transformers", transformers.__version__)
    os.makedirs(args.out, exist_ok=True)
    gen = torch.Generator().manual_seed(SEED)
    model = transformers.Qwen3MoeForCausalLM(transformers.Qwen3MoeConfig(**CFG)).eval()
    sparse = [li for li, layer in enumerate(model.model.layers) if is_sparse(layer)]
    assert sparse == [1, 3], f"sparse layers {sparse}: mlp_only_layers / decoder_sparse_step not as intended"
    assert model.model.layers[0].self_attn.head_dim == 16
    randomize(model, gen)
    mo.round_params_to_bf16(model)

    log("== qwen3-moe-tiny")
    out = os.path.join(args.out, "qwen3-moe-tiny")
    os.makedirs(out, exist_ok=True)
    save_file(checkpoint_state_dict(model), os.path.join(out, "model.safetensors"), metadata={"format": "pt"})
    write_config(model, out)
    ref = reload_checked(out, model)
    check_blocks_against_definition(ref, gen)
    prompts = mo.make_prompts(CFG["vocab_size"], gen)
    extra = {"arch": "qwen3_moe", "dtype_ref": "float32 from bf16 weights",
             "router_min_gap": router_min_gap(ref, prompts)}
    log("  router_min_gap", extra["router_min_gap"])
    mo.run_cases(ref, prompts, out, extra=extra)

    failed = 0
    try:
        log("== qwen3-moe-tiny-fp8")
        out8 = os.path.join(args.out, "qwen3-moe-tiny-fp8")
        calib = [torch.randint(0, CFG["vocab_size"], (48,), generator=gen).tolist() for _ in range(4)]
        qw, qe = calibrate(ref, calib)
        write_fp8_checkpoint(ref, qw, qe, out8)
        emu = reload_checked(out, model)  # the bf16 model, its linears and experts then emulated
        install_emulation(emu, qw, qe)
        mo.run_cases(emu, prompts, out8, extra={
            "arch": "qwen3_moe", "quant": "modelopt fp8 static per-tensor",
            "emulation": "vLLM fused MoE (shared max input scales, gate/up requantized to the larger weight "
                         "scale); q/k/v and gate/up of dense layers merged as vLLM",
            "router_min_gap": router_min_gap(ref, prompts)})
        shutil.copy(os.path.join(out, "generation_config.json"), out8)
    except Exception:  # noqa: BLE001 - keep the bf16 fixture, report loudly
        failed = 1
        traceback.print_exc()
    log("failed fixtures:", failed)
    return failed


if __name__ == "__main__":
    sys.exit(main())
