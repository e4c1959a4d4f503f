#!/usr/bin/env python3
"""Builds tiny Qwen3-MoE fixtures in the dynamic FP8 formats users download, with references.

Run where PyTorch and transformers 5 are installed (the GPU device machine; everything runs on
its CPU in float32/float64, as the other oracle scripts do):

    python3 tools/oracle/moe_fp8_formats_oracle.py OUT_DIR
    cp -r OUT_DIR/qwen3-moe-fp8-block-tiny OUT_DIR/qwen3-moe-fp8-dynamic-tiny tests/fixtures/models/

The model: Qwen3MoeForCausalLM, 2 layers (layer 0 dense through mlp_only_layers, layer 1
sparse), hidden 192, 4 query / 2 KV heads (head_dim 48), dense intermediate 384, 8 experts,
2 per token, norm_topk_prob, moe_intermediate_size 192, vocab 384; random bf16 weights
(moe_oracle's scheme). hidden 192 and moe_intermediate_size 192 are 1.5 blocks of 128: every
K tile and the last block row of each projection end partway, and an expert's gate and up
rows do not share blocks (each projection has its own weight_scale_inv).

qwen3-moe-fp8-block-tiny: the layout of Qwen/Qwen3-30B-A3B-FP8 (`quant_method: fp8`,
  `activation_scheme: dynamic`, `weight_block_size: [128, 128]`): every linear of the decoder
  layers and every expert's gate_proj / up_proj / down_proj (per-expert names
  `model.layers.1.mlp.experts.E.{gate,up,down}_proj`) stores `weight` F8_E4M3 [N, K] and
  `weight_scale_inv` F32 [ceil(N/128), ceil(K/128)] (W = w8 * S, S = block amax / 448); the
  router `mlp.gate`, lm_head, embeddings and norms bf16.
  Reference: a float64 emulation of vLLM's Fp8MoEMethod with block_quant (its fused_moe with
  block_shape) and of its block FP8 linears: activations quantized per token and 128-column
  group, s = max(amax, 1e-10) / 448 in f32, q = e4m3(clamp(x / s)); out = sum over K tiles of
  (q . w8 over the tile) * s_a * s_w in float64, rounded to f32. In the sparse block: f32
  softmax routing, top-2 renormalised; per (token, expert) g and u from the token's quantized
  x (each with its own weight's scales), a = silu(g) * u in f32, a quantized per 128-column
  group likewise, y = down's product; out = sum of the routing weights times y (f32).

qwen3-moe-fp8-dynamic-tiny: compressed-tensors FP8 "dynamic" (weights `strategy: channel`,
  activations `strategy: token`, `dynamic: true`; vLLM's CompressedTensorsW8A8Fp8MoEMethod for
  the experts): `weight` F8_E4M3 with `weight_scale` F32 [N, 1] (row amax / 448); the router
  and lm_head in `ignore`. Reference: the same with s_tok = max(amax / 448, 1 / (448 * 512)),
  q = e4m3(clamp(x / s_tok)), out = s_tok * s_w[n] * (q . w8), for x and for each (token,
  expert) SiLU-mul row.

Both references run the rest of the model in float32 (eager attention) from the bf16 weights.
reference.json has the dense FP8 fixtures' layout (model_oracle.run_cases: per prompt the f32
logits of every position, the 20-token greedy continuation and its margins) plus
router_min_gap (the smallest gap between the 2nd and 3rd routing probability of the emulated
model over the prompts: a routing near-tie that a rounding may flip).
"""
import argparse
import json
import os
import sys
import traceback

import torch
import torch.nn as nn
import torch.nn.functional as F
import transformers
from safetensors.torch import save_file

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fp8_formats_oracle as ff  # noqa: E402  (block_quantize, channel_quantize, BlockEmuLinear, TokenEmuLinear)
import model_oracle as mo  # noqa: E402
import moe_oracle as mx  # noqa: E402  (randomize, checkpoint_state_dict, write_config, reload_checked, ...)

CFG = dict(vocab_size=384, hidden_size=192, intermediate_size=384, num_hidden_layers=2, num_attention_heads=4,
           num_key_value_heads=2, moe_intermediate_size=192, num_experts=8, num_experts_per_tok=2,
           norm_topk_prob=True, decoder_sparse_step=1, mlp_only_layers=[0], max_position_embeddings=256,
           rms_norm_eps=1e-6, rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
           tie_word_embeddings=False, attention_bias=False, bos_token_id=None, eos_token_id=None, pad_token_id=None,
           output_router_logits=False)
SEED = 31
log = mo.log
ATTN = ("q_proj", "k_proj", "v_proj", "o_proj")
DENSE_MLP = ("gate_proj", "up_proj", "down_proj")


class EmuMoeDynamic(nn.Module):
    """The sparse block with dynamic FP8 experts: `emu(w8, s)` is the format's emulated linear
    (it quantizes its input per token (and group) itself, as vLLM's fused MoE quantizes x and
    each SiLU-mul row); experts[e] = (gate, up, down) emulated linears."""

    def __init__(self, router, experts, k, renorm):
        super().__init__()
        self.router = router.detach().float()
        self.experts = experts
        self.k, self.renorm = k, renorm

    @torch.no_grad()
    def forward(self, hidden_states):
        shape = hidden_states.shape
        x = hidden_states.reshape(-1, shape[-1]).float()
        p = torch.softmax(x @ self.router.T, dim=-1, dtype=torch.float32)
        top_p, top_i = torch.topk(p, self.k, dim=-1)
        if self.renorm:
            top_p = top_p / top_p.sum(-1, keepdim=True)
        out = torch.zeros_like(x)
        for t in range(x.shape[0]):
            xt = x[t:t + 1]
            for j in range(self.k):
                gate, up, down = self.experts[int(top_i[t, j])]
                g, u = gate(xt), up(xt)  # f32, each from the same per-token(-group) quantization of x
                a = F.silu(g) * u  # f32
                y = down(a)  # a quantized per token (and group) inside, f32 out
                out[t] += top_p[t, j] * y[0]
        return out.reshape(shape)


@torch.no_grad()
def check_emulation_close(ref, emu_block, li, gen, H):
    """The emulated block is near the unquantized one (a sanity check of the emulation)."""
    x = torch.randn(1, 23, H, generator=gen)
    want = ref.model.layers[li].mlp(x)
    want = (want[0] if isinstance(want, tuple) else want).reshape(-1, H).double()
    got = emu_block(x).reshape(-1, H).double()
    rel = float((got - want).norm() / want.norm())
    log(f"  layer {li}: emulated block vs unquantized, relative L2 {rel:.3g}")
    assert 0 < rel < 0.25, f"the emulated block is {rel} from the unquantized one"


def fixture(name, out_root, ref_bf16_dir, model, prompts, quantize_one, emu_cls, qconfig, suffix, gen):
    log(f"== {name}")
    out = os.path.join(out_root, name)
    os.makedirs(out, exist_ok=True)
    emu = mx.reload_checked(ref_bf16_dir, model)  # the bf16 model; its linears and experts emulated below
    sd = mx.checkpoint_state_dict(model)
    k, renorm = CFG["num_experts_per_tok"], CFG["norm_topk_prob"]

    def quantized(p, w):
        w8, s = quantize_one(w.detach().float())
        sd[p + ".weight"] = w8.contiguous()
        sd[p + suffix] = s.contiguous()
        return emu_cls(w8, s)

    for li, layer in enumerate(emu.model.layers):
        for n in ATTN:
            setattr(layer.self_attn, n, quantized(f"model.layers.{li}.self_attn.{n}", getattr(layer.self_attn, n).weight))
        if not mx.is_sparse(layer):
            for n in DENSE_MLP:
                setattr(layer.mlp, n, quantized(f"model.layers.{li}.mlp.{n}", getattr(layer.mlp, n).weight))
            continue
        experts = []
        for e, (g, u, d) in enumerate(mx.expert_weights(layer.mlp)):
            pre = f"model.layers.{li}.mlp.experts.{e}"
            experts.append((quantized(pre + ".gate_proj", g), quantized(pre + ".up_proj", u),
                            quantized(pre + ".down_proj", d)))
        block = EmuMoeDynamic(mx.router_weight(layer.mlp), experts, k, renorm)
        check_emulation_close(emu, block, li, gen, CFG["hidden_size"])
        layer.mlp = block
    save_file(sd, os.path.join(out, "model.safetensors"), metadata={"format": "pt"})
    mx.write_config(model, out, qconfig, cfg=CFG)
    mo.run_cases(emu, prompts, out, extra={
        "arch": "qwen3_moe", "quant": json.dumps(qconfig, sort_keys=True),
        "reference": "float64 emulation (see tools/oracle/moe_fp8_formats_oracle.py)",
        "router_min_gap": router_min_gap(emu, prompts)})
    return out


@torch.no_grad()
def router_min_gap(model, prompts):
    """The smallest top-k / (k+1) probability gap of the emulated sparse blocks' routers."""
    k = CFG["num_experts_per_tok"]
    gaps, hooks = [], []
    for layer in model.model.layers:
        if isinstance(layer.mlp, EmuMoeDynamic):
            def hook(mod, inp, _out):
                x = inp[0].reshape(-1, inp[0].shape[-1]).float()
                s = torch.sort(torch.softmax(x @ mod.router.T, dim=-1), dim=-1, descending=True).values
                gaps.append(float((s[:, k - 1] - s[:, k]).min()))
            hooks.append(layer.mlp.register_forward_hook(hook))
    for pr in prompts:
        model(input_ids=torch.tensor([pr], dtype=torch.long))
    for h in hooks:
        h.remove()
    return min(gaps)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    args = ap.parse_args()
    torch.set_num_threads(max(1, min(16, os.cpu_count() or 1)))
    log("torch", torch.__version__, "transformers", transformers.__version__)
    os.makedirs(args.out, exist_ok=True)
    gen = torch.Generator().manual_seed(SEED)
    model = transformers.Qwen3MoeForCausalLM(transformers.Qwen3MoeConfig(**CFG)).eval()
    sparse = [li for li, layer in enumerate(model.model.layers) if mx.is_sparse(layer)]
    assert sparse == [1], f"sparse layers {sparse}: mlp_only_layers / decoder_sparse_step not as intended"
    mx.randomize(model, gen)
    mo.round_params_to_bf16(model)
    base = os.path.join(args.out, "_bf16")
    os.makedirs(base, exist_ok=True)
    save_file(mx.checkpoint_state_dict(model), os.path.join(base, "model.safetensors"), metadata={"format": "pt"})
    mx.write_config(model, base, cfg=CFG)
    ref = mx.reload_checked(base, model)
    mx.check_blocks_against_definition(ref, gen)
    prompts = mo.make_prompts(CFG["vocab_size"], gen)

    failed = 0
    block_cfg = {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
                 "weight_block_size": [128, 128]}
    ct_cfg = {"quant_method": "compressed-tensors", "format": "float-quantized",
              "config_groups": {"group_0": {
                  "targets": ["Linear"],
                  "weights": {"type": "float", "num_bits": 8, "strategy": "channel", "dynamic": False,
                              "symmetric": True},
                  "input_activations": {"type": "float", "num_bits": 8, "strategy": "token", "dynamic": True,
                                        "symmetric": True}}},
              "ignore": ["lm_head", "re:.*mlp.gate$"]}
    for name, quantize_one, emu_cls, qcfg, suffix in (
            ("qwen3-moe-fp8-block-tiny", ff.block_quantize, ff.BlockEmuLinear, block_cfg, ".weight_scale_inv"),
            ("qwen3-moe-fp8-dynamic-tiny", ff.channel_quantize, ff.TokenEmuLinear, ct_cfg, ".weight_scale")):
        try:
            out = fixture(name, args.out, base, model, prompts, quantize_one, emu_cls, qcfg, suffix, gen)
            log(f"  wrote {out}")
        except Exception:  # noqa: BLE001 - keep the other fixture, report loudly
            failed += 1
            traceback.print_exc()
    log("failed fixtures:", failed)
    return failed


if __name__ == "__main__":
    sys.exit(main())
