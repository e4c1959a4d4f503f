"""Names and helpers shared by train.py, quantize_fp8.py and reference.py.

Only the standard library at import time: torch is imported inside the
functions that need it, so the data helpers can be tried without it.
"""
import json
import math
import os

# Special tokens, appended after the 4093 learned byte-level BPE tokens, in
# Qwen's order: <|endoftext|> separates documents, <|im_start|>/<|im_end|>
# frame ChatML turns.
ENDOFTEXT = "<|endoftext|>"
IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
SPECIAL_TOKENS = [ENDOFTEXT, IM_START, IM_END]
VOCAB_SIZE = 4096

# Qwen2/Qwen3's pre-tokenizer split: contractions, letter runs with one
# leading non-letter, single digits, punctuation runs, newlines, spaces.
QWEN_SPLIT_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)

# ChatML as Qwen writes it, without tools or a default system message.
CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}"
    "{{- '<|im_start|>assistant\\n' }}"
    "{%- endif %}"
)

# The linears quantized to FP8, by the name under model.layers.N; each group
# reads one input, so its members share one input scale and one weight scale
# (a vLLM-style merge into qkv_proj / gate_up_proj is then lossless).
FP8_GROUPS = [
    ["self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"],
    ["self_attn.o_proj"],
    ["mlp.gate_proj", "mlp.up_proj"],
    ["mlp.down_proj"],
]
FP8_MAX = 448.0

GREEDY_PROMPT = "The jury said"
GREEDY_TOKENS = 24


def read_documents(path):
    """Documents of a prepare_corpus.py split: paragraphs one a line, a blank
    line between documents."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    return [d.strip("\n") for d in text.split("\n\n") if d.strip()]


def chatml(turns):
    """The text the chat template renders for [(user, assistant), ...]."""
    out = []
    for user, assistant in turns:
        out.append(f"{IM_START}user\n{user}{IM_END}\n")
        out.append(f"{IM_START}assistant\n{assistant}{IM_END}\n")
    return "".join(out)


def window_bounds(n_tokens, window):
    """Non-overlapping windows [start, end) of at most `window` tokens; a last
    window shorter than 2 tokens is dropped (it has nothing to score)."""
    out = []
    for start in range(0, n_tokens, window):
        end = min(start + window, n_tokens)
        if end - start >= 2:
            out.append((start, end))
    return out


def window_nll(model, ids, window, device):
    """Summed negative log-likelihood (float64) and scored-token count of each
    window: every window is its own sequence from position 0, scored from its
    second token on."""
    import torch

    per_window = []
    with torch.no_grad():
        for start, end in window_bounds(len(ids), window):
            x = torch.tensor([ids[start:end]], dtype=torch.long, device=device)
            logits = model(input_ids=x).logits[0].float()
            logp = torch.log_softmax(logits[:-1], dim=-1)
            nll = -logp.gather(1, x[0, 1:, None]).squeeze(1)
            per_window.append({"start": start, "end": end, "nll_sum": float(nll.double().sum()), "scored": end - start - 1})
    total = sum(w["nll_sum"] for w in per_window)
    count = sum(w["scored"] for w in per_window)
    return {"perplexity": math.exp(total / count), "mean_nll": total / count, "scored_tokens": count,
            "windows": per_window}


def write_json(path, obj):
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        json.dump(obj, f, indent=1, ensure_ascii=False)
        f.write("\n")
