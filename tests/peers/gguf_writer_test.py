#!/usr/bin/env python3
"""bench/peers/safetensors_to_gguf.py on the default model (models/default/bf16), read back
with the module's own stdlib GGUF reader: the header, the qwen3 metadata, the tensor list and
shapes (innermost dimension first), a BF16 matrix byte for byte and a norm widened to F32.
usage: gguf_writer_test.py SOURCE_DIR"""
import json
import os
import struct
import sys
import tempfile

root = sys.argv[1]
sys.path.insert(0, os.path.join(root, "bench", "peers"))
import safetensors_to_gguf as g  # noqa: E402

ckpt = os.path.join(root, "models", "default", "bf16")
cfg = json.load(open(os.path.join(ckpt, "config.json")))
failures = []


def check(ok, what):
    if not ok:
        failures.append(what)
        print(f"FAIL: {what}")


with tempfile.TemporaryDirectory() as tmp:
    out = os.path.join(tmp, "default.gguf")
    n = g.convert(ckpt, out)
    version, kv, tensors, data_start = g.read_gguf(out)
    L = cfg["num_hidden_layers"]
    check(version == 3, f"version {version}")
    check(n == len(tensors) == 2 + 11 * L, f"{len(tensors)} tensors, expected {2 + 11 * L} (tied: no output)")
    expect = {"general.architecture": "qwen3", "qwen3.block_count": L,
              "qwen3.embedding_length": cfg["hidden_size"],
              "qwen3.feed_forward_length": cfg["intermediate_size"],
              "qwen3.attention.head_count": cfg["num_attention_heads"],
              "qwen3.attention.head_count_kv": cfg["num_key_value_heads"],
              "qwen3.attention.key_length": cfg["head_dim"], "general.file_type": 32,
              "tokenizer.ggml.model": "gpt2", "tokenizer.ggml.pre": "qwen2",
              "tokenizer.ggml.eos_token_id": 4095, "tokenizer.ggml.add_bos_token": False}
    for k, v in expect.items():
        check(kv.get(k) == v, f"{k} = {kv.get(k)!r}, expected {v!r}")
    toks = kv["tokenizer.ggml.tokens"]
    check(len(toks) == cfg["vocab_size"] == len(kv["tokenizer.ggml.token_type"]), "vocabulary size")
    check(len(set(toks)) == len(toks), "tokens are unique")
    check(toks[4095] == "<|im_end|>" and kv["tokenizer.ggml.token_type"][4095] == g.TOK_CONTROL, "<|im_end|> control")
    check(kv["tokenizer.ggml.merges"][0] == "Ġ t", f"first merge {kv['tokenizer.ggml.merges'][0]!r}")
    info = {name: (ne, t, off) for name, ne, t, off in tensors}
    H, V, F = cfg["hidden_size"], cfg["vocab_size"], cfg["intermediate_size"]
    check(info.get("token_embd.weight", [None, None])[:2] == ([H, V], g.GGML_BF16), "token_embd [H, V] BF16")
    check(info.get("blk.0.ffn_down.weight", [None])[0] == [F, H], "ffn_down [F, H]")
    check(info.get("blk.7.attn_k_norm.weight", [None, None])[:2] == ([cfg["head_dim"]], g.GGML_F32), "k_norm F32")
    base, header = g.read_safetensors_header(os.path.join(ckpt, "model.safetensors"))
    st = open(os.path.join(ckpt, "model.safetensors"), "rb").read()
    gg = open(out, "rb").read()
    for hf, name, widen in (("model.layers.3.mlp.up_proj.weight", "blk.3.ffn_up.weight", False),
                            ("model.layers.5.input_layernorm.weight", "blk.5.attn_norm.weight", True)):
        b, e = header[hf]["data_offsets"]
        src = st[base + b:base + e]
        if widen:
            src = struct.pack(f"<{len(src) // 2}f", *[struct.unpack("<f", b"\0\0" + src[i:i + 2])[0]
                                                      for i in range(0, len(src), 2)])
        off = data_start + info[name][2]
        check(gg[off:off + len(src)] == src, f"{name}: bytes differ from {hf}")
print(f"{'FAILED' if failures else 'ok'}: {len(tensors)} tensors, {len(kv)} keys")
sys.exit(1 if failures else 0)
