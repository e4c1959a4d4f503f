#!/usr/bin/env python3
"""Builds the tiny Qwen2-MoE fixture (a shared expert behind a sigmoid gate) and its Hugging
Face reference, with moe_oracle's machinery.

Run where PyTorch and transformers 5 are installed (the GPU device machine; on its CPU, in
float32):

    python3 tools/oracle/qwen2_moe_oracle.py OUT_DIR
    cp -r OUT_DIR/qwen2-moe-tiny tests/fixtures/models/

qwen2-moe-tiny: Qwen2MoeForCausalLM, 3 layers (layer 0 dense through mlp_only_layers), 8
experts, 2 per token, norm_topk_prob false (Qwen2-MoE's default: the top-k softmax
probabilities are used as they are), a shared expert of shared_expert_intermediate_size
scaled by sigmoid(x . shared_expert_gate) in every sparse layer, q/k/v biases, bf16 weights.
The script checks that each sparse block equals a float64 evaluation of that definition, and
that the reload holds exactly the weights written (moe_oracle.reload_checked).
"""
import argparse
import math
import os
import sys

import torch
import torch.nn.functional as F
import transformers
from safetensors.torch import save_file

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import model_oracle as mo  # noqa: E402
import moe_oracle as mx  # noqa: E402

CFG = dict(vocab_size=384, hidden_size=64, intermediate_size=96, num_hidden_layers=3, num_attention_heads=4,
           num_key_value_heads=2, moe_intermediate_size=48, shared_expert_intermediate_size=96, num_experts=8,
           num_experts_per_tok=2, norm_topk_prob=False, decoder_sparse_step=1, mlp_only_layers=[0],
           max_position_embeddings=256, rms_norm_eps=1e-6,
           rope_parameters={"rope_type": "default", "rope_theta": 1000000.0}, tie_word_embeddings=False,
           use_sliding_window=False, bos_token_id=None, eos_token_id=None, pad_token_id=None,
           output_router_logits=False)
KEYS = ("num_experts_per_tok", "moe_intermediate_size", "shared_expert_intermediate_size", "norm_topk_prob",
        "decoder_sparse_step", "mlp_only_layers")
SEED = 23
log = mo.log


def randomize(model, gen):
    """moe_oracle's scheme, and random biases (q/k/v) so that they matter."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith(".bias"):
                p.copy_(0.3 * torch.randn(p.shape, generator=gen))
            elif name.endswith("norm.weight"):
                p.copy_(0.6 + 0.8 * torch.rand(p.shape, generator=gen))
            elif name.endswith("embed_tokens.weight"):
                p.copy_(torch.randn(p.shape, generator=gen))
            elif name.endswith("lm_head.weight"):
                p.copy_(torch.randn(p.shape, generator=gen) * (2.0 / math.sqrt(p.shape[1])))
            elif name.endswith("shared_expert_gate.weight"):
                p.copy_(torch.randn(p.shape, generator=gen) * (2.0 / math.sqrt(p.shape[1])))  # gates spread over (0, 1)
            elif p.ndim in (2, 3):
                p.copy_(torch.randn(p.shape, generator=gen) / math.sqrt(p.shape[-1]))
            else:
                raise RuntimeError("unexpected parameter " + name)


@torch.no_grad()
def check_blocks_against_definition(model, gen):
    k, renorm = model.config.num_experts_per_tok, model.config.norm_topk_prob
    for li, layer in enumerate(model.model.layers):
        if not mx.is_sparse(layer):
            continue
        blk = layer.mlp
        x = torch.randn(1, 37, model.config.hidden_size, generator=gen)
        got = blk(x)
        got = (got[0] if isinstance(got, tuple) else got).reshape(-1, x.shape[-1]).double()
        xs = x.reshape(-1, x.shape[-1]).double()
        p = torch.softmax(xs @ mx.router_weight(blk).double().T, dim=-1)
        top_p, top_i = torch.topk(p, k, dim=-1)
        if renorm:
            top_p = top_p / top_p.sum(-1, keepdim=True)
        experts = mx.expert_weights(blk)
        want = torch.zeros_like(xs)
        for t in range(xs.shape[0]):
            for j in range(k):
                g, u, d = (w.double() for w in experts[int(top_i[t, j])])
                want[t] += top_p[t, j] * (d @ (F.silu(g @ xs[t]) * (u @ xs[t])))
        se = blk.shared_expert
        g, u, d = (m.weight.double() for m in (se.gate_proj, se.up_proj, se.down_proj))
        shared = (F.silu(xs @ g.T) * (xs @ u.T)) @ d.T
        want += torch.sigmoid(xs @ blk.shared_expert_gate.weight.double().T) * shared
        err = float((got - want).abs().max())
        assert err < 1e-4 * float(want.abs().max()) + 1e-6, f"layer {li}: block vs definition {err}"
    log("  sparse blocks (routed + gated shared expert) match the float64 definition")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    args = ap.parse_args()
    torch.set_num_threads(max(1, min(16, os.cpu_count() or 1)))
    log("torch", torch.__version__, "transformers", transformers.__version__)
    gen = torch.Generator().manual_seed(SEED)
    model = transformers.Qwen2MoeForCausalLM(transformers.Qwen2MoeConfig(**CFG)).eval()
    sparse = [li for li, layer in enumerate(model.model.layers) if mx.is_sparse(layer)]
    assert sparse == [1, 2], f"sparse layers {sparse}"
    attn = model.model.layers[0].self_attn
    assert attn.q_proj.bias is not None and attn.o_proj.bias is None, "Qwen2-MoE attention: q/k/v biases only"
    assert attn.head_dim == 16
    randomize(model, gen)
    mo.round_params_to_bf16(model)

    log("== qwen2-moe-tiny")
    out = os.path.join(args.out, "qwen2-moe-tiny")
    os.makedirs(out, exist_ok=True)
    save_file(mx.checkpoint_state_dict(model), os.path.join(out, "model.safetensors"), metadata={"format": "pt"})
    mx.write_config(model, out, arch="Qwen2MoeForCausalLM", cfg=CFG, keys=KEYS)
    ref = mx.reload_checked(out, model, cls=transformers.Qwen2MoeForCausalLM)
    check_blocks_against_definition(ref, gen)
    prompts = mo.make_prompts(CFG["vocab_size"], gen)
    extra = {"arch": "qwen2_moe", "dtype_ref": "float32 from bf16 weights",
             "router_min_gap": mx.router_min_gap(ref, prompts)}
    log("  router_min_gap", extra["router_min_gap"])
    mo.run_cases(ref, prompts, out, extra=extra)
    return 0


if __name__ == "__main__":
    sys.exit(main())
