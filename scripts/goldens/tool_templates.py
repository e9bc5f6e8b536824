#!/usr/bin/env python3
"""Chat templates with tools, rendered by transformers: goldens for Kestrel's template tests.

Usage:
    python3 scripts/goldens/tool_templates.py TEMPLATE_DIR

TEMPLATE_DIR holds the published chat templates of tool-calling models as `.jinja` files (the
names below; the model publishers' own templates, as shipped in their tokenizer_config.json).
Each is rendered with transformers' `render_jinja_template` (what `apply_chat_template` uses)
for a request that offers tools, and for a conversation that already holds an assistant tool
call and the tool's answer. Writes tests/fixtures/chat_templates/tools.json with the template
sources, the inputs and the rendered text.
"""
from __future__ import annotations

import sys
from pathlib import Path

from transformers.utils.chat_template_utils import render_jinja_template

from _common import FIXTURES, versions, write_json

# (fixture name, template file, bos, eos, tool-call id, content of the assistant turn that
# calls a tool). Mistral's template insists on 9-character alphanumeric ids; Qwen3's template
# needs string content in that turn (clients send "" or null).
TEMPLATES = [
    ("qwen2.5", "Qwen-Qwen2.5-7B-Instruct.jinja", "", "<|im_end|>", "call_8f3a1c", None),
    ("qwen3", "Qwen-Qwen3-0.6B.jinja", "", "<|im_end|>", "call_8f3a1c", ""),
    ("hermes3", "NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja", "<|begin_of_text|>",
     "<|eot_id|>", "call_8f3a1c", None),
    ("llama3.1", "meta-llama-Llama-3.1-8B-Instruct.jinja", "<|begin_of_text|>", "<|eot_id|>",
     "call_8f3a1c", None),
    ("mistral-nemo", "mistralai-Mistral-Nemo-Instruct-2407.jinja", "<s>", "</s>", "a1B2c3D4e",
     None),
]

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Current weather in a city",
            "parameters": {
                "type": "object",
                "properties": {
                    "city": {"type": "string", "description": "City name"},
                    "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                },
                "required": ["city"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "add",
            "description": "Add two integers",
            "parameters": {
                "type": "object",
                "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                "required": ["a", "b"],
            },
        },
    },
]


def conversations(call_id: str, call_content: str | None) -> list[tuple[str, list[dict]]]:
    """A first turn that offers tools, and one that carries a call and its result."""
    ask = [
        {"role": "system", "content": "You are a helpful assistant."},
        {"role": "user", "content": "What is the weather in Paris?"},
    ]
    call = {
        "id": call_id,
        "type": "function",
        "function": {"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}},
    }
    answered = ask + [
        {"role": "assistant", "content": call_content, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": call_id, "name": "get_weather",
         "content": "{\"temperature\": 21}"},
    ]
    return [("ask", ask), ("answered", answered)]


def main() -> None:
    if len(sys.argv) != 2:
        raise SystemExit(__doc__)
    src_dir = Path(sys.argv[1])
    out = []
    for name, file, bos, eos, call_id, call_content in TEMPLATES:
        source = (src_dir / file).read_text(encoding="utf-8")
        cases = []
        for case, messages in conversations(call_id, call_content):
            rendered = render_jinja_template(
                conversations=[messages],
                tools=TOOLS,
                chat_template=source,
                add_generation_prompt=True,
                bos_token=bos,
                eos_token=eos,
            )[0][0]
            cases.append({"name": case, "messages": messages, "rendered": rendered})
        out.append({"name": name, "template": source, "bos_token": bos, "eos_token": eos,
                    "cases": cases})
    write_json(FIXTURES / "chat_templates" / "tools.json",
               {"generator": "scripts/goldens/tool_templates.py", "versions": versions(),
                "tools": TOOLS, "templates": out})


if __name__ == "__main__":
    main()
