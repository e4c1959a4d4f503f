#!/usr/bin/env python3
"""Writes a GGUF (v3) file of a Qwen3 Hugging Face checkpoint, Python stdlib only, for the
llama.cpp peer benchmark (bench/peers/llama_cpp.sh). llama.cpp's own converter needs numpy and
torch, which this project's machines do not have.

usage: safetensors_to_gguf.py CHECKPOINT_DIR OUT.gguf
       safetensors_to_gguf.py --dump FILE.gguf      (header, metadata and tensor list)

CHECKPOINT_DIR holds config.json and *.safetensors (BF16, F16 or F32 weights; FP8 checkpoints
are not converted), and optionally tokenizer.json (+ tokenizer_config.json). Matrices are
copied byte for byte in their own type (BF16 stays BF16), one-dimensional tensors (the norms)
are written as F32, as llama.cpp's converter writes them. Without tokenizer.json (the random
checkpoints of tools/make_random_checkpoint) a placeholder vocabulary of the right size is
written: the 256 byte-level symbols, config.json's bos/eos ids as control tokens and
"[PADn]" for the rest, enough for llama-bench and llama-batched-bench, which never tokenize
text.

The names and keys follow llama.cpp's GGUF spelling for the qwen3 architecture
(src/llama-arch.cpp, gguf-py/gguf/constants.py): token_embd, blk.N.attn_norm/attn_q/attn_k/
attn_v/attn_output/attn_q_norm/attn_k_norm/ffn_norm/ffn_gate/ffn_up/ffn_down, output_norm,
output (only when the embedding is not tied). GGUF lists a tensor's dimensions innermost first,
so an HF [out, in] matrix has ne = [in, out] and the same bytes.
"""
import glob
import json
import os
import re
import struct
import sys

GGUF_MAGIC = b"GGUF"
GGUF_VERSION = 3
ALIGNMENT = 32

# GGUF metadata value types
T_UINT8, T_INT8, T_UINT16, T_INT16, T_UINT32, T_INT32, T_FLOAT32, T_BOOL, T_STRING, T_ARRAY, \
    T_UINT64, T_INT64, T_FLOAT64 = range(13)
_SCALAR_FMT = {T_UINT8: "<B", T_INT8: "<b", T_UINT16: "<H", T_INT16: "<h", T_UINT32: "<I",
               T_INT32: "<i", T_FLOAT32: "<f", T_BOOL: "<?", T_UINT64: "<Q", T_INT64: "<q",
               T_FLOAT64: "<d"}

# ggml tensor types: (id, block elements, bytes per block)
GGML_F32, GGML_F16, GGML_Q8_0, GGML_BF16 = 0, 1, 8, 30
GGML_TYPES = {GGML_F32: ("F32", 1, 4), GGML_F16: ("F16", 1, 2), GGML_Q8_0: ("Q8_0", 32, 34),
              GGML_BF16: ("BF16", 1, 2), 2: ("Q4_0", 32, 18), 3: ("Q4_1", 32, 20),
              12: ("Q4_K", 256, 144), 14: ("Q6_K", 256, 210)}
LLAMA_FTYPE = {GGML_F32: 0, GGML_F16: 1, GGML_BF16: 32}  # general.file_type: ALL_F32, MOSTLY_F16/BF16

# GGUF token types (llama.cpp's llama_token_type)
TOK_NORMAL, TOK_CONTROL, TOK_USER_DEFINED, TOK_UNUSED = 1, 3, 4, 5

ST_DTYPES = {"BF16": (GGML_BF16, 2), "F16": (GGML_F16, 2), "F32": (GGML_F32, 4)}

LAYER_NAMES = {
    "input_layernorm": "attn_norm",
    "self_attn.q_proj": "attn_q",
    "self_attn.k_proj": "attn_k",
    "self_attn.v_proj": "attn_v",
    "self_attn.o_proj": "attn_output",
    "self_attn.q_norm": "attn_q_norm",
    "self_attn.k_norm": "attn_k_norm",
    "post_attention_layernorm": "ffn_norm",
    "mlp.gate_proj": "ffn_gate",
    "mlp.up_proj": "ffn_up",
    "mlp.down_proj": "ffn_down",
}


def gguf_name(hf_name, tied):
    """The GGUF tensor name of an HF Qwen3 tensor name; None for a tensor llama.cpp does not
    take (a tied lm_head)."""
    if hf_name == "model.embed_tokens.weight":
        return "token_embd.weight"
    if hf_name == "model.norm.weight":
        return "output_norm.weight"
    if hf_name == "lm_head.weight":
        return None if tied else "output.weight"
    m = re.fullmatch(r"model\.layers\.(\d+)\.(.+)\.(weight|bias)", hf_name)
    if m and m.group(2) in LAYER_NAMES:
        return f"blk.{m.group(1)}.{LAYER_NAMES[m.group(2)]}.{m.group(3)}"
    raise ValueError(f"no GGUF name for tensor {hf_name!r} (not a Qwen3 checkpoint?)")


def read_safetensors_header(path):
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
    header.pop("__metadata__", None)
    return 8 + n, header


# ---------------------------------------------------------------- tokenizer


def bytes_to_unicode():
    """GPT-2's byte-level alphabet: the printable bytes stand for themselves, the rest are
    shifted above U+0100 (the alphabet every byte-level BPE vocabulary starts from)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return [chr(c) for _, c in sorted(zip(bs, cs))]


def vocab_from_tokenizer(tok_path, vocab_size):
    tok = json.load(open(tok_path, encoding="utf-8"))
    model = tok["model"]
    if model.get("type") != "BPE":
        raise ValueError(f"{tok_path}: model type {model.get('type')!r}, expected BPE")
    by_id = {i: t for t, i in model["vocab"].items()}
    special = {}
    for a in tok.get("added_tokens", []):
        by_id[a["id"]] = a["content"]
        special[a["id"]] = a.get("special", False)
    if max(by_id) >= vocab_size:
        raise ValueError(f"token id {max(by_id)} >= vocab_size {vocab_size}")
    tokens, types = [], []
    for i in range(vocab_size):
        if i not in by_id:
            tokens.append(f"[PAD{i}]")
            types.append(TOK_UNUSED)
        else:
            tokens.append(by_id[i])
            types.append(TOK_NORMAL if i not in special else
                         TOK_CONTROL if special[i] else TOK_USER_DEFINED)
    merges = [m if isinstance(m, str) else " ".join(m) for m in model.get("merges", [])]
    ids = {t: i for i, t in by_id.items()}
    return tokens, types, merges, ids


def placeholder_vocab(vocab_size, named):
    """named: {id: text} for the special tokens config.json names."""
    alphabet = bytes_to_unicode()
    tokens, types = [], []
    for i in range(vocab_size):
        if i in named:
            tokens.append(named[i])
            types.append(TOK_CONTROL)
        elif i < 256:
            tokens.append(alphabet[i])
            types.append(TOK_NORMAL)
        else:
            tokens.append(f"[PAD{i}]")
            types.append(TOK_UNUSED)
    return tokens, types, []


# ---------------------------------------------------------------- writer


class GGUFWriter:
    def __init__(self):
        self.kv = []        # (key, type, value, element type for arrays)
        self.tensors = []   # (name, ne list, ggml type, nbytes, source)

    def add(self, key, vtype, value, etype=None):
        self.kv.append((key, vtype, value, etype))

    def add_tensor(self, name, ne, gtype, nbytes, source):
        self.tensors.append((name, ne, gtype, nbytes, source))

    @staticmethod
    def _str(s):
        b = s.encode("utf-8")
        return struct.pack("<Q", len(b)) + b

    def _value(self, vtype, value, etype):
        if vtype == T_STRING:
            return self._str(value)
        if vtype == T_ARRAY:
            out = [struct.pack("<IQ", etype, len(value))]
            if etype == T_STRING:
                out.extend(self._str(v) for v in value)
            else:
                out.append(struct.pack(f"<{len(value)}{_SCALAR_FMT[etype][1]}", *value))
            return b"".join(out)
        return struct.pack(_SCALAR_FMT[vtype], value)

    def write(self, path):
        head = [GGUF_MAGIC, struct.pack("<IQQ", GGUF_VERSION, len(self.tensors), len(self.kv))]
        for key, vtype, value, etype in self.kv:
            head += [self._str(key), struct.pack("<I", vtype), self._value(vtype, value, etype)]
        offset = 0
        for name, ne, gtype, nbytes, _ in self.tensors:
            head += [self._str(name), struct.pack(f"<I{len(ne)}Q", len(ne), *ne),
                     struct.pack("<IQ", gtype, offset)]
            offset += nbytes + (-nbytes % ALIGNMENT)
        head = b"".join(head)
        tmp = path + ".tmp"
        with open(tmp, "wb") as out:
            out.write(head + b"\0" * (-len(head) % ALIGNMENT))
            for _, _, _, nbytes, source in self.tensors:
                written = source(out)
                if written != nbytes:
                    raise RuntimeError(f"wrote {written} bytes, expected {nbytes}")
                out.write(b"\0" * (-nbytes % ALIGNMENT))
        os.replace(tmp, path)


def copy_range(path, start, n):
    def source(out):
        done = 0
        with open(path, "rb") as f:
            f.seek(start)
            while done < n:
                chunk = f.read(min(64 << 20, n - done))
                if not chunk:
                    raise RuntimeError(f"{path}: short read")
                out.write(chunk)
                done += len(chunk)
        return done
    return source


def to_f32(path, start, n, dtype):
    """A small tensor (a norm) widened to F32."""
    with open(path, "rb") as f:
        f.seek(start)
        raw = f.read(n)
    if dtype == "F32":
        data = raw
    elif dtype == "BF16":
        data = b"".join(b"\0\0" + raw[i:i + 2] for i in range(0, len(raw), 2))
    else:  # F16
        data = struct.pack(f"<{n // 2}f", *struct.unpack(f"<{n // 2}e", raw))
    return (lambda out: out.write(data)), len(data)


def convert(ckpt, out_path):
    cfg = json.load(open(os.path.join(ckpt, "config.json")))
    if cfg.get("model_type") != "qwen3":
        raise ValueError(f"model_type {cfg.get('model_type')!r}: only qwen3 is written")
    tied = bool(cfg.get("tie_word_embeddings", False))
    vocab_size = int(cfg["vocab_size"])
    heads = int(cfg["num_attention_heads"])
    head_dim = int(cfg.get("head_dim") or cfg["hidden_size"] // heads)
    rope = cfg.get("rope_parameters") or {}
    rope_theta = float(cfg.get("rope_theta", rope.get("rope_theta", 10000.0)))
    if (rope.get("rope_type") or "default") != "default" or cfg.get("rope_scaling"):
        raise ValueError("rope scaling is not written")

    files = sorted(glob.glob(os.path.join(ckpt, "*.safetensors")))
    if not files:
        raise ValueError(f"{ckpt}: no *.safetensors")
    entries = {}
    for path in files:
        base, header = read_safetensors_header(path)
        for name, info in header.items():
            entries[name] = (path, base, info)

    w = GGUFWriter()
    mat_types = set()
    layer_key = lambda n: [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", n)]
    for hf in sorted(entries, key=layer_key):
        name = gguf_name(hf, tied)
        if name is None:
            continue
        path, base, info = entries[hf]
        dtype, shape = info["dtype"], info["shape"]
        if dtype not in ST_DTYPES:
            raise ValueError(f"{hf}: dtype {dtype} (only BF16, F16 and F32 checkpoints are written)")
        b, e = info["data_offsets"]
        ne = list(reversed(shape))
        if len(shape) == 1:
            source, nbytes = to_f32(path, base + b, e - b, dtype)
            w.add_tensor(name, ne, GGML_F32, nbytes, source)
        else:
            gtype = ST_DTYPES[dtype][0]
            mat_types.add(gtype)
            w.add_tensor(name, ne, gtype, e - b, copy_range(path, base + b, e - b))
    if tied and "model.embed_tokens.weight" not in entries:
        raise ValueError("tied embeddings but no model.embed_tokens.weight")

    a = "qwen3"
    w.add("general.architecture", T_STRING, a)
    w.add("general.name", T_STRING, os.path.basename(os.path.abspath(ckpt)))
    w.add("general.file_type", T_UINT32, LLAMA_FTYPE[max(mat_types)] if len(mat_types) == 1 else 0)
    w.add("general.quantization_version", T_UINT32, 2)
    w.add(f"{a}.context_length", T_UINT32, int(cfg.get("max_position_embeddings", 4096)))
    w.add(f"{a}.embedding_length", T_UINT32, int(cfg["hidden_size"]))
    w.add(f"{a}.feed_forward_length", T_UINT32, int(cfg["intermediate_size"]))
    w.add(f"{a}.block_count", T_UINT32, int(cfg["num_hidden_layers"]))
    w.add(f"{a}.attention.head_count", T_UINT32, heads)
    w.add(f"{a}.attention.head_count_kv", T_UINT32, int(cfg.get("num_key_value_heads", heads)))
    w.add(f"{a}.attention.key_length", T_UINT32, head_dim)
    w.add(f"{a}.attention.value_length", T_UINT32, head_dim)
    w.add(f"{a}.rope.freq_base", T_FLOAT32, rope_theta)
    w.add(f"{a}.attention.layer_norm_rms_epsilon", T_FLOAT32, float(cfg.get("rms_norm_eps", 1e-6)))

    def first_id(v):
        return v[0] if isinstance(v, list) else v

    bos, eos, pad = (first_id(cfg.get(k)) for k in ("bos_token_id", "eos_token_id", "pad_token_id"))
    tok_path = os.path.join(ckpt, "tokenizer.json")
    if os.path.exists(tok_path):
        tokens, types, merges, ids = vocab_from_tokenizer(tok_path, vocab_size)
        tcfg_path = os.path.join(ckpt, "tokenizer_config.json")
        tcfg = json.load(open(tcfg_path)) if os.path.exists(tcfg_path) else {}
        def tok_id(v):
            v = v.get("content") if isinstance(v, dict) else v
            return ids.get(v) if v else None
        eos = tok_id(tcfg.get("eos_token")) if tok_id(tcfg.get("eos_token")) is not None else eos
        pad = tok_id(tcfg.get("pad_token")) if tok_id(tcfg.get("pad_token")) is not None else pad
        if bos is None:  # Qwen's tokenizers have no BOS; llama.cpp's files name <|endoftext|>
            bos = ids.get("<|endoftext|>", pad)
        if tcfg.get("chat_template"):
            w.add("tokenizer.chat_template", T_STRING, tcfg["chat_template"])
    else:
        named = {}
        for i, text in ((bos, "<|endoftext|>"), (eos, "<|im_end|>")):
            if i is not None and i not in named:
                named[i] = text
        tokens, types, merges = placeholder_vocab(vocab_size, named)
    w.add("tokenizer.ggml.model", T_STRING, "gpt2")
    w.add("tokenizer.ggml.pre", T_STRING, "qwen2")
    w.add("tokenizer.ggml.tokens", T_ARRAY, tokens, T_STRING)
    w.add("tokenizer.ggml.token_type", T_ARRAY, types, T_INT32)
    w.add("tokenizer.ggml.merges", T_ARRAY, merges, T_STRING)
    for key, v in (("bos", bos), ("eos", eos), ("padding", pad)):
        if v is not None:
            w.add(f"tokenizer.ggml.{key}_token_id", T_UINT32, int(v))
    w.add("tokenizer.ggml.add_bos_token", T_BOOL, False)
    w.write(out_path)
    return len(w.tensors)


# ---------------------------------------------------------------- reader (checks, --dump)


def read_gguf(path):
    """Parses a GGUF file's header: (version, {key: value}, [(name, ne, type, offset)],
    data_start). Checks that every tensor lies inside the file."""
    with open(path, "rb") as f:
        data = f.read(64 << 20)
        size = os.fstat(f.fileno()).st_size
    pos = 0

    def take(fmt):
        nonlocal pos
        v = struct.unpack_from(fmt, data, pos)
        pos += struct.calcsize(fmt)
        return v if len(v) > 1 else v[0]

    def string():
        nonlocal pos
        n = take("<Q")
        s = data[pos:pos + n].decode("utf-8")
        pos += n
        return s

    def value(vtype):
        if vtype == T_STRING:
            return string()
        if vtype == T_ARRAY:
            etype, n = take("<IQ")
            return [value(etype) for _ in range(n)]
        return take(_SCALAR_FMT[vtype])

    if data[:4] != GGUF_MAGIC:
        raise ValueError(f"{path}: not a GGUF file")
    pos = 4
    version, n_tensors, n_kv = take("<IQQ")
    kv = {}
    for _ in range(n_kv):
        key = string()
        kv[key] = value(take("<I"))
    tensors = []
    for _ in range(n_tensors):
        name = string()
        nd = take("<I")
        ne = [take("<Q") for _ in range(nd)]
        gtype, offset = take("<IQ")
        tensors.append((name, ne, gtype, offset))
    align = kv.get("general.alignment", ALIGNMENT)
    data_start = pos + (-pos % align)
    for name, ne, gtype, offset in tensors:
        tname, blk, bsize = GGML_TYPES[gtype]
        n = 1
        for d in ne:
            n *= d
        if offset % align or data_start + offset + n // blk * bsize > size:
            raise ValueError(f"{path}: tensor {name} ({tname} {ne}) at {offset} is out of bounds")
    return version, kv, tensors, data_start


def dump(path):
    version, kv, tensors, data_start = read_gguf(path)
    print(f"GGUF v{version}: {len(kv)} keys, {len(tensors)} tensors, data at {data_start}")
    for k, v in kv.items():
        if isinstance(v, list):
            v = f"[{len(v)} items] {v[:4]}..."
        print(f"  {k} = {v}")
    for name, ne, gtype, offset in tensors:
        print(f"  {name:32s} {GGML_TYPES[gtype][0]:5s} {ne}")


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--dump":
        dump(sys.argv[2])
    elif len(sys.argv) == 3:
        n = convert(sys.argv[1], sys.argv[2])
        print(f"wrote {sys.argv[2]}: {n} tensors")
    else:
        sys.exit(__doc__)
