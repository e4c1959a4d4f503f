#!/usr/bin/env python3
"""Reference numbers for the default model, computed by PyTorch in float32 on the CPU.

Usage: reference.py --bf16 models/default/bf16 --fp8 models/default/fp8
                    --heldout models/default/heldout.txt
                    --out tests/fixtures/default_model/reference.json

For the bf16 checkpoint (weights widened to float32 by
from_pretrained(dtype=float32)) and for an FP8 emulation of the fp8
checkpoint (each quantized linear: x*(1/input_scale) -> clamp +-448 ->
float8_e4m3fn -> float32 GEMM with the fp8 weights -> *(input_scale*weight_scale)):
- the held-out perplexity: heldout.txt read whole as UTF-8, tokenized without
  special tokens, cut into non-overlapping windows of max_position_embeddings
  tokens (the last one shorter), each window a sequence of its own from
  position 0, scored from its second token; perplexity = exp(sum NLL / scored);
- the 24-token greedy continuation of "The jury said" (tokenized without
  special tokens), recomputed from scratch at each step, with the top-1/top-2
  logit margin at each step.
"""
import argparse
import hashlib
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
import torch  # noqa: E402


class EmulatedFp8Linear(torch.nn.Module):
    """Stands in for torch.nn.Linear: static per-tensor FP8 W8A8 in float32."""

    def __init__(self, weight_fp8, weight_scale, input_scale):
        super().__init__()
        self.w = weight_fp8.to(torch.float32)
        self.inv = torch.tensor(1.0, dtype=torch.float32) / input_scale.float()
        self.out_scale = input_scale.float() * weight_scale.float()

    def forward(self, x):
        xq = (x * self.inv).clamp(-common.FP8_MAX, common.FP8_MAX).to(torch.float8_e4m3fn).to(torch.float32)
        return (xq @ self.w.t()) * self.out_scale


def load_bf16_as_f32(path):
    from transformers import Qwen3ForCausalLM

    return Qwen3ForCausalLM.from_pretrained(path, dtype=torch.float32).eval()


def load_fp8_emulation(bf16_path, fp8_path):
    """The float32 model with every quantized linear replaced by its emulation;
    the embedding and norms come from the fp8 checkpoint (bf16 there too)."""
    from safetensors.torch import load_file

    model = load_bf16_as_f32(bf16_path)
    state = load_file(os.path.join(fp8_path, "model.safetensors"))
    plain = {k: v.float() for k, v in state.items() if v.dtype == torch.bfloat16}
    missing, unexpected = model.load_state_dict(plain, strict=False)
    if unexpected:
        raise SystemExit(f"unexpected tensors {unexpected}")
    n = 0
    for i, layer in enumerate(model.model.layers):
        for group in common.FP8_GROUPS:
            for g in group:
                parent_name, child = g.split(".")
                key = f"model.layers.{i}.{g}"
                emu = EmulatedFp8Linear(state[f"{key}.weight"], state[f"{key}.weight_scale"],
                                        state[f"{key}.input_scale"])
                setattr(getattr(layer, parent_name), child, emu)
                n += 1
    return model, n


def greedy(model, prompt_ids, n, tok):
    ids = list(prompt_ids)
    steps = []
    with torch.no_grad():
        for _ in range(n):
            logits = model(input_ids=torch.tensor([ids], dtype=torch.long)).logits[0, -1].float()
            top = torch.topk(logits, 2)
            t = int(top.indices[0])
            steps.append({"token": t, "piece": tok.decode([t], skip_special_tokens=False),
                          "margin": float(top.values[0] - top.values[1]), "second": int(top.indices[1])})
            ids.append(t)
    out = [s["token"] for s in steps]
    return {"token_ids": out, "text": tok.decode(out, skip_special_tokens=False),
            "min_margin": min(s["margin"] for s in steps), "steps": steps}


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--bf16", required=True)
    p.add_argument("--fp8", required=True)
    p.add_argument("--heldout", required=True)
    p.add_argument("--out", required=True)
    args = p.parse_args()

    import tokenizers
    import transformers

    torch.manual_seed(0)
    torch.set_num_threads(max(1, os.cpu_count() or 1))
    with open(os.path.join(args.bf16, "config.json")) as f:
        window = json.load(f)["max_position_embeddings"]
    tok = tokenizers.Tokenizer.from_file(os.path.join(args.bf16, "tokenizer.json"))
    with open(args.heldout, "rb") as f:
        raw = f.read()
    ids = tok.encode(raw.decode("utf-8"), add_special_tokens=False).ids
    prompt = tok.encode(common.GREEDY_PROMPT, add_special_tokens=False).ids
    eos = [tok.token_to_id(common.IM_END), tok.token_to_id(common.ENDOFTEXT)]

    ref = {
        "produced_by": "tools/default_model/reference.py",
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__,
                     "tokenizers": tokenizers.__version__},
        "compute": "PyTorch float32 on CPU; no KV cache (each step and window recomputed from position 0)",
        "heldout": {"file": "models/default/heldout.txt", "bytes": len(raw),
                    "sha256": hashlib.sha256(raw).hexdigest(), "tokens": len(ids), "first_ids": ids[:16]},
        "windowing": (f"heldout.txt read whole as UTF-8, tokenized without special tokens; cut into "
                      f"non-overlapping windows of {window} tokens: window k = ids[{window}k : {window}(k+1)] "
                      f"(the last one shorter; one under 2 tokens dropped); each window is its own sequence "
                      f"from position 0 with nothing before it, scored from its second token (the first token "
                      f"is context only); perplexity = exp(sum of NLL / number of scored tokens)"),
        "window": window,
        "fp8_emulation": ("each quantized linear: xq = float8_e4m3fn(clamp(x * (1/input_scale), -448, 448)) "
                          "(1/input_scale formed in float32), y = (float32(xq) @ float32(weight_fp8)^T) * "
                          "(input_scale * weight_scale); embedding/lm_head and norms from the bf16 values, "
                          "everything else float32"),
        "greedy_prompt": common.GREEDY_PROMPT,
        "greedy_prompt_ids": prompt,
        "eos_token_ids": eos,
        "greedy_note": "greedy steps continue past an eos token; an engine that stops at eos matches up to it",
    }

    model = load_bf16_as_f32(args.bf16)
    ref["bf16"] = common.window_nll(model, ids, window, "cpu")
    ref["bf16"]["greedy"] = greedy(model, prompt, common.GREEDY_TOKENS, tok)
    print(f"bf16: ppl {ref['bf16']['perplexity']:.4f}  greedy {ref['bf16']['greedy']['text']!r}", flush=True)
    common.write_json(args.out, ref)

    model, n = load_fp8_emulation(args.bf16, args.fp8)
    ref["fp8"] = common.window_nll(model, ids, window, "cpu")
    ref["fp8"]["greedy"] = greedy(model, prompt, common.GREEDY_TOKENS, tok)
    ref["fp8"]["emulated_linears"] = n
    ref["fp8_over_bf16_perplexity"] = ref["fp8"]["perplexity"] / ref["bf16"]["perplexity"]
    print(f"fp8:  ppl {ref['fp8']['perplexity']:.4f}  greedy {ref['fp8']['greedy']['text']!r}", flush=True)
    common.write_json(args.out, ref)


if __name__ == "__main__":
    main()
