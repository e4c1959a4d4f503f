#!/usr/bin/env python3
"""Train vtllm's default model: a byte-level BPE tokenizer and a small
Qwen3ForCausalLM on the Brown Corpus text that prepare_corpus.py writes.

Usage: train.py --corpus DIR --out models/default/bf16 --log train_log.json

Writes into --out, in Hugging Face layout: tokenizer.json,
tokenizer_config.json (ChatML chat template), config.json,
model.safetensors (bfloat16), generation_config.json. Seeds are fixed; the
result repeats up to GPU non-determinism.

Training: documents (one corpus file each) and a share of short ChatML
conversations made from the same paragraphs are packed into one token stream
with <|endoftext|> after each; a step takes random windows of --ctx+1 tokens
from it. bf16 autocast over float32 master weights, AdamW, linear warm-up then
cosine decay. Residual dropout (on each attention and MLP output, through
forward hooks, so the saved model is plain Qwen3) fights over-fitting on a
corpus of about 1.4M tokens. Each run of --runs (dropout:steps) is evaluated
on val.txt every --eval-every steps; the checkpoint with the lowest val loss
over all runs is saved.
"""
import argparse
import json
import math
import os
import random
import re
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

SIZE_LIMIT = 25_000_000  # bytes, bf16 and fp8 folders together


def parse_args():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--corpus", required=True, help="folder with train.txt and val.txt")
    p.add_argument("--out", required=True, help="output model folder")
    p.add_argument("--log", required=True, help="training log (JSON)")
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--layers", type=int, default=8)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--kv-heads", type=int, default=2)
    p.add_argument("--head-dim", type=int, default=64)
    p.add_argument("--intermediate", type=int, default=768)
    p.add_argument("--ctx", type=int, default=512, help="training window = max_position_embeddings")
    p.add_argument("--rope-theta", type=float, default=10000.0)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--lr", type=float, default=2e-3)
    p.add_argument("--min-lr-ratio", type=float, default=0.1)
    p.add_argument("--warmup", type=int, default=200)
    p.add_argument("--weight-decay", type=float, default=0.1)
    p.add_argument("--runs", default="0.1:1000,0.2:2500,0.3:4000", help="dropout:steps, comma separated")
    p.add_argument("--eval-every", type=int, default=250)
    p.add_argument("--chat-share", type=float, default=0.07,
                   help="chance that a paragraph opens a ChatML conversation")
    p.add_argument("--budget-s", type=float, default=300.0, help="wall-clock limit for all runs together")
    p.add_argument("--device", default="cuda")
    return p.parse_args()


# ---------------------------------------------------------------- tokenizer

def train_tokenizer(docs, out_dir, max_length):
    """Byte-level BPE as Qwen2/Qwen3 build it: no normalizer, the Qwen split
    regex then ByteLevel without its own regex, a ByteLevel decoder; 4093
    learned tokens (256 bytes + merges), then the three special tokens."""
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(common.QWEN_SPLIT_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    n_learned = common.VOCAB_SIZE - len(common.SPECIAL_TOKENS)
    trainer = trainers.BpeTrainer(vocab_size=n_learned, min_frequency=2, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), special_tokens=[])
    tok.train_from_iterator(docs, trainer=trainer)
    if tok.get_vocab_size() != n_learned:
        raise SystemExit(f"BPE learned {tok.get_vocab_size()} tokens, wanted {n_learned}")
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in common.SPECIAL_TOKENS])
    ids = [tok.token_to_id(t) for t in common.SPECIAL_TOKENS]
    if ids != list(range(n_learned, common.VOCAB_SIZE)):
        raise SystemExit(f"special token ids {ids}")
    os.makedirs(out_dir, exist_ok=True)
    tok.save(os.path.join(out_dir, "tokenizer.json"))
    write_tokenizer_config(out_dir, ids, max_length)
    return tok


def write_tokenizer_config(out_dir, special_ids, max_length):
    added = {str(i): {"content": t, "lstrip": False, "normalized": False, "rstrip": False,
                      "single_word": False, "special": True}
             for i, t in zip(special_ids, common.SPECIAL_TOKENS)}
    common.write_json(os.path.join(out_dir, "tokenizer_config.json"), {
        "add_prefix_space": False,
        "added_tokens_decoder": added,
        "additional_special_tokens": [common.IM_START, common.IM_END],
        "bos_token": None,
        "chat_template": common.CHAT_TEMPLATE,
        "clean_up_tokenization_spaces": False,
        # <|im_end|> closes a chat turn; generation_config.json also stops on <|endoftext|>.
        "eos_token": common.IM_END,
        "errors": "replace",
        "model_max_length": max_length,
        "pad_token": common.ENDOFTEXT,
        "split_special_tokens": False,
        "tokenizer_class": "PreTrainedTokenizerFast",
        "unk_token": None,
    })


# --------------------------------------------------------------------- data

SENTENCE_END = re.compile(r'[.?!]"? (?=["A-Z])')
# Words whose period ends an abbreviation, not a sentence.
ABBREVIATIONS = {"Mr", "Mrs", "Ms", "Dr", "St", "Jr", "Sr", "Sen", "Rep", "Gov", "Gen", "Col", "Lt", "Capt",
                 "Sgt", "Rev", "Prof", "Mt", "Ft", "Co", "Corp", "Inc", "No", "Vol", "Jan", "Feb", "Aug",
                 "Sept", "Oct", "Nov", "Dec", "U.S", "Calif", "Mass", "Conn", "Ill", "Pa", "Va", "Wash"}


def split_paragraph(p):
    """(first half, rest) at the sentence boundary nearest the middle, or None
    for a paragraph of one sentence."""
    cuts = []
    for m in SENTENCE_END.finditer(p):
        before = p[:m.start() + 1].split()[-1].rstrip('.?!"').lstrip('"(')
        if p[m.start()] == "." and (before in ABBREVIATIONS or len(before) == 1):
            continue
        cuts.append(m.end())
    if not cuts:
        return None
    cut = min(cuts, key=lambda c: abs(c - len(p) / 2))
    return p[:cut].rstrip(), p[cut:].lstrip()


def make_conversations(docs, rng, share):
    """Short ChatML conversations: the user gives the first sentences of a
    paragraph, the assistant continues it; 1-3 turns from consecutive
    paragraphs of one document."""
    convs = []
    for doc in docs:
        paras = doc.split("\n")
        i = 0
        while i < len(paras):
            if rng.random() >= share:
                i += 1
                continue
            want = rng.choice([1, 1, 2, 3])
            turns = []
            while len(turns) < want and i < len(paras):
                s = split_paragraph(paras[i])
                i += 1
                if s:
                    turns.append(s)
            if turns:
                convs.append(common.chatml(turns))
    return convs


def build_stream(tok, texts, eot):
    """Token ids of the texts, each followed by <|endoftext|>."""
    stream = []
    for enc in tok.encode_batch(texts, add_special_tokens=False):
        stream.extend(enc.ids)
        stream.append(eot)
    return stream


# -------------------------------------------------------------------- model

def model_config(args, eot, im_end):
    from transformers import Qwen3Config

    return Qwen3Config(
        vocab_size=common.VOCAB_SIZE, hidden_size=args.hidden, intermediate_size=args.intermediate,
        num_hidden_layers=args.layers, num_attention_heads=args.heads, num_key_value_heads=args.kv_heads,
        head_dim=args.head_dim, max_position_embeddings=args.ctx, rms_norm_eps=1e-6,
        tie_word_embeddings=True, rope_parameters={"rope_type": "default", "rope_theta": args.rope_theta},
        bos_token_id=None, eos_token_id=im_end, pad_token_id=eot,
    )


def size_estimate(model, tokenizer_bytes):
    """Bytes on disk of the bf16 and fp8 folders: bf16 stores every parameter
    in 2 bytes (the tied lm_head once), fp8 stores the decoder linears in 1
    byte plus two f32 scalars each and the rest in 2; tokenizer files twice,
    64 KiB allowance per folder for JSON and safetensors headers."""
    total = sum(p.numel() for p in model.parameters())
    linears = [m for n, m in model.named_modules() if n.startswith("model.layers.") and n.count(".") == 4
               and hasattr(m, "weight") and m.weight.dim() == 2]
    lin = sum(m.weight.numel() for m in linears)
    bf16 = 2 * total
    fp8 = lin + 2 * (total - lin) + 8 * len(linears)
    return total, lin, bf16 + fp8 + 2 * tokenizer_bytes + 2 * 65536


def add_dropout_hooks(model, p):
    import torch.nn.functional as F

    def hook(module, inputs, output):
        if isinstance(output, tuple):
            return (F.dropout(output[0], p, module.training),) + tuple(output[1:])
        return F.dropout(output, p, module.training)

    return [m.register_forward_hook(hook) for layer in model.model.layers for m in (layer.self_attn, layer.mlp)]


def evaluate(model, val_windows, batch):
    import torch
    import torch.nn.functional as F

    model.eval()
    total, count = 0.0, 0
    with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16, enabled=val_windows.is_cuda):
        for i in range(0, val_windows.shape[0], batch):
            w = val_windows[i:i + batch]
            logits = model(input_ids=w[:, :-1]).logits.float()
            loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), w[:, 1:].reshape(-1), reduction="sum")
            total += float(loss)
            count += w[:, 1:].numel()
    model.train()
    return total / count


def train_run(args, cfg, dropout, steps, train_ids, val_windows, deadline, log):
    import torch
    import torch.nn.functional as F
    from transformers import Qwen3ForCausalLM

    torch.manual_seed(args.seed)
    model = Qwen3ForCausalLM(cfg).to(args.device)
    assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr(), "lm_head not tied"
    hooks = add_dropout_hooks(model, dropout)
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2 and "embed_tokens" not in n]
    no_decay = [p for n, p in model.named_parameters() if not (p.dim() >= 2 and "embed_tokens" not in n)]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": args.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.95), eps=1e-8, fused=args.device == "cuda")

    def lr_at(step):
        if step < args.warmup:
            return args.lr * (step + 1) / args.warmup
        t = (step - args.warmup) / max(1, steps - args.warmup)
        return args.lr * (args.min_lr_ratio + (1 - args.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * t)))

    gen = torch.Generator(device=args.device).manual_seed(args.seed + 1)
    offsets = torch.arange(args.ctx + 1, device=args.device)
    n = train_ids.numel() - (args.ctx + 1)
    best = {"val_loss": float("inf")}
    history = []
    loss_acc = torch.zeros((), device=args.device)
    acc_n = 0
    t0 = time.time()
    model.train()
    for step in range(steps):
        for g in opt.param_groups:
            g["lr"] = lr_at(step)
        starts = torch.randint(0, n, (args.batch,), device=args.device, generator=gen)
        batch = train_ids[starts[:, None] + offsets]
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=args.device == "cuda"):
            logits = model(input_ids=batch[:, :-1]).logits
        loss = F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), batch[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        loss_acc += loss.detach()
        acc_n += 1
        last = step == steps - 1 or time.time() > deadline
        if (step + 1) % args.eval_every == 0 or last:
            train_loss = float(loss_acc) / acc_n
            loss_acc.zero_()
            acc_n = 0
            val = evaluate(model, val_windows, args.batch)
            rec = {"step": step + 1, "train_loss": round(train_loss, 4), "val_loss": round(val, 4),
                   "val_ppl": round(math.exp(val), 2), "lr": lr_at(step), "elapsed_s": round(time.time() - t0, 1)}
            history.append(rec)
            print(f"  dropout {dropout} {json.dumps(rec)}", flush=True)
            if val < best["val_loss"]:
                best = {"val_loss": val, "step": step + 1,
                        "state": {k: v.detach().to("cpu", copy=True) for k, v in model.state_dict().items()}}
        if last:
            break
    for h in hooks:
        h.remove()
    log["runs"].append({"dropout": dropout, "steps_planned": steps, "steps_done": step + 1,
                        "wall_s": round(time.time() - t0, 1), "best_val_loss": best["val_loss"],
                        "best_step": best.get("step"), "history": history})
    return model, best


def main():
    args = parse_args()
    import torch

    t_start = time.time()
    rng = random.Random(args.seed)
    torch.backends.cuda.matmul.allow_tf32 = True
    log = {"args": vars(args), "runs": []}

    train_docs = common.read_documents(os.path.join(args.corpus, "train.txt"))
    val_docs = common.read_documents(os.path.join(args.corpus, "val.txt"))
    tok = train_tokenizer(train_docs, args.out, args.ctx)
    eot, im_end = tok.token_to_id(common.ENDOFTEXT), tok.token_to_id(common.IM_END)
    print(f"tokenizer: {tok.get_vocab_size()} tokens ({time.time() - t_start:.1f}s)", flush=True)

    convs = make_conversations(train_docs, rng, args.chat_share)
    seqs = train_docs + convs
    rng.shuffle(seqs)
    train_stream = build_stream(tok, seqs, eot)
    plain_tokens = len(build_stream(tok, train_docs, eot))
    val_stream = build_stream(tok, val_docs, eot)
    log["data"] = {"train_documents": len(train_docs), "chat_conversations": len(convs),
                   "train_tokens": len(train_stream), "train_plain_tokens": plain_tokens,
                   "val_tokens": len(val_stream),
                   "train_chars_per_token": round(sum(map(len, train_docs)) / plain_tokens, 3)}
    print("data:", json.dumps(log["data"]), flush=True)

    cfg = model_config(args, eot, im_end)
    train_ids = torch.tensor(train_stream, dtype=torch.long, device=args.device)
    w = args.ctx + 1
    n_val = len(val_stream) // w
    val_windows = torch.tensor(val_stream[:n_val * w], dtype=torch.long, device=args.device).view(n_val, w)

    from transformers import Qwen3ForCausalLM
    probe = Qwen3ForCausalLM(cfg)
    total, lin, est = size_estimate(probe, os.path.getsize(os.path.join(args.out, "tokenizer.json")))
    del probe
    log["parameters"] = total
    log["fp8_linear_parameters"] = lin
    log["size_estimate_bytes"] = est
    print(f"model: {total} parameters ({lin} in FP8 linears), bf16+fp8 estimate {est} bytes", flush=True)
    if est > SIZE_LIMIT:
        raise SystemExit(f"estimated size {est} over {SIZE_LIMIT}")

    deadline = t_start + args.budget_s
    best = {"val_loss": float("inf")}
    model = None
    for spec in args.runs.split(","):
        dropout, steps = float(spec.split(":")[0]), int(spec.split(":")[1])
        if time.time() > deadline:
            print(f"skipping run {spec}: over budget", flush=True)
            continue
        model, b = train_run(args, cfg, dropout, steps, train_ids, val_windows, deadline, log)
        if b["val_loss"] < best["val_loss"]:
            best = dict(b, dropout=dropout)
        common.write_json(args.log, {k: v for k, v in log.items()})

    model.load_state_dict(best["state"])
    log["chosen"] = {"dropout": best["dropout"], "step": best["step"], "val_loss": best["val_loss"],
                     "val_ppl": math.exp(best["val_loss"])}
    print("chosen:", json.dumps(log["chosen"]), flush=True)
    model = model.to("cpu", dtype=torch.bfloat16)
    model.eval()
    model.save_pretrained(args.out)
    common.write_json(os.path.join(args.out, "generation_config.json"), {
        "bos_token_id": None,
        "do_sample": True,
        "eos_token_id": [im_end, eot],
        "pad_token_id": eot,
        "temperature": 0.8,
        "top_p": 0.95,
    })
    log["wall_s"] = round(time.time() - t_start, 1)
    common.write_json(args.log, log)
    print(f"saved {args.out} ({log['wall_s']}s)", flush=True)


if __name__ == "__main__":
    main()
