#!/usr/bin/env python3
"""chat_template_hf_check.py — on the GPU machine (which has transformers): renders every case of
tests/tokenizer/data/chat_cases.jsonl with transformers' own apply_chat_template on the Qwen3 tokenizer
(tools passed as the case's dicts, in their key order) and compares the text with the case's, which the C++
renderer reproduces byte for byte (chat_template_test.cpp). gen_chat_cases.py made the cases with jinja2 and a
copy of transformers' tojson filter; this checks that copy against transformers itself.

Usage: python3 scripts/gpu/chat_template_hf_check.py TOKENIZER_DIR [CASES.jsonl]
Exits 1 on any difference (printed with the case's name)."""
import json
import os
import sys

from transformers import AutoTokenizer

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_CASES = os.path.join(HERE, "..", "..", "tests", "tokenizer", "data", "chat_cases.jsonl")


def main():
    tokenizer = AutoTokenizer.from_pretrained(sys.argv[1])
    cases_path = sys.argv[2] if len(sys.argv) > 2 else DEFAULT_CASES
    total = with_tools = differ = 0
    with open(cases_path, encoding="utf-8") as f:
        for line in f:
            case = json.loads(line)  # dicts keep the file's key order
            kwargs = {"add_generation_prompt": case["add_generation_prompt"], "tokenize": False}
            if case["enable_thinking"] is not None:
                kwargs["enable_thinking"] = case["enable_thinking"]
            if "tools" in case:
                kwargs["tools"] = case["tools"]
                with_tools += 1
            text = tokenizer.apply_chat_template(case["messages"], **kwargs)
            total += 1
            if text != case["text"]:
                differ += 1
                print(f"DIFFERS: {case['name']} agp={case['add_generation_prompt']} "
                      f"thinking={case['enable_thinking']}\n  transformers: {text!r}\n  case:         {case['text']!r}")
    import transformers
    print(f"transformers {transformers.__version__}: {total} cases ({with_tools} with tools), {differ} differ")
    sys.exit(1 if differ else 0)


if __name__ == "__main__":
    main()
