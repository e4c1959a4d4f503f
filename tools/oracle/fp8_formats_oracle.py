#!/usr/bin/env python3
"""Builds tiny Qwen3 fixtures in the FP8 formats users download, with their references.

Run where PyTorch and transformers 5 are installed (the GPU device machine):

    python3 tools/oracle/fp8_formats_oracle.py OUT_DIR
    cp -r OUT_DIR/qwen3-fp8-block-tiny OUT_DIR/qwen3-fp8-dynamic-tiny tests/fixtures/models/

The model: Qwen3ForCausalLM, 2 layers, hidden 192, 4 query / 2 KV heads of 64, intermediate
384, vocab 384, random bf16 weights (model_oracle's scheme). hidden 192 is 1.5 blocks of 128,
so K tiles and the down projection's N blocks end partway.

qwen3-fp8-block-tiny: the layout of the official Qwen/Qwen3-*-FP8 releases
  (`quant_method: fp8`, `activation_scheme: dynamic`, `weight_block_size: [128, 128]`): each
  linear's `weight` F8_E4M3 [N, K] with `weight_scale_inv` F32 [ceil(N/128), ceil(K/128)]
  (W = w8 * S[n/128, k/128]; S = amax of the block / 448). lm_head, embeddings and norms bf16.
  reference.json: a float64 emulation of vLLM's block FP8 linear: activations quantized per
  token and 128-column group, s = max(amax, 1e-10) / 448, q = e4m3(clamp(x / s)) (a divide,
  as vLLM's kernel); out = sum over K tiles of (q . w8 over the tile) * s_a * s_w.
  The layout is checked against transformers' own reading of it: its fine-grained FP8
  integration (FineGrainedFP8Config(dequantize=True)) loads the files and must give every
  linear's weight as w8 * S. (Its FP8 GEMM path needs the `kernels` package and a download
  from the Hub, which the device machine cannot reach, so HF's FP8 forward is not a peer here.)

qwen3-fp8-dynamic-tiny: compressed-tensors FP8 "dynamic" (weights `strategy: channel`,
  activations `strategy: token`, `dynamic: true`): `weight` F8_E4M3 with `weight_scale` F32
  [N, 1] (amax of the row / 448); reference: the float64 emulation with
  s_tok = max(amax / 448, 1 / (448 * 512)), q = e4m3(clamp(x / s_tok)),
  out = s_tok[m] * s_w[n] * (q . w8).

Both references run the rest of the model in float32 (eager attention) from the bf16 weights.
"""
import argparse
import json
import math
import os
import sys
import traceback

import torch
import torch.nn as nn
import transformers
from safetensors.torch import save_file

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import model_oracle as mo  # noqa: E402

FP8 = torch.float8_e4m3fn
CFG = dict(vocab_size=384, hidden_size=192, intermediate_size=384, num_hidden_layers=2, num_attention_heads=4,
           num_key_value_heads=2, head_dim=64, max_position_embeddings=256, rms_norm_eps=1e-6,
           rope_parameters={"rope_type": "default", "rope_theta": 1000000.0}, tie_word_embeddings=False,
           attention_bias=False, bos_token_id=None, eos_token_id=None, pad_token_id=None)
SEED = 29
BLOCK = 128
LINEARS = [("self_attn", n) for n in ("q_proj", "k_proj", "v_proj", "o_proj")] + \
          [("mlp", n) for n in ("gate_proj", "up_proj", "down_proj")]
log = mo.log


def e4m3(x):
    return x.float().clamp(-448.0, 448.0).to(FP8)


def block_quantize(w):
    """w [N, K] f32 -> (w8 [N, K], S [ceil(N/128), ceil(K/128)] f32) with W ~ w8 * S."""
    N, K = w.shape
    nb, kb = -(-N // BLOCK), -(-K // BLOCK)
    S = torch.zeros(nb, kb, dtype=torch.float32)
    w8 = torch.zeros(N, K, dtype=FP8)
    for i in range(nb):
        for j in range(kb):
            blk = w[i * BLOCK:(i + 1) * BLOCK, j * BLOCK:(j + 1) * BLOCK]
            s = max(float(blk.abs().max()), 1e-12) / 448.0
            S[i, j] = s
            w8[i * BLOCK:(i + 1) * BLOCK, j * BLOCK:(j + 1) * BLOCK] = e4m3(blk / torch.tensor(s))
    return w8, S


def channel_quantize(w):
    s = (w.abs().amax(dim=1, keepdim=True).clamp_min(1e-12) / 448.0).float()
    return e4m3(w / s), s


class BlockEmuLinear(nn.Module):
    def __init__(self, w8, S):
        super().__init__()
        self.w = w8.double()
        self.S = S.double()

    def forward(self, x):
        shape = x.shape
        xs = x.reshape(-1, shape[-1]).float()
        M, K = xs.shape
        N = self.w.shape[0]
        y = torch.zeros(M, N, dtype=torch.float64)
        for g in range(-(-K // BLOCK)):
            xg = xs[:, g * BLOCK:(g + 1) * BLOCK]
            s = (xg.abs().amax(dim=1, keepdim=True).clamp_min(1e-10) / 448.0).float()  # f32, as the kernel
            q = e4m3(xg / s).double()
            tile = q @ self.w[:, g * BLOCK:(g + 1) * BLOCK].T  # [M, N]
            sw = self.S[:, g].repeat_interleave(BLOCK)[:N]      # scale of row n's block
            y += tile * s.double() * sw[None, :]
        return y.float().reshape(*shape[:-1], N)


class TokenEmuLinear(nn.Module):
    def __init__(self, w8, s_w):
        super().__init__()
        self.w = w8.double()
        self.sw = s_w.double().reshape(-1)

    def forward(self, x):
        shape = x.shape
        xs = x.reshape(-1, shape[-1]).float()
        s = torch.maximum(xs.abs().amax(dim=1, keepdim=True) / 448.0,
                          torch.tensor(1.0 / (448.0 * 512.0))).float()
        q = e4m3(xs / s).double()
        y = (q @ self.w.T) * s.double() * self.sw[None, :]
        return y.float().reshape(*shape[:-1], -1)


def write_checkpoint(model, out, quantized, quantization_config):
    """quantized[prefix] = {suffix: tensor}; everything else bf16 under HF's names."""
    os.makedirs(out, exist_ok=True)
    sd = {k: v.detach().to(torch.bfloat16).contiguous() for k, v in model.state_dict().items()
          if "rotary_emb" not in k}
    for p, tensors in quantized.items():
        sd.pop(p + ".weight")
        for suffix, t in tensors.items():
            sd[p + suffix] = t.contiguous()
    save_file(sd, os.path.join(out, "model.safetensors"), metadata={"format": "pt"})
    model.config.architectures = ["Qwen3ForCausalLM"]
    model.config.save_pretrained(out)
    model.generation_config.save_pretrained(out)
    mo.mark_bf16(out)
    path = os.path.join(out, "config.json")
    with open(path) as f:
        config = json.load(f)
    config["quantization_config"] = quantization_config
    with open(path, "w") as f:
        json.dump(config, f, indent=2, sort_keys=True)
        f.write("\n")


def fixture(name, base_dir, prompts, quantize_one, emu_cls, qconfig, suffixes):
    log(f"== {name}")
    out = os.path.join(base_dir, name)
    model = mo.reload_f32(transformers.Qwen3ForCausalLM, os.path.join(base_dir, "_bf16"))
    quantized, emus = {}, {}
    for li, layer in enumerate(model.model.layers):
        for sub, n in LINEARS:
            p = f"model.layers.{li}.{sub}.{n}"
            w8, s = quantize_one(getattr(getattr(layer, sub), n).weight.detach().float())
            quantized[p] = {".weight": w8, suffixes: s}
            emus[(li, sub, n)] = emu_cls(w8, s)
    write_checkpoint(model, out, quantized, qconfig)
    for (li, sub, n), emu in emus.items():
        setattr(getattr(model.model.layers[li], sub), n, emu)
    mo.run_cases(model, prompts, out, extra={"arch": "qwen3", "quant": json.dumps(qconfig, sort_keys=True),
                                             "reference": "float64 emulation (see tools/oracle/fp8_formats_oracle.py)"})
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    args = ap.parse_args()
    torch.set_num_threads(max(1, min(16, os.cpu_count() or 1)))
    log("torch", torch.__version__, "transformers", transformers.__version__)
    os.makedirs(args.out, exist_ok=True)
    gen = torch.Generator().manual_seed(SEED)
    base = transformers.Qwen3ForCausalLM(transformers.Qwen3Config(**CFG)).eval()
    mo.randomize(base, gen)
    mo.round_params_to_bf16(base)
    mo.save_bf16(base, os.path.join(args.out, "_bf16"))
    prompts = mo.make_prompts(CFG["vocab_size"], gen)

    block_cfg = {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic", "weight_block_size": [128, 128]}
    out = fixture("qwen3-fp8-block-tiny", args.out, prompts, block_quantize, BlockEmuLinear, block_cfg,
                  ".weight_scale_inv")
    failed = 0
    try:  # transformers' reading of the layout: dequantized weights must equal w8 * S
        from transformers import FineGrainedFP8Config
        hf = transformers.AutoModelForCausalLM.from_pretrained(
            out, quantization_config=FineGrainedFP8Config(dequantize=True), dtype=torch.float32).eval()
        from safetensors.torch import load_file
        files = load_file(os.path.join(out, "model.safetensors"))
        worst = 0.0
        for li, layer in enumerate(hf.model.layers):
            for sub, n in LINEARS:
                p = f"model.layers.{li}.{sub}.{n}"
                w8, S = files[p + ".weight"], files[p + ".weight_scale_inv"]
                N, K = w8.shape
                full = S.repeat_interleave(BLOCK, 0)[:N].repeat_interleave(BLOCK, 1)[:, :K]
                want = w8.float() * full
                got = getattr(getattr(layer, sub), n).weight.detach().float()
                err = float((got - want).abs().max() / want.abs().max())
                if err >= 1e-2:
                    log(f"  {p}: transformers' weight {tuple(got.shape)} vs w8 * S: {err:.3g}; "
                        f"sample {got.flatten()[:3].tolist()} vs {want.flatten()[:3].tolist()}")
                worst = max(worst, err)
        log(f"  transformers dequantizes the block layout as w8 * S: max relative difference {worst:.3g}")
        assert worst < 1e-2, "transformers reads the scales differently"
    except Exception:  # noqa: BLE001 - the emulation fixture stands on its own
        failed += 1
        traceback.print_exc()

    ct_cfg = {"quant_method": "compressed-tensors", "format": "float-quantized",
              "config_groups": {"group_0": {
                  "targets": ["Linear"],
                  "weights": {"type": "float", "num_bits": 8, "strategy": "channel", "dynamic": False,
                              "symmetric": True},
                  "input_activations": {"type": "float", "num_bits": 8, "strategy": "token", "dynamic": True,
                                        "symmetric": True}}},
              "ignore": ["lm_head"]}
    fixture("qwen3-fp8-dynamic-tiny", args.out, prompts, channel_quantize, TokenEmuLinear, ct_cfg, ".weight_scale")
    log("failed parts:", failed)
    return failed


if __name__ == "__main__":
    sys.exit(main())
