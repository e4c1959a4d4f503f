#!/usr/bin/env python3
"""Builds the tiny model fixtures under tests/fixtures/models/ and their Hugging Face references.

Run where PyTorch and transformers 5 are installed (the GPU device machine; everything
here runs on its CPU in float32, so no TF32 or GPU kernel choice enters the references):

    python3 tools/oracle/model_oracle.py OUT_DIR [--repo REPO_ROOT]

For each fixture OUT_DIR/<name>/ holds a checkpoint (config.json, generation_config.json,
model.safetensors) and `reference.json` + `refI.logits.f32`, in the format of
tests/fixtures/oracles/qwen3-tiny: per prompt (token ids) the float32 logits of every prompt
position [T, vocab], the greedy continuation, and the top-1/top-2 margin at each greedy step
(a margin under 1e-2 is a near-tie that a tiny numeric difference may flip).

Fixtures:
  llama-tiny        LlamaForCausalLM, GQA, llama3 rope scaling, bf16
  qwen2-tiny        Qwen2ForCausalLM, q/k/v bias, tied embeddings, bf16
  qwen3-mqa-tiny    Qwen3ForCausalLM, one KV head (MQA), q/k norms, bf16
  llama-ct-fp8      LlamaForCausalLM in compressed-tensors static per-tensor FP8 W8A8
                    (scales of shape [1], lm_head ignored)
  qwen3-tiny-fp8-merged   references only, for tests/fixtures/oracles/qwen3-tiny/fp8_modelopt

References are float32 forwards (eager attention) of the checkpoint as transformers reloads
it (weights bf16 -> f32; the RoPE inverse frequencies stay f32, as from_pretrained keeps
them). FP8 references emulate the W8A8 linear in float32/float64:
  x * (1/input_scale) -> clamp(+-448) -> float8_e4m3fn (RNE); a float64 GEMM of the fp8
  values; * (input_scale * weight_scale) in float32; + bias.
Two FP8 emulations are written: `reference.json` with q/k/v and gate/up merged the way vLLM
merges them (one input scale = the shards' max; each shard's weight dequantized in f32 with
its scale and requantized with the max weight scale), which is the math of an engine that
merges, and `reference_per_projection.json` with each projection's own scales.
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
import transformers
from safetensors.torch import load_file, save_file

FP8 = torch.float8_e4m3fn
GREEDY_STEPS = 20
PROMPT_LENS = [1, 7, 23, 61]


def log(*a):
    print(*a, flush=True)


# ---------------------------------------------------------------------------------------
# Random weights that make the logits informative: unit-scale activations, logits of a few
# units (so near-ties are rare), non-trivial norm weights and biases.
def randomize(model, gen, lm_head_gain=2.0):
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.copy_(0.6 + 0.8 * torch.rand(p.shape, generator=gen))
            elif name.endswith("embed_tokens.weight"):
                p.copy_(torch.randn(p.shape, generator=gen))
            elif name.endswith("lm_head.weight"):
                p.copy_(torch.randn(p.shape, generator=gen) * (lm_head_gain / math.sqrt(p.shape[1])))
            elif name.endswith(".bias"):
                p.copy_(torch.randn(p.shape, generator=gen) * 0.2)
            elif p.ndim == 2:
                p.copy_(torch.randn(p.shape, generator=gen) / math.sqrt(p.shape[1]))
            else:
                raise RuntimeError("unexpected parameter " + name)
        if getattr(model.config, "tie_word_embeddings", False):
            # Tied: the embedding doubles as lm_head; keep logits of a few units.
            emb = model.get_input_embeddings().weight
            emb.mul_(lm_head_gain / math.sqrt(emb.shape[1]))


def round_params_to_bf16(model):
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(p.to(torch.bfloat16).to(torch.float32))


def mark_bf16(ckpt_dir):
    """save_pretrained writes the dtype of the in-memory (f32) parameters; the stored tensors
    are bf16, so config.json says so."""
    path = os.path.join(ckpt_dir, "config.json")
    with open(path) as f:
        config = json.load(f)
    config["dtype"] = "bfloat16"
    with open(path, "w") as f:
        json.dump(config, f, indent=2, sort_keys=True)
        f.write("\n")


def save_bf16(model, out_dir):
    """Saves the f32 model's (bf16-exact) parameters as a bf16 checkpoint; buffers untouched."""
    os.makedirs(out_dir, exist_ok=True)
    sd = {k: v.detach().to(torch.bfloat16).contiguous() for k, v in model.state_dict().items()
          if "rotary_emb" not in k}
    if getattr(model.config, "tie_word_embeddings", False):
        sd.pop("lm_head.weight", None)  # a tied checkpoint stores the embedding only
    model.save_pretrained(out_dir, state_dict=sd, safe_serialization=True)
    model.generation_config.save_pretrained(out_dir)
    mark_bf16(out_dir)


def reload_f32(cls, ckpt_dir):
    return cls.from_pretrained(ckpt_dir, dtype=torch.float32, attn_implementation="eager").eval()


# ---------------------------------------------------------------------------------------
@torch.no_grad()
def run_cases(model, prompts, out_dir, prefix="ref", ref_name="reference.json", extra=None):
    cases = []
    for i, prompt in enumerate(prompts):
        ids = torch.tensor([prompt], dtype=torch.long)
        logits = model(input_ids=ids).logits[0].float()
        fname = f"{prefix}{i}.logits.f32"
        with open(os.path.join(out_dir, fname), "wb") as f:  # little-endian f32 (x86)
            f.write(bytes(logits.contiguous().cpu().untyped_storage()))
        seq = list(prompt)
        greedy, margins = [], []
        for _ in range(GREEDY_STEPS):
            last = model(input_ids=torch.tensor([seq], dtype=torch.long)).logits[0, -1].float()
            top = torch.topk(last, 2)
            greedy.append(int(top.indices[0]))
            margins.append(float(top.values[0] - top.values[1]))
            seq.append(int(top.indices[0]))
        cases.append({"prompt": prompt, "greedy": greedy, "last_top1": greedy[0], "last_margin": margins[0],
                      "logits_file": fname, "logits_shape": list(logits.shape), "greedy_margins": margins})
    doc = {"cases": cases, "generator": "tools/oracle/model_oracle.py",
           "torch": torch.__version__, "transformers": transformers.__version__}
    doc.update(extra or {})
    with open(os.path.join(out_dir, ref_name), "w") as f:
        json.dump(doc, f, indent=1)
    log(f"  {ref_name}: min margin per case", [round(min(c['greedy_margins']), 4) for c in cases])


def make_prompts(vocab, gen):
    return [torch.randint(0, vocab, (n,), generator=gen).tolist() for n in PROMPT_LENS]


def check_llama3_inv_freq(model, cfg):
    """The model's inverse frequencies against HF's documented llama3 formula, so a config
    spelling the library ignored cannot pass silently."""
    rp = cfg["rope_parameters"]
    d = cfg["head_dim"]
    inv = 1.0 / (rp["rope_theta"] ** (torch.arange(0, d, 2, dtype=torch.int64).float() / d))
    low_w = rp["original_max_position_embeddings"] / rp["low_freq_factor"]
    high_w = rp["original_max_position_embeddings"] / rp["high_freq_factor"]
    wl = 2 * math.pi / inv
    scaled = torch.where(wl > low_w, inv / rp["factor"], inv)
    smooth = (rp["original_max_position_embeddings"] / wl - rp["low_freq_factor"]) / (
        rp["high_freq_factor"] - rp["low_freq_factor"])
    smoothed = (1 - smooth) * scaled / rp["factor"] + smooth * scaled
    medium = ~(wl < high_w) * ~(wl > low_w)
    expect = torch.where(medium, smoothed, scaled)
    got = model.model.rotary_emb.inv_freq.float()
    assert got.dtype == torch.float32
    assert torch.allclose(got, expect, rtol=1e-6, atol=0), (got, expect)
    assert (got != inv).any(), "llama3 scaling had no effect"


# ---------------------------------------------------------------------------------------
def bf16_fixture(name, cls, cfg_cls, cfg, seed, out_root, post=None):
    log(f"== {name}")
    out = os.path.join(out_root, name)
    gen = torch.Generator().manual_seed(seed)
    config = cfg_cls(**cfg)
    model = cls(config).eval()
    randomize(model, gen)
    round_params_to_bf16(model)
    save_bf16(model, out)
    ref = reload_f32(cls, out)
    if post:
        try:
            post(ref, cfg)
            log("  post-check passed")
        except Exception:  # noqa: BLE001 - keep the fixture, report loudly
            log("  POST-CHECK FAILED")
            traceback.print_exc()
    run_cases(ref, make_prompts(cfg["vocab_size"], gen), out,
              extra={"arch": cfg_cls.model_type, "dtype_ref": "float32 from bf16 weights"})
    return ref


# ---------------------------------------------------------------------------------------
# FP8 emulation.
def quantize(x, scale):
    inv = 1.0 / torch.tensor(scale, dtype=torch.float32)
    return (x.float() * inv).clamp(-448.0, 448.0).to(FP8)


class EmuLinear(nn.Module):
    def __init__(self, w8, weight_scale, input_scale, bias):
        super().__init__()
        self.w = w8.float()
        self.ws = float(weight_scale)
        self.s = float(input_scale)
        self.bias = None if bias is None else bias.detach().float()

    def forward(self, x):
        shape = x.shape
        xq = quantize(x.reshape(-1, shape[-1]), self.s).float()
        y = (xq.double() @ self.w.double().T).float()
        y = y * (torch.tensor(self.s, dtype=torch.float32) * torch.tensor(self.ws, dtype=torch.float32))
        if self.bias is not None:
            y = y + self.bias
        return y.reshape(*shape[:-1], -1)


GROUPS = [("self_attn", ["q_proj", "k_proj", "v_proj"]), ("mlp", ["gate_proj", "up_proj"])]
SINGLES = [("self_attn", "o_proj"), ("mlp", "down_proj")]


def requantize(w8, ws, new_ws):
    if ws == new_ws:
        return w8
    deq = w8.float() * torch.tensor(ws, dtype=torch.float32)
    return quantize(deq, new_ws)


def install_emulation(model, qw, merged):
    """qw[prefix] = (w8, weight_scale, input_scale) for each quantized linear."""
    for li, layer in enumerate(model.model.layers):
        for sub, names in GROUPS:
            mod = getattr(layer, sub)
            pre = [f"model.layers.{li}.{sub}.{n}" for n in names]
            s_max = max(qw[p][2] for p in pre)
            w_max = max(qw[p][1] for p in pre)
            for n, p in zip(names, pre):
                w8, ws, s = qw[p]
                if merged:
                    w8, ws, s = requantize(w8, ws, w_max), w_max, s_max
                setattr(mod, n, EmuLinear(w8, ws, s, getattr(mod, n).bias))
        for sub, n in SINGLES:
            mod = getattr(layer, sub)
            p = f"model.layers.{li}.{sub}.{n}"
            w8, ws, s = qw[p]
            setattr(mod, n, EmuLinear(w8, ws, s, getattr(mod, n).bias))


@torch.no_grad()
def calibrate_and_quantize(model, prompts):
    """weight_scale = amax|W|/448; input_scale = amax|x|/448 over the calibration prompts."""
    amax = {}
    hooks = []
    for name, mod in model.named_modules():
        if isinstance(mod, nn.Linear) and ".layers." in name:
            def hook(m, inp, _out, name=name):
                amax[name] = max(amax.get(name, 0.0), float(inp[0].abs().max()))
            hooks.append(mod.register_forward_hook(hook))
    for p in prompts:
        model(input_ids=torch.tensor([p], dtype=torch.long))
    for h in hooks:
        h.remove()
    qw = {}
    for name, mod in model.named_modules():
        if name in amax:
            ws = float(torch.tensor(float(mod.weight.abs().max()) / 448.0, dtype=torch.float32))
            s = float(torch.tensor(amax[name] / 448.0, dtype=torch.float32))
            qw[name] = (quantize(mod.weight, ws), ws, s)
    return qw


def ct_fp8_fixture(out_root, seed=7):
    name = "llama-ct-fp8"
    log(f"== {name}")
    out = os.path.join(out_root, name)
    tmp = os.path.join(out_root, "_tmp_" + name)
    cfg = dict(vocab_size=384, hidden_size=128, intermediate_size=320, num_hidden_layers=2, num_attention_heads=4,
               num_key_value_heads=4, head_dim=32, max_position_embeddings=256, rms_norm_eps=1e-5,
               rope_parameters={"rope_type": "default", "rope_theta": 10000.0}, tie_word_embeddings=False,
               attention_bias=False, bos_token_id=None, eos_token_id=None, pad_token_id=None)
    gen = torch.Generator().manual_seed(seed)
    model = transformers.LlamaForCausalLM(transformers.LlamaConfig(**cfg)).eval()
    randomize(model, gen)
    round_params_to_bf16(model)
    save_bf16(model, tmp)
    ref = reload_f32(transformers.LlamaForCausalLM, tmp)
    calib = [torch.randint(0, cfg["vocab_size"], (48,), generator=gen).tolist() for _ in range(4)]
    qw = calibrate_and_quantize(ref, calib)
    # The checkpoint: bf16 for everything but the layers' linears; fp8 weights with [1] scales.
    os.makedirs(out, exist_ok=True)
    sd = load_file(os.path.join(tmp, "model.safetensors"))
    for p, (w8, ws, s) in qw.items():
        sd[p + ".weight"] = w8.contiguous()
        sd[p + ".weight_scale"] = torch.tensor([ws], dtype=torch.float32)
        sd[p + ".input_scale"] = torch.tensor([s], dtype=torch.float32)
    save_file(sd, os.path.join(out, "model.safetensors"), metadata={"format": "pt"})
    with open(os.path.join(tmp, "config.json")) as f:
        config = json.load(f)
    scheme = {"num_bits": 8, "type": "float", "strategy": "tensor", "dynamic": False, "symmetric": True,
              "group_size": None, "block_structure": None, "observer": "minmax"}
    config["quantization_config"] = {
        "quant_method": "compressed-tensors", "format": "float-quantized", "quantization_status": "compressed",
        "config_groups": {"group_0": {"targets": ["Linear"], "weights": scheme, "input_activations": scheme,
                                      "output_activations": None}},
        "ignore": ["lm_head"], "kv_cache_scheme": None}
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(config, f, indent=2, sort_keys=True)
        f.write("\n")
    shutil.copy(os.path.join(tmp, "generation_config.json"), out)
    prompts = make_prompts(cfg["vocab_size"], gen)
    extra = {"arch": "llama", "quant": "compressed-tensors fp8 static per-tensor"}
    emu = reload_f32(transformers.LlamaForCausalLM, tmp)
    install_emulation(emu, qw, merged=True)
    run_cases(emu, prompts, out, extra=dict(extra, emulation="merged q/k/v and gate/up as vLLM (max scales)"))
    emu = reload_f32(transformers.LlamaForCausalLM, tmp)
    install_emulation(emu, qw, merged=False)
    run_cases(emu, prompts, out, prefix="pp", ref_name="reference_per_projection.json",
              extra=dict(extra, emulation="per-projection scales"))
    shutil.rmtree(tmp)


def qwen3_tiny_fp8_merged(out_root, repo):
    name = "qwen3-tiny-fp8-merged"
    log(f"== {name}")
    src = os.path.join(repo, "tests/fixtures/oracles/qwen3-tiny")
    out = os.path.join(out_root, name)
    os.makedirs(out, exist_ok=True)
    model = reload_f32(transformers.Qwen3ForCausalLM, os.path.join(src, "bf16"))
    fp8 = load_file(os.path.join(src, "fp8_modelopt/model.safetensors"))
    # Non-linear tensors of the fp8 checkpoint (bf16) into the model.
    rest = {k: v.float() for k, v in fp8.items() if not k.endswith(("_scale",)) and v.dtype != FP8}
    missing = model.load_state_dict(rest, strict=False)
    log("  non-linear tensors loaded; missing:", len(missing.missing_keys))
    qw = {}
    for k, v in fp8.items():
        if k.endswith(".weight") and v.dtype == FP8:
            p = k[: -len(".weight")]
            qw[p] = (v, float(fp8[p + ".weight_scale"].float().reshape(-1)[0]),
                     float(fp8[p + ".input_scale"].float().reshape(-1)[0]))
    install_emulation(model, qw, merged=True)
    with open(os.path.join(src, "fp8_modelopt_ref/reference.json")) as f:
        prompts = [c["prompt"] for c in json.load(f)["cases"]]
    run_cases(model, prompts, out, extra={"arch": "qwen3", "quant": "modelopt",
                                          "checkpoint": "tests/fixtures/oracles/qwen3-tiny/fp8_modelopt",
                                          "emulation": "merged q/k/v and gate/up as vLLM (max scales)"})


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--repo", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
    args = ap.parse_args()
    torch.set_num_threads(max(1, min(16, os.cpu_count() or 1)))
    log("torch", torch.__version__, "transformers", transformers.__version__)
    os.makedirs(args.out, exist_ok=True)
    jobs = []
    jobs.append(lambda: bf16_fixture(
        "llama-tiny", transformers.LlamaForCausalLM, transformers.LlamaConfig,
        dict(vocab_size=448, hidden_size=128, intermediate_size=256, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, head_dim=32, max_position_embeddings=512, rms_norm_eps=1e-5,
             rope_parameters={"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0,
                              "high_freq_factor": 4.0, "original_max_position_embeddings": 64},
             tie_word_embeddings=False, attention_bias=False, bos_token_id=1, eos_token_id=2, pad_token_id=None),
        seed=11, out_root=args.out, post=check_llama3_inv_freq))
    jobs.append(lambda: bf16_fixture(
        "qwen2-tiny", transformers.Qwen2ForCausalLM, transformers.Qwen2Config,
        dict(vocab_size=320, hidden_size=96, intermediate_size=224, num_hidden_layers=2, num_attention_heads=6,
             num_key_value_heads=2, max_position_embeddings=256, rms_norm_eps=1e-6,
             rope_parameters={"rope_type": "default", "rope_theta": 1000000.0}, tie_word_embeddings=True,
             bos_token_id=None, eos_token_id=None, pad_token_id=None),
        seed=12, out_root=args.out))
    jobs.append(lambda: bf16_fixture(
        "qwen3-mqa-tiny", transformers.Qwen3ForCausalLM, transformers.Qwen3Config,
        dict(vocab_size=384, hidden_size=64, intermediate_size=192, num_hidden_layers=3, num_attention_heads=4,
             num_key_value_heads=1, head_dim=32, max_position_embeddings=256, rms_norm_eps=1e-6,
             rope_parameters={"rope_type": "default", "rope_theta": 1000000.0}, tie_word_embeddings=False,
             attention_bias=False, bos_token_id=None, eos_token_id=None, pad_token_id=None),
        seed=13, out_root=args.out))
    jobs.append(lambda: ct_fp8_fixture(args.out))
    jobs.append(lambda: qwen3_tiny_fp8_merged(args.out, args.repo))
    failed = 0
    for job in jobs:
        try:
            job()
        except Exception:  # noqa: BLE001 - report every fixture, keep going
            failed += 1
            traceback.print_exc()
            sys.stdout.flush()
    log("failed fixtures:", failed)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
