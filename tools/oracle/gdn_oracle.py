#!/usr/bin/env python3
"""Builds the tiny Gated DeltaNet hybrid fixtures (Qwen3-Next, Qwen3.5) and their Hugging Face
references, with model_oracle's and moe_oracle's machinery.

Run where PyTorch and transformers 5 are installed, without flash-linear-attention,
causal-conv1d or hub kernels (so that transformers runs its torch implementations of the
causal conv1d and the gated delta rule, which are the references), on the CPU in float32:

    python3 tools/oracle/gdn_oracle.py --out OUT_DIR
    cp -r OUT_DIR/qwen3-next-tiny OUT_DIR/qwen3_5-tiny tests/fixtures/models/

Fixtures (the format of tests/fixtures/models, written by model_oracle.run_cases):
  qwen3-next-tiny  Qwen3NextForCausalLM, 4 layers: linear_attention (GDN) at 0 and 2, full
                   attention at 1 and 3 (config.json spells this as full_attention_interval 2,
                   without layer_types, as the released Qwen3-Next configs do); fused GDN
                   projections in_proj_qkvz / in_proj_ba interleaved per key-head group;
                   2 key heads and 4 value heads (r = 2), dk 16, dv 32, conv kernel 4;
                   gated attention (q_proj gives [q | gate] per head), 4/2 heads of 32,
                   partial rotary 0.25 (8 of 32 dims); every layer a sparse MoE (8 experts,
                   2 per token, norm_topk_prob) with a sigmoid-gated shared expert.
  qwen3_5-tiny     Qwen3_5ForCausalLM (the dense text model, flat Qwen3_5TextConfig), 4 layers
                   with explicit layer_types [linear, linear, full, linear]; split GDN
                   projections in_proj_qkv / in_proj_z / in_proj_a / in_proj_b; same widths,
                   a dense SwiGLU MLP. Skipped with a message when this transformers has no
                   Qwen3.5.

Each fixture holds `reference.json` + `refI.logits.f32`: the float32 forward of the bf16
checkpoint as transformers reloads it (eager attention), and `reference_bf16.json` +
`bfI.logits.f32`: the same checkpoint run in bfloat16 by transformers (its logits widened
to f32), whose greedy continuations are what a BF16 engine should reproduce up to the first
near-tie. Prompts have lengths 1, 7, 23, 61 and 97 (97 > 64 runs two chunks of HF's chunked
gated delta rule).

Checks before any reference is written (failing loudly):
- the classes exist, and transformers runs the torch fallbacks (no fla / causal_conv1d /
  kernels package; Qwen3-Next's is_fast_path_available is False);
- the reload holds exactly the weights written (no key missing or unexpected);
- every GDN layer's forward equals a float64 evaluation of its definition written here
  (projections and their interleaving, causal conv1d + SiLU over q|k|v, l2-normalised q/k,
  q * dk^-0.5, g = -exp(A_log) softplus(a + dt_bias), beta = sigmoid(b), the token-by-token
  delta rule with value head h reading key head h // r, RMSNorm over dv times weight times
  silu(z), out_proj), over 80 tokens (two HF chunks);
- every Qwen3-Next sparse block equals the float64 routed + gated-shared-expert definition.

Random weights: the zero-centred RMSNorms (input/post-attention/final, q_norm, k_norm; the
model uses x_hat * (1 + w)) take w in [-0.4, 0.4]; the GDN gated norm (x_hat * w, not
zero-centred) takes w in [0.6, 1.4]; A_log = log(U(0.1, 2)) (slow enough decay that the
state carries over many tokens), dt_bias ~ 0.5 N(0, 1), conv1d weights N(0, 1/K), other
matrices N(0, 1/fan_in), lm_head gain 2.
"""
import argparse
import importlib
import importlib.util
import math
import os
import sys
import traceback

import torch
import torch.nn.functional as F
import transformers
from safetensors.torch import save_file

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import model_oracle as mo  # noqa: E402
import moe_oracle as mx  # noqa: E402
import qwen2_moe_oracle as q2  # noqa: E402

log = mo.log
PROMPT_LENS = [1, 7, 23, 61, 97]

COMMON = dict(vocab_size=384, hidden_size=64, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2,
              head_dim=32, max_position_embeddings=512, rms_norm_eps=1e-6, hidden_act="silu",
              rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.25},
              partial_rotary_factor=0.25, tie_word_embeddings=False, attention_bias=False,
              linear_conv_kernel_dim=4, linear_key_head_dim=16, linear_value_head_dim=32, linear_num_key_heads=2,
              linear_num_value_heads=4, bos_token_id=None, eos_token_id=None, pad_token_id=None)
NEXT_CFG = dict(COMMON, intermediate_size=96, full_attention_interval=2, num_experts=8, num_experts_per_tok=2,
                moe_intermediate_size=32, shared_expert_intermediate_size=64, norm_topk_prob=True,
                decoder_sparse_step=1, mlp_only_layers=[], output_router_logits=False)
NEXT_LAYER_TYPES = ["linear_attention", "full_attention", "linear_attention", "full_attention"]
Q35_LAYER_TYPES = ["linear_attention", "linear_attention", "full_attention", "linear_attention"]
Q35_CFG = dict(COMMON, intermediate_size=128, layer_types=Q35_LAYER_TYPES)


def die(msg):
    raise SystemExit("gdn_oracle: " + msg)


def need(name):
    cls = getattr(transformers, name, None)
    if cls is None:
        die(f"transformers {transformers.__version__} has no {name}; this fixture needs a transformers "
            "that defines it")
    return cls


def check_torch_fallbacks():
    """The references must come from transformers' torch implementations."""
    for pkg in ("fla", "causal_conv1d"):
        if importlib.util.find_spec(pkg) is not None:
            die(f"the package '{pkg}' is installed: transformers may run its kernels instead of the torch "
                "reference implementations; run this script in an environment without it")
    if importlib.util.find_spec("kernels") is not None:
        # Hub kernels need a download (no network here); the float64 definition check of every
        # GDN layer below is what proves the reference's math either way.
        log("  WARNING: the 'kernels' package is installed; relying on the float64 GDN checks")
    utils = transformers.utils
    for fn in ("is_flash_linear_attention_available", "is_causal_conv1d_available"):
        f = getattr(utils, fn, None)
        if f is not None and f():
            die(f"transformers.utils.{fn}() is True: the fast paths would be used")
    log("  no fla / causal_conv1d: torch fallbacks")


def check_next_module(model):
    m = importlib.import_module(type(model).__module__)
    if getattr(m, "is_fast_path_available", False):
        die("modeling_qwen3_next.is_fast_path_available is True")
    for li, layer in enumerate(model.model.layers):
        la = getattr(layer, "linear_attn", None)
        if la is None:
            continue
        if getattr(la, "causal_conv1d_fn", None) is not None:
            die(f"layer {li}: linear_attn.causal_conv1d_fn is not None (a fast conv kernel)")
        chunk = getattr(la, "chunk_gated_delta_rule", None)
        if chunk is not None and chunk is not getattr(m, "torch_chunk_gated_delta_rule", None):
            die(f"layer {li}: chunk_gated_delta_rule is {chunk}, not the torch implementation")
        if type(la.norm).__name__ != "Qwen3NextRMSNormGated":
            die(f"layer {li}: the gated norm is {type(la.norm).__name__}, not Qwen3NextRMSNormGated")
    log("  Qwen3-Next runs the torch causal conv1d / chunked gated delta rule / gated norm")


def layer_types_of(model):
    return list(model.config.layer_types)


def randomize(model, gen):
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("linear_attn.norm.weight"):  # gated RMSNorm: x_hat * w
                p.copy_(0.6 + 0.8 * torch.rand(p.shape, generator=gen))
            elif name.endswith("norm.weight"):  # zero-centred: x_hat * (1 + w)
                p.copy_(0.8 * torch.rand(p.shape, generator=gen) - 0.4)
            elif name.endswith("A_log"):
                p.copy_(torch.log(0.1 + 1.9 * torch.rand(p.shape, generator=gen)))
            elif name.endswith("dt_bias"):
                p.copy_(0.5 * torch.randn(p.shape, generator=gen))
            elif name.endswith("conv1d.weight"):
                p.copy_(torch.randn(p.shape, generator=gen) / math.sqrt(p.shape[-1]))
            elif name.endswith("embed_tokens.weight"):
                p.copy_(torch.randn(p.shape, generator=gen))
            elif name.endswith("lm_head.weight") or name.endswith("shared_expert_gate.weight"):
                p.copy_(torch.randn(p.shape, generator=gen) * (2.0 / math.sqrt(p.shape[1])))
            elif name.endswith(".bias"):
                p.copy_(0.2 * torch.randn(p.shape, generator=gen))
            elif p.ndim in (2, 3):
                p.copy_(torch.randn(p.shape, generator=gen) / math.sqrt(p.shape[-1]))
            else:
                die("unexpected parameter " + name)


def plain_state_dict(model):
    return {k: v.detach().to(torch.bfloat16).contiguous() for k, v in model.state_dict().items()
            if "rotary_emb" not in k}


def write_config(model, out_dir, arch, drop=(), add=None):
    import json
    model.config.architectures = [arch]
    model.config.save_pretrained(out_dir)
    model.generation_config.save_pretrained(out_dir)
    mo.mark_bf16(out_dir)
    path = os.path.join(out_dir, "config.json")
    with open(path) as f:
        config = json.load(f)
    for k in drop:
        config.pop(k, None)
    config.update(add or {})
    with open(path, "w") as f:
        json.dump(config, f, indent=2, sort_keys=True)
        f.write("\n")
    return config


def reload_exact(cls, out_dir, want_sd, dtype=torch.float32):
    model, info = cls.from_pretrained(out_dir, dtype=dtype, attn_implementation="eager", output_loading_info=True)
    model.eval()
    bad = {k: info.get(k) for k in ("missing_keys", "unexpected_keys", "mismatched_keys") if info.get(k)}
    if bad:
        die(f"reload of {out_dir} with {cls.__name__}: {bad}")
    return model, want_sd


# ---------------------------------------------------------------------------------------
# The GDN layer's definition in float64.
def gdn_projections(la, x, fused):
    """x [T, H] float64 -> q, k [T, nk, dk], v, z [T, nv, dv], a, b [T, nv]."""
    nk, nv, dk, dv = la.num_k_heads, la.num_v_heads, la.head_k_dim, la.head_v_dim
    r = nv // nk
    T = x.shape[0]
    if fused:  # per key-head group: [q (dk), k (dk), v (r dv), z (r dv)] and [b (r), a (r)]
        qkvz = (x @ la.in_proj_qkvz.weight.double().T).reshape(T, nk, 2 * dk + 2 * r * dv)
        q, k = qkvz[..., :dk], qkvz[..., dk:2 * dk]
        v = qkvz[..., 2 * dk:2 * dk + r * dv].reshape(T, nv, dv)
        z = qkvz[..., 2 * dk + r * dv:].reshape(T, nv, dv)
        ba = (x @ la.in_proj_ba.weight.double().T).reshape(T, nk, 2 * r)
        b, a = ba[..., :r].reshape(T, nv), ba[..., r:].reshape(T, nv)
    else:
        qkv = x @ la.in_proj_qkv.weight.double().T
        q = qkv[:, :nk * dk].reshape(T, nk, dk)
        k = qkv[:, nk * dk:2 * nk * dk].reshape(T, nk, dk)
        v = qkv[:, 2 * nk * dk:].reshape(T, nv, dv)
        z = (x @ la.in_proj_z.weight.double().T).reshape(T, nv, dv)
        b = x @ la.in_proj_b.weight.double().T
        a = x @ la.in_proj_a.weight.double().T
    return q, k, v, z, a, b


def gdn_definition(la, x, eps, fused):
    nk, nv, dk, dv = la.num_k_heads, la.num_v_heads, la.head_k_dim, la.head_v_dim
    r = nv // nk
    T = x.shape[0]
    q, k, v, z, a, b = gdn_projections(la, x, fused)
    mixed = torch.cat([q.reshape(T, -1), k.reshape(T, -1), v.reshape(T, -1)], dim=-1)  # [T, C]
    w = la.conv1d.weight.double().squeeze(1)  # [C, K]
    K = w.shape[1]
    padded = torch.cat([torch.zeros(K - 1, mixed.shape[1], dtype=torch.float64), mixed])
    conv = torch.stack([(padded[t:t + K].T * w).sum(-1) for t in range(T)])
    conv = F.silu(conv)
    q = conv[:, :nk * dk].reshape(T, nk, dk)
    k = conv[:, nk * dk:2 * nk * dk].reshape(T, nk, dk)
    v = conv[:, 2 * nk * dk:].reshape(T, nv, dv)
    q = q / torch.sqrt((q * q).sum(-1, keepdim=True) + 1e-6) * dk ** -0.5
    k = k / torch.sqrt((k * k).sum(-1, keepdim=True) + 1e-6)
    beta = torch.sigmoid(b)
    g = -torch.exp(la.A_log.double()) * F.softplus(a + la.dt_bias.double())
    out = torch.zeros(T, nv, dv, dtype=torch.float64)
    for h in range(nv):
        S = torch.zeros(dk, dv, dtype=torch.float64)
        kh = h // r
        for t in range(T):
            S = S * torch.exp(g[t, h])
            kv = S.T @ k[t, kh]
            S = S + torch.outer(k[t, kh], beta[t, h] * (v[t, h] - kv))
            out[t, h] = S.T @ q[t, kh]
    normed = out / torch.sqrt((out * out).mean(-1, keepdim=True) + eps)
    normed = normed * la.norm.weight.double() * F.silu(z)
    return normed.reshape(T, nv * dv) @ la.out_proj.weight.double().T


@torch.no_grad()
def check_gdn_layers(model, gen, fused):
    eps = model.config.rms_norm_eps
    n = 0
    for li, layer in enumerate(model.model.layers):
        la = getattr(layer, "linear_attn", None)
        if la is None:
            continue
        x = torch.randn(1, 80, model.config.hidden_size, generator=gen)
        got = la(hidden_states=x, cache_params=None, attention_mask=None)
        got = (got[0] if isinstance(got, tuple) else got).reshape(80, -1).double()
        want = gdn_definition(la, x[0].double(), eps, fused)
        err = float((got - want).abs().max())
        tol = 1e-4 * float(want.abs().max()) + 1e-6
        if not err < tol:
            die(f"layer {li}: GDN forward vs its float64 definition: max |diff| {err} > {tol}")
        log(f"  layer {li}: GDN matches the float64 definition (max |diff| {err:.3g})")
        n += 1
    if n == 0:
        die("no linear_attention layer found")


def check_rotary(model, cfg):
    inv = model.model.rotary_emb.inv_freq
    rot = int(cfg["head_dim"] * cfg["partial_rotary_factor"])
    if inv.numel() != rot // 2:
        die(f"rotary inv_freq has {inv.numel()} entries, want {rot // 2} (partial_rotary_factor not applied)")
    want = 1.0 / (cfg["rope_parameters"]["rope_theta"] ** (torch.arange(0, rot, 2, dtype=torch.float32) / rot))
    if not torch.allclose(inv.float(), want, rtol=1e-6, atol=0):
        die(f"rotary inv_freq {inv} != {want}")
    log(f"  partial rotary: {rot} of {cfg['head_dim']} dims")


def references(cls, out, sd, prompts, extra, fused, gen, post=None):
    ref, _ = reload_exact(cls, out, sd)
    got = plain_state_dict(ref) if post is None else post["sd"](ref)
    if got.keys() != sd.keys():
        die(f"reloaded keys differ: {sorted(set(got) ^ set(sd))}")
    for k in sd:
        if not torch.equal(got[k], sd[k]):
            die(f"{k} differs after the reload")
    log("  reload holds exactly the weights written")
    check_gdn_layers(ref, gen, fused)
    if post is not None:
        extra = dict(extra, **post["check"](ref))
    mo.run_cases(ref, prompts, out, extra=dict(extra, dtype_ref="float32 from bf16 weights"))
    bf, _ = reload_exact(cls, out, sd, dtype=torch.bfloat16)
    mo.run_cases(bf, prompts, out, prefix="bf", ref_name="reference_bf16.json",
                 extra=dict(extra, dtype_ref="bfloat16 (transformers run in bf16; logits widened to f32)"))


def next_fixture(out_root):
    log("== qwen3-next-tiny")
    cls, cfg_cls = need("Qwen3NextForCausalLM"), need("Qwen3NextConfig")
    gen = torch.Generator().manual_seed(31)
    model = cls(cfg_cls(**NEXT_CFG)).eval()
    if layer_types_of(model) != NEXT_LAYER_TYPES:
        die(f"layer_types {layer_types_of(model)} from full_attention_interval 2, want {NEXT_LAYER_TYPES}")
    sparse = [li for li, layer in enumerate(model.model.layers) if mx.is_sparse(layer)]
    if sparse != [0, 1, 2, 3]:
        die(f"sparse layers {sparse}")
    check_next_module(model)
    check_rotary(model, NEXT_CFG)
    randomize(model, gen)
    mo.round_params_to_bf16(model)
    out = os.path.join(out_root, "qwen3-next-tiny")
    os.makedirs(out, exist_ok=True)
    write_config(model, out, "Qwen3NextForCausalLM", drop=("layer_types",), add={
        "full_attention_interval": 2, "num_experts": NEXT_CFG["num_experts"],
        "num_experts_per_tok": NEXT_CFG["num_experts_per_tok"],
        "moe_intermediate_size": NEXT_CFG["moe_intermediate_size"],
        "shared_expert_intermediate_size": NEXT_CFG["shared_expert_intermediate_size"],
        "norm_topk_prob": True, "decoder_sparse_step": 1, "mlp_only_layers": [], "partial_rotary_factor": 0.25})
    # Experts under HF's per-expert names, as the released checkpoints store them; should this
    # transformers not map those onto its fused parameters, the fused 3-D layout instead (said
    # loudly and recorded in reference.json as experts_layout).
    sd_fn, layout = mx.checkpoint_state_dict, "per-expert"
    save_file(sd_fn(model), os.path.join(out, "model.safetensors"), metadata={"format": "pt"})
    _m, info = cls.from_pretrained(out, dtype=torch.float32, attn_implementation="eager", output_loading_info=True)
    if any(info.get(k) for k in ("missing_keys", "unexpected_keys", "mismatched_keys")):
        log("  WARNING: per-expert names do not reload in this transformers:",
            {k: info.get(k) for k in ("missing_keys", "unexpected_keys") if info.get(k)}, "-> fused experts")
        sd_fn, layout = plain_state_dict, "fused"
        save_file(sd_fn(model), os.path.join(out, "model.safetensors"), metadata={"format": "pt"})
    sd = sd_fn(model)
    prompts = [torch.randint(0, NEXT_CFG["vocab_size"], (n,), generator=gen).tolist() for n in PROMPT_LENS]

    def check(ref):
        check_next_module(ref)
        q2.check_blocks_against_definition(ref, gen)
        gap = mx.router_min_gap(ref, prompts)
        log("  router_min_gap", gap)
        return {"router_min_gap": gap}

    extra = {"arch": "qwen3_next", "layer_types": NEXT_LAYER_TYPES, "experts_layout": layout}
    references(cls, out, sd, prompts, extra, True, gen, post={"sd": sd_fn, "check": check})


def qwen3_5_fixture(out_root):
    log("== qwen3_5-tiny")
    cls = getattr(transformers, "Qwen3_5ForCausalLM", None)
    cfg_cls = getattr(transformers, "Qwen3_5TextConfig", None)
    if cls is None or cfg_cls is None:
        log(f"  SKIPPED: transformers {transformers.__version__} has no Qwen3_5ForCausalLM / Qwen3_5TextConfig")
        return "skipped"
    gen = torch.Generator().manual_seed(35)
    model = cls(cfg_cls(**Q35_CFG)).eval()
    if layer_types_of(model) != Q35_LAYER_TYPES:
        die(f"layer_types {layer_types_of(model)}, want {Q35_LAYER_TYPES}")
    check_rotary(model, Q35_CFG)
    randomize(model, gen)
    mo.round_params_to_bf16(model)
    out = os.path.join(out_root, "qwen3_5-tiny")
    os.makedirs(out, exist_ok=True)
    sd = plain_state_dict(model)
    for k in sd:
        if ".linear_attn." in k and not any(s in k for s in ("in_proj_qkv.", "in_proj_z.", "in_proj_a.", "in_proj_b.",
                                                              "conv1d.", "A_log", "dt_bias", "norm.", "out_proj.")):
            die(f"unexpected Qwen3.5 GDN tensor {k}")
    save_file(sd, os.path.join(out, "model.safetensors"), metadata={"format": "pt"})
    write_config(model, out, "Qwen3_5ForCausalLM", add={"partial_rotary_factor": 0.25})
    prompts = [torch.randint(0, Q35_CFG["vocab_size"], (n,), generator=gen).tolist() for n in PROMPT_LENS]
    references(cls, out, sd, prompts, {"arch": "qwen3_5_text", "layer_types": Q35_LAYER_TYPES}, False, gen)
    return "ok"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    torch.set_num_threads(max(1, min(16, os.cpu_count() or 1)))
    log("python", sys.version.split()[0], "torch", torch.__version__, "transformers", transformers.__version__)
    os.makedirs(args.out, exist_ok=True)
    check_torch_fallbacks()
    failed = 0
    for job in (next_fixture, qwen3_5_fixture):
        try:
            job(args.out)
        except BaseException:  # noqa: BLE001 - report every fixture, keep going
            failed += 1
            traceback.print_exc()
            sys.stdout.flush()
    log("failed fixtures:", failed)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
