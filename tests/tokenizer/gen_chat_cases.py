#!/usr/bin/env python3
"""Regenerates data/chat_cases.jsonl: Qwen3 chat-template renderings made by Python jinja2 with the
same environment transformers' apply_chat_template uses (sandboxed, trim_blocks, lstrip_blocks,
loopcontrols). The C++ renderer must reproduce every `text` byte for byte (chat_template_test.cpp).

Usage: python3 tests/tokenizer/gen_chat_cases.py [path/to/chat_template.jinja]
(default: ../shared/data/qwen3-tokenizer/chat_template.jinja relative to the repository root).
Needs jinja2 (Debian: python3-jinja2; 3.1.6 was used)."""
import json
import os
import sys

from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
DEFAULT_TEMPLATE = os.path.join(ROOT, "..", "shared", "data", "qwen3-tokenizer", "chat_template.jinja")


def U(c):
    return {"role": "user", "content": c}


def A(c, reasoning=None, with_reasoning=False):
    m = {"role": "assistant", "content": c}
    if with_reasoning:
        m["reasoning_content"] = reasoning
    return m


def S(c):
    return {"role": "system", "content": c}


CONVERSATIONS = {
    "user_only": [U("Hi")],
    "system_user": [S("You are terse."), U("2+2?")],
    "system_only": [S("Be nice.")],
    "empty_contents": [S(""), U(""), A("")],
    "unicode": [U("多轮对话 😀 naïve\n\tend"), A("好的 ✓")],
    "assistant_last_plain": [U("Hi"), A("Hello!")],
    "assistant_last_think": [U("Hi"), A("<think>\nhmm\n</think>\n\nHello!")],
    "assistant_think_then_user": [U("Hi"), A("<think>\nhmm\n</think>\n\nHello!"), U("Joke?")],
    "two_assistants_after_query": [U("Q"), A("<think>r1</think>a1"), A("a2")],
    "two_assistants_plain_then_think": [U("Q"), A("a1"), A("<think>\n\nr2\n\n</think>\n\n\na2\n")],
    "reasoning_field": [U("Q"), A("answer", "because\n", True)],
    "reasoning_field_empty_not_last": [U("Q"), A("a1", "", True), A("a2")],
    "reasoning_field_none": [U("Q"), A("<think>x</think>y", None, True)],
    "reasoning_field_overrides_think": [U("Q"), A("<think>ignored</think>shown", "used", True)],
    "multiple_think_blocks": [U("Q"), A("<think>a</think>mid<think>b</think>\n\nend")],
    "close_without_open": [U("Q"), A("pre\n</think>\npost")],
    "open_without_close": [U("Q"), A("<think>never closed")],
    "tool_response_user": [U("Q"), A("<think>t1</think>call"),
                           U("<tool_response>\n42\n</tool_response>"), A("<think>t2</think>done")],
    "system_in_middle": [U("a"), S("mid system"), U("b")],
    "assistant_first": [A("<think>x</think>I start"), U("ok")],
    "long_multiturn": [S("sys"), U("u1"), A("<think>\nr1\n</think>\n\na1"), U("u2"),
                       A("<think>\nr2\n</think>\n\na2"), U("u3"), A("<think>\nr3\n</think>\n\na3")],
    "newlines_everywhere": [U("\n\nq\n\n"), A("\n\n<think>\n\n\n</think>\n\n\n\nx\n\n")],
}


def main():
    path = sys.argv[1] if len(sys.argv) > 1 else DEFAULT_TEMPLATE
    with open(path, encoding="utf-8") as f:
        source = f.read()
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
    template = env.from_string(source)
    out_path = os.path.join(HERE, "data", "chat_cases.jsonl")
    count = 0
    with open(out_path, "w", encoding="utf-8") as out:
        for name, messages in CONVERSATIONS.items():
            for agp in (False, True):
                for thinking in (None, True, False):
                    kwargs = {"messages": messages, "add_generation_prompt": agp}
                    if thinking is not None:
                        kwargs["enable_thinking"] = thinking
                    text = template.render(**kwargs)
                    record = {"name": name, "messages": messages, "add_generation_prompt": agp,
                              "enable_thinking": thinking, "text": text}
                    out.write(json.dumps(record, ensure_ascii=False) + "\n")
                    count += 1
    print(f"wrote {count} cases to {out_path}")


if __name__ == "__main__":
    main()
