#!/usr/bin/env python3
"""Quantize the default model to static per-tensor FP8 W8A8 in NVIDIA ModelOpt layout.

Usage: quantize_fp8.py --bf16 models/default/bf16 --heldout models/default/heldout.txt
                       --out models/default/fp8 [--log scales.json]

Every linear of the decoder layers becomes: weight F8_E4M3 [N,K],
weight_scale F32 scalar, input_scale F32 scalar. The embedding (tied to
lm_head, which is excluded) and the norms stay bfloat16.

- input_scale = amax(|x|) / 448, x the linear's input, recorded by forward
  hooks while the bf16 weights run in float32 over the held-out text in the
  windows reference.py scores (non-overlapping, --ctx tokens).
- weight_scale = amax(|W|) / 448 over the group: q/k/v share one scale and
  gate/up share one, as they read one input (their input scales are equal
  too), so merging them the way vLLM does (qkv_proj, gate_up_proj) loses
  nothing. The fp8 weight is (W * (1/weight_scale)) clamped to +-448 and
  rounded to nearest-even e4m3, all in float32.
"""
import argparse
import json
import os
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402


def calibrate(model, ids, window):
    """amax of |input| of every linear under model.layers, in float32."""
    import torch

    amax = {}
    hooks = []
    for name, mod in model.model.layers.named_modules():
        if isinstance(mod, torch.nn.Linear):
            def hook(m, inputs, output, name=name):
                a = inputs[0].detach().abs().max().float()
                amax[name] = torch.maximum(amax[name], a) if name in amax else a
            hooks.append(mod.register_forward_hook(hook))
    with torch.no_grad():
        for start, end in common.window_bounds(len(ids), window):
            model(input_ids=torch.tensor([ids[start:end]], dtype=torch.long))
    for h in hooks:
        h.remove()
    return amax


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--bf16", required=True)
    p.add_argument("--heldout", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--log", help="write the scales here (JSON)")
    p.add_argument("--ctx", type=int, help="calibration window (default: max_position_embeddings)")
    args = p.parse_args()

    import torch
    from safetensors.torch import load_file, save_file
    from tokenizers import Tokenizer
    from transformers import Qwen3ForCausalLM

    torch.manual_seed(0)
    with open(os.path.join(args.bf16, "config.json")) as f:
        config = json.load(f)
    window = args.ctx or config["max_position_embeddings"]
    tok = Tokenizer.from_file(os.path.join(args.bf16, "tokenizer.json"))
    with open(args.heldout, encoding="utf-8") as f:
        ids = tok.encode(f.read(), add_special_tokens=False).ids

    model = Qwen3ForCausalLM.from_pretrained(args.bf16, dtype=torch.float32).eval()
    amax = calibrate(model, ids, window)

    state = load_file(os.path.join(args.bf16, "model.safetensors"))
    fp8_max = torch.tensor(common.FP8_MAX, dtype=torch.float32)
    one = torch.tensor(1.0, dtype=torch.float32)
    scales = {}
    for i in range(config["num_hidden_layers"]):
        for group in common.FP8_GROUPS:
            names = [f"{i}.{g}" for g in group]
            w_amax = max(state[f"model.layers.{n}.weight"].float().abs().max() for n in names)
            x_amax = max(amax[n] for n in names)
            w_scale = w_amax / fp8_max
            x_scale = x_amax / fp8_max
            inv = one / w_scale
            for n in names:
                key = f"model.layers.{n}"
                w = state[f"{key}.weight"].float()
                state[f"{key}.weight"] = (w * inv).clamp(-common.FP8_MAX, common.FP8_MAX).to(torch.float8_e4m3fn)
                state[f"{key}.weight_scale"] = w_scale.clone().reshape(())
                state[f"{key}.input_scale"] = x_scale.clone().reshape(())
                scales[key] = {"weight_scale": float(w_scale), "input_scale": float(x_scale),
                               "input_amax_own": float(amax[n])}

    os.makedirs(args.out, exist_ok=True)
    save_file({k: v.contiguous() for k, v in state.items()}, os.path.join(args.out, "model.safetensors"),
              metadata={"format": "pt"})
    config["quantization_config"] = {"quant_method": "modelopt", "quant_algo": "FP8", "exclude_modules": ["lm_head"]}
    common.write_json(os.path.join(args.out, "config.json"), config)
    common.write_json(os.path.join(args.out, "hf_quant_config.json"), {
        "producer": {"name": "vtllm tools/default_model/quantize_fp8.py", "version": "1"},
        "quantization": {"quant_algo": "FP8", "kv_cache_quant_algo": None, "exclude_modules": ["lm_head"]},
    })
    for name in ("tokenizer.json", "tokenizer_config.json", "generation_config.json"):
        shutil.copyfile(os.path.join(args.bf16, name), os.path.join(args.out, name))
    if args.log:
        common.write_json(args.log, {"calibration_tokens": len(ids), "window": window, "scales": scales})
    print(f"wrote {args.out}: {len(scales)} FP8 linears, calibrated on {len(ids)} tokens", flush=True)


if __name__ == "__main__":
    main()
