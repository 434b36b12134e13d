#!/usr/bin/env python3
"""Corpora for bench/tokenizer_vs_hf.sh, one JSON string per line (one document each).

  tokenizer_corpora.py real GSM8K_JSONL PYLIB_DIR OUT    gsm8k question + "\\n" + worked answer per
                                                         record, then every UTF-8 *.py under PYLIB_DIR
  tokenizer_corpora.py stress OUT                        30,005 random documents stressing Unicode
                                                         handling (all whitespace kinds, marks, jamo,
                                                         emoji sequences, many scripts' digits, 'ſ,
                                                         special-token fragments, code points of
                                                         every plane, long runs)
  tokenizer_corpora.py exhaustive OUT                    every code point (surrogates excepted) in
                                                         contexts that expose how the pre-tokenizer
                                                         regex classifies it (letter, number, other)
                                                         and how NFC reorders/composes it
"""
import glob
import json
import os
import random
import sys


def write(docs, path):
    with open(path, "w", encoding="utf-8") as out:
        for d in docs:
            out.write(json.dumps(d, ensure_ascii=False) + "\n")
    size = sum(len(d.encode("utf-8")) for d in docs)
    print(f"{os.path.basename(path)}: {len(docs)} documents, {size / 1e6:.2f} MB")


def real(gsm8k, pylib, out_path):
    docs = []
    with open(gsm8k, encoding="utf-8") as f:
        for line in f:
            src = json.loads(line)["source"]
            docs.append(src["question"] + "\n" + src["answer"])
    for path in sorted(glob.glob(os.path.join(pylib, "**", "*.py"), recursive=True)):
        with open(path, "rb") as f:
            data = f.read()
        try:
            docs.append(data.decode("utf-8"))
        except UnicodeDecodeError:
            print(f"skipped (not UTF-8): {path}")
    write(docs, out_path)


POOLS = [
    " \t\n\r\x0b\x0c\x85\xa0\u1680\u2000\u2001\u200a\u2028\u2029\u202f\u205f\u3000\u180e\u200b\ufeff",
    "abcXYZ'sStTlLdDmMvVrReE \u017f\u212a",
    "0123456789\u0660\u0661\u0662\u0969\u096a\u09eb\u0bec\u0e57\u0ed8\u0f29\u00b2\u2153\u2167",
    "!@#$%^&*()[]{}<>?/\\|`~-_=+;:,.\"'",
    "\u00e9\u00e8\u00ea\u00eb\u00c9\u00e0\u00e7\u00f1\u00fc\u00f6\u00df\u00f8\u00e5\u00e6\u0153\u0133\u01c5\u01c8",
    "e\u0301a\u0300o\u0308\u0327\u0328\u030a\u0342\u0345\u05b0\u093c\u0d3b\u1df6",
    "\u4e2d\u6587\u5b57\u7b26\u6d4b\u8bd5\u4f60\u597d\u65e5\u672c\u8a9e\u3072\u3089\u304c\u306a\u30ab\u30bf\ud55c\uad6d\uc5b4",
    "\u1100\u1161\u11a8\u1102\u1162\u3099\u309a",
    "\U0001f600\U0001f44d\U0001f3fd\U0001f1eb\U0001f1f7\U0001f9d1\u200d\U0001f91d\u2764\ufe0f\u2728",
    "\u03b1\u03b2\u03b3\u0394\u03a9\u0430\u0431\u0432\u0416\u042f\u05d0\u05d1\u0639\u0631\u0628\u0647\u093f\u0928\u0e44\u0e17",
    "\x00\x01\x07\x1b\x7f",
]
SPECIALS = ["<|im_start|>", "<|im_end|>", "<think>", "</think>", "<|endoftext|>", "<tool_call>",
            "<|fim_pad|>", "<|im_", "|>"]


def random_code_point(rng):
    while True:
        cp = rng.choice([rng.randint(0x20, 0x7E), rng.randint(0xA0, 0x2FFF), rng.randint(0x3000, 0xFFFF),
                         rng.randint(0x10000, 0x10FFFF), rng.randint(0x1F300, 0x1FAFF)])
        if not 0xD800 <= cp < 0xE000:
            return chr(cp)


def stress(out_path):
    rng = random.Random(5)
    docs = []
    for _ in range(30000):
        parts = []
        for _ in range(rng.randint(1, 60)):
            r = rng.random()
            if r < 0.1:
                parts.append(random_code_point(rng))
            elif r < 0.15:
                parts.append(rng.choice(SPECIALS))
            else:
                parts.append(rng.choice(rng.choice(POOLS)) * rng.choice([1, 1, 1, 2, 3, 7]))
        docs.append("".join(parts))
    docs += [" " * 1000 + "x", "\n" * 500 + " " * 10 + "a", "1" * 3000, "a" * 5000 + "b",
             "\u3000" * 100 + "\u4e2d"]
    write(docs, out_path)


def exhaustive(out_path):
    docs, chunk = [], []
    for cp in range(0x110000):
        if 0xD800 <= cp < 0xE000:
            continue
        c = chr(cp)
        # "c's": letters/numbers keep "'s" whole, other characters take the quote. " c": a number
        # splits from the space. "\u0345c", "a\u0300c": canonical reordering and composition.
        chunk.append(f"{c}'s\n|A{c}B 7{c}8 {c} \u0345{c}a\u0300{c}\n")
        if len(chunk) == 400:
            docs.append("".join(chunk))
            chunk = []
    docs.append("".join(chunk))
    write(docs, out_path)


if __name__ == "__main__":
    mode = sys.argv[1] if len(sys.argv) > 1 else ""
    if mode == "real" and len(sys.argv) == 5:
        real(*sys.argv[2:5])
    elif mode in ("stress", "exhaustive") and len(sys.argv) == 3:
        globals()[mode](sys.argv[2])
    else:
        sys.exit(__doc__)
