#!/usr/bin/env python3
"""Write tokenizer and chat-template goldens for Kestrel's Rust tests.

Usage:
    python3 scripts/gen_tokenizer_goldens.py [path/to/model.gguf] [out.json]

Defaults: the GGUF named by $KESTREL_DEFAULT_MODEL and
tests/fixtures/tokenizer/smollm2.json.

The reference is Hugging Face transformers' tokenizer loaded with
`AutoTokenizer.from_pretrained(dir, gguf_file=name)`, with one correction:
transformers' GGUF loader does not know the `smollm` pre-tokenizer named by
`tokenizer.ggml.pre` and falls back to the plain GPT-2 split. The model's own
`tokenizer.json` (and llama.cpp's `smollm` pre-tokenizer) first isolates every
digit and then applies the GPT-2 byte-level split, so the script installs that
pre-tokenizer before encoding. The uncorrected ids are kept as `hf_gguf_ids`
so that the difference stays visible in the fixture.
"""

import hashlib
import json
import os
import sys

import gguf
from tokenizers import pre_tokenizers
from transformers import AutoTokenizer

CASES = [
    "Hello world",
    "Hello, world! How are you today?",
    " leading space",
    "  two leading spaces",
    "multiple    spaces   inside",
    "trailing spaces   ",
    "x =  5",
    "12345",
    "3.14159 and 1,000,000 and 2024-06-01",
    "mixed123abc456",
    "def f(x):\n\treturn x  +  1\n\n\nprint(f(2))\n",
    "tabs\t\tand\ttabs\t",
    "\n\n\n",
    "line one\r\nline two\r\n",
    "I love \U0001F980 and \U0001F389!",
    "\U0001F469\u200d\U0001F469\u200d\U0001F467\u200d\U0001F466 family",
    "\u5927\u6a21\u578b\u63a8\u7406\u4f18\u5316",
    "\u65e5\u672c\u8a9e\u306e\u30c6\u30ad\u30b9\u30c8\u3067\u3059\u3002",
    "\u00c7a va? Gr\u00f6\u00dfe na\u00efve caf\u00e9",
    "don't I'll we've they're",
    "<|im_start|>user\nhi<|im_end|>",
    "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n",
    "<|endoftext|>",
    "text<|im_end|>more text",
    "  <|im_start|>  spaced  <|im_end|>  ",
    "<not_special> <|im_start",
    "$$$ ... !!! ??? ---",
    "https://example.com/path?q=1&r=2#frag",
    "",
    "The quick brown fox jumps over the lazy dog. " * 3,
]

CHATS = [
    {
        "messages": [{"role": "user", "content": "Hi there!"}],
        "add_generation_prompt": True,
    },
    {
        "messages": [
            {"role": "system", "content": "You are terse."},
            {"role": "user", "content": "What is 2+2?"},
            {"role": "assistant", "content": "4"},
            {"role": "user", "content": "And 3+3?"},
        ],
        "add_generation_prompt": True,
    },
    {
        "messages": [
            {"role": "user", "content": "Write a haiku\nabout Rust."},
            {"role": "assistant", "content": "Borrow checker sighs"},
        ],
        "add_generation_prompt": False,
    },
]

# A Llama-2/Mistral-style template written for these tests: [INST] turns, an optional system
# prompt folded into the first user turn, and raise_exception on non-alternating roles.
INST_TEMPLATE = (
    "{% if messages[0]['role'] == 'system' %}"
    "{% set system = messages[0]['content'] %}{% set turns = messages[1:] %}"
    "{% else %}{% set system = none %}{% set turns = messages %}{% endif %}"
    "{{ bos_token }}"
    "{% for message in turns %}"
    "{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{ raise_exception('Roles must alternate user/assistant, starting with user.') }}"
    "{% endif %}"
    "{% if message['role'] == 'user' %}"
    "{% if loop.first and system is not none %}"
    "{{ '[INST] <<SYS>>\\n' + system + '\\n<</SYS>>\\n\\n' + message['content'].strip() + ' [/INST]' }}"
    "{% else %}{{ '[INST] ' + message['content'].strip() + ' [/INST]' }}{% endif %}"
    "{% else %}{{ ' ' + message['content'].strip() + eos_token }}{% endif %}"
    "{% endfor %}"
)

# Exercises what HF's environment offers: trim/lstrip blocks, loop controls, Python string and
# dict methods, and tojson with and without indent.
FEATURES_TEMPLATE = """{% for m in messages %}
{% if m.content.startswith('stop') %}{% break %}{% endif %}
  {{ m | tojson }}
{{ m.role.upper() }}: {{ m.content.strip().replace('x', 'y') }}|{{ m.content.split(' ') | length }}
{% endfor %}
{{ messages[0] | tojson(indent=2) }}
{% for k, v in messages[0].items() %}[{{ k }}={{ v }}]{% endfor %}
{% if add_generation_prompt %}GEN{% endif %}"""

TEMPLATE_CASES = [
    {
        "name": "inst",
        "template": INST_TEMPLATE,
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "  Hi!  "},
            {"role": "assistant", "content": "Hello."},
            {"role": "user", "content": "Bye"},
        ],
        "add_generation_prompt": False,
    },
    {
        "name": "inst_no_system",
        "template": INST_TEMPLATE,
        "messages": [{"role": "user", "content": "One"}],
        "add_generation_prompt": True,
    },
    {
        "name": "inst_bad_roles",
        "template": INST_TEMPLATE,
        "messages": [
            {"role": "user", "content": "a"},
            {"role": "user", "content": "b"},
        ],
        "add_generation_prompt": False,
    },
    {
        "name": "features",
        "template": FEATURES_TEMPLATE,
        "messages": [
            {"role": "user", "content": " fix the \"x\" — naïve 🦀 "},
            {"role": "assistant", "content": "x marks it"},
            {"role": "user", "content": "stop here"},
            {"role": "assistant", "content": "never shown"},
        ],
        "add_generation_prompt": True,
    },
]

SMOLLM_STYLE_PRE = {"smollm", "starcoder", "refact", "codeshell", "command-r", "exaone"}


def gguf_string(reader, key):
    field = reader.fields.get(key)
    if field is None:
        return None
    return bytes(field.parts[field.data[0]]).decode("utf-8")


def sha256_of(path):
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def load_reference(path):
    """The transformers tokenizer for `path`, plus the uncorrected copy."""
    directory, name = os.path.split(os.path.abspath(path))
    raw = AutoTokenizer.from_pretrained(directory, gguf_file=name)
    fixed = AutoTokenizer.from_pretrained(directory, gguf_file=name)
    pre = gguf_string(gguf.GGUFReader(path), "tokenizer.ggml.pre")
    if pre in SMOLLM_STYLE_PRE:
        fixed.backend_tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
            [
                pre_tokenizers.Digits(individual_digits=True),
                pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
            ]
        )
    return raw, fixed, pre


def encode_cases(raw, fixed):
    out = []
    for text in CASES:
        ids = fixed.encode(text, add_special_tokens=False)
        hf_ids = raw.encode(text, add_special_tokens=False)
        out.append(
            {
                "text": text,
                "ids": ids,
                "hf_gguf_ids": hf_ids,
                "decoded": fixed.decode(ids, skip_special_tokens=False),
                "decoded_skip_special": fixed.decode(ids, skip_special_tokens=True),
            }
        )
    return out


def chat_cases(fixed):
    out = []
    for chat in CHATS:
        rendered = fixed.apply_chat_template(
            chat["messages"],
            add_generation_prompt=chat["add_generation_prompt"],
            tokenize=False,
        )
        out.append(
            dict(chat, rendered=rendered, ids=fixed.encode(rendered, add_special_tokens=False))
        )
    return out


def template_cases(fixed):
    """Each extra template rendered by HF, or the message it raised."""
    out = []
    for case in TEMPLATE_CASES:
        result = dict(case)
        try:
            result["rendered"] = fixed.apply_chat_template(
                case["messages"],
                chat_template=case["template"],
                add_generation_prompt=case["add_generation_prompt"],
                tokenize=False,
            )
        except Exception as err:  # jinja2's TemplateError from raise_exception
            result["error"] = str(err)
        out.append(result)
    return out


def main():
    path = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("KESTREL_DEFAULT_MODEL")
    if not path:
        sys.exit("pass a GGUF path or set KESTREL_DEFAULT_MODEL")
    out_path = sys.argv[2] if len(sys.argv) > 2 else "tests/fixtures/tokenizer/smollm2.json"
    raw, fixed, pre = load_reference(path)
    fixture = {
        "model_file": os.path.basename(path),
        "model_sha256": sha256_of(path),
        "pre_tokenizer": pre,
        "bos_token": fixed.bos_token,
        "eos_token": fixed.eos_token,
        "vocab_size": len(fixed),
        "chat_template": fixed.chat_template,
        "cases": encode_cases(raw, fixed),
        "chats": chat_cases(fixed),
        "templates": template_cases(fixed),
    }
    os.makedirs(os.path.dirname(out_path), exist_ok=True)
    with open(out_path, "w", encoding="utf-8") as handle:
        json.dump(fixture, handle, ensure_ascii=False, indent=1)
        handle.write("\n")
    differing = sum(case["ids"] != case["hf_gguf_ids"] for case in fixture["cases"])
    print(f"wrote {out_path}: {len(CASES)} cases ({differing} differ from uncorrected transformers)")


if __name__ == "__main__":
    main()
