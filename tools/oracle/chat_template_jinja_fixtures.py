#!/usr/bin/env python3
"""Renders the chat-template conversations of chat_conversations.py with plain jinja2, set up
as transformers sets it up for apply_chat_template (ImmutableSandboxedEnvironment with
trim_blocks, lstrip_blocks and loopcontrols; tojson = json.dumps(ensure_ascii=False, ...);
raise_exception; strftime_now; variables messages/tools/documents/add_generation_prompt plus
the special tokens and extra kwargs). Also renders small construct cases (jinja_constructs.py)
that the C++ interpreter tests compare with.

usage: chat_template_jinja_fixtures.py OUT_DIR NAME=TEMPLATE_SOURCE [NAME=...]
  TEMPLATE_SOURCE is a tokenizer_config.json (its chat_template and bos/eos tokens are used)
  or a .jinja file (bos "<s>", eos "</s>" unless NAME starts with "llama": Llama 3 tokens).
"""
import datetime
import json
import os
import sys

import jinja2
import jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from chat_conversations import CASES, FIXED_TIME  # noqa: E402
from jinja_constructs import CONSTRUCTS  # noqa: E402


def make_env():
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(format):
        return datetime.datetime.fromtimestamp(FIXED_TIME).strftime(format)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def token_text(v):
    if isinstance(v, dict):
        return v.get("content")
    return v


def load_source(name, path):
    if path.endswith(".json"):
        cfg = json.load(open(path, encoding="utf-8"))
        return cfg["chat_template"], token_text(cfg.get("bos_token")), token_text(cfg.get("eos_token"))
    src = open(path, encoding="utf-8").read()
    if name.startswith("llama"):
        return src, "<|begin_of_text|>", "<|eot_id|>"
    return src, "<s>", "</s>"


def render_case(template, case, bos, eos):
    ctx = {}
    if bos is not None:
        ctx["bos_token"] = bos
    if eos is not None:
        ctx["eos_token"] = eos
    ctx.update(case.get("extra", {}))
    try:
        return {"rendered": template.render(messages=case["messages"], tools=case.get("tools"), documents=None,
                                            add_generation_prompt=case["add_generation_prompt"], **ctx)}
    except jinja2.exceptions.TemplateError as e:
        return {"error": type(e).__name__, "message": str(e)}


def main():
    out_dir = sys.argv[1]
    env = make_env()
    os.makedirs(out_dir, exist_ok=True)
    for spec in sys.argv[2:]:
        name, path = spec.split("=", 1)
        source, bos, eos = load_source(name, path)
        template = env.from_string(source)
        cases = []
        for case in CASES:
            entry = {"name": case["name"], "messages": case["messages"], "add_generation_prompt": case["add_generation_prompt"],
                     "tools": case.get("tools"), "extra": case.get("extra", {}), "bos_token": bos, "eos_token": eos}
            entry.update(render_case(template, case, bos, eos))
            cases.append(entry)
        doc = {"template": name, "source": os.path.basename(path), "renderer": f"jinja2 {jinja2.__version__}",
               "fixed_time": FIXED_TIME, "cases": cases}
        with open(os.path.join(out_dir, f"jinja2_{name}.json"), "w", encoding="utf-8") as f:
            json.dump(doc, f, ensure_ascii=False, indent=1)
            f.write("\n")
    results = []
    for tpl, ctx in CONSTRUCTS:
        entry = {"template": tpl, "context": ctx}
        try:
            entry["rendered"] = env.from_string(tpl).render(**ctx)
        except Exception as e:  # syntax errors, undefined errors, type errors: the C++ side must fail too
            entry["error"] = type(e).__name__
            entry["message"] = str(e)
        results.append(entry)
    with open(os.path.join(out_dir, "jinja2_constructs.json"), "w", encoding="utf-8") as f:
        json.dump({"renderer": f"jinja2 {jinja2.__version__}", "fixed_time": FIXED_TIME, "cases": results}, f,
                  ensure_ascii=False, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
