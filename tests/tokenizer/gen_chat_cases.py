#!/usr/bin/env python3
"""Regenerates data/chat_cases.jsonl: Qwen3 chat-template renderings made by Python jinja2 with the
same environment transformers' apply_chat_template uses (sandboxed, trim_blocks, lstrip_blocks,
loopcontrols, its tojson filter: json.dumps with ensure_ascii=False). Conversations with tools carry
a "tools" list (the key order of every object in a case is its JSON text's). The C++ renderer must
reproduce every `text` byte for byte (chat_template_test.cpp).

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


def T(c):
    return {"role": "tool", "tool_call_id": "call_1", "content": c}


def call(name, arguments, wrapped=True):
    f = {"name": name, "arguments": arguments}
    return {"id": "call_1", "type": "function", "function": f} if wrapped else f


def AC(c, *calls, reasoning=None):
    m = {"role": "assistant", "content": c, "tool_calls": list(calls)}
    if reasoning is not None:
        m["reasoning_content"] = reasoning
    return m


WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Current weather in a city, \"quoted\"\tand tabbed",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "description": "名前 ✓"},
        "unit": {"type": "string", "enum": ["c", "f"]}, "days": {"type": "integer", "minimum": 1,
                                                                 "maximum": 1e16, "default": 2.5e-05}},
        "required": ["city"], "additionalProperties": False}}}
CLOCK = {"type": "function", "function": {"name": "now", "parameters": {"type": "object", "properties": {},
                                                                          "x": [1.0, 100.0, 1e15, -0.5, None, True]}}}
TOOLS = [WEATHER, CLOCK]

TOOL_CONVERSATIONS = {
    "tools_user_only": [U("Weather in Paris?")],
    "tools_with_system": [S("You are terse."), U("Weather in Paris?")],
    "tools_call_and_result": [U("Weather in Paris?"), AC("", call("get_weather", {"unit": "c", "city": "Paris"})),
                              T('{"temp": 21}'), A("It is 21 C.")],
    "tools_call_string_arguments": [U("Q"), AC("Let me check.", call("get_weather", '{"city":"Oslo"}'))],
    "tools_two_calls_two_results": [S("sys"), U("Q"), AC("", call("get_weather", {"city": "A"}),
                                                          call("now", {}, wrapped=False)),
                                    T("r1"), T("r2"), U("thanks")],
    "tools_call_with_think": [U("Q"), AC("<think>\nplan\n</think>\n\n", call("now", {})), T("12:00")],
    "tools_call_reasoning_field": [U("Q"), AC("\n\n", call("now", {}), reasoning="why"), T("12:00"),
                                   A("<think>x</think>Noon.")],
    "tools_result_first": [T("orphan"), U("Q")],
    "tools_multi_step": [U("Q"), AC("", call("now", {})), T("1"), AC("again", call("now", {"tz": "UTC"})), T("2")],
}


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
    env.filters["tojson"] = lambda x, ensure_ascii=False, indent=None, separators=None, sort_keys=False: json.dumps(
        x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)
    template = env.from_string(source)
    out_path = os.path.join(HERE, "data", "chat_cases.jsonl")
    count = 0
    with open(out_path, "w", encoding="utf-8") as out:
        cases = [(name, messages, None) for name, messages in CONVERSATIONS.items()]
        cases += [(name, messages, TOOLS) for name, messages in TOOL_CONVERSATIONS.items()]
        for name, messages, tools in cases:
            for agp in (False, True):
                for thinking in (None, True, False):
                    kwargs = {"messages": messages, "add_generation_prompt": agp}
                    if thinking is not None:
                        kwargs["enable_thinking"] = thinking
                    if tools is not None:
                        kwargs["tools"] = tools
                    text = template.render(**kwargs)
                    record = {"name": name, "messages": messages, "add_generation_prompt": agp,
                              "enable_thinking": thinking, "text": text}
                    if tools is not None:
                        record["tools"] = tools
                    out.write(json.dumps(record, ensure_ascii=False) + "\n")
                    count += 1
    print(f"wrote {count} cases to {out_path}")


if __name__ == "__main__":
    main()
