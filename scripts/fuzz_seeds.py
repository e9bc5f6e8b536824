#!/usr/bin/env python3
"""Writes the seed corpora of the fuzz targets under fuzz/seeds/<target>/.

Seeds are small valid inputs (plus a few near-misses) that give the fuzzer a head start:

* gguf: tiny GGUF files (v3 and v2) written with the `gguf` package: a llama-style config,
  a byte-level BPE (gpt2) or SentencePiece-style (llama) vocabulary, a chat template and a few
  tensors of several ggml types;
* safetensors: tiny files written with the `safetensors` package (F32, F16, BF16, I32, an
  unsupported dtype, metadata, an empty file);
* hf_config: every config.json under tests/fixtures plus a few hand-written variants;
* tokenizer_json: the fixtures' tokenizer.json and small WordPiece, WordLevel and Unigram
  tokenizers built with the `tokenizers` package;
* chat_template: the tool-calling templates of tests/fixtures/chat_templates/tools.json and the
  fixtures' templates, each preceded by a line of messages JSON;
* request: OpenAI completions and chat bodies and TGI generate bodies.

Run from the repository root: python3 scripts/fuzz_seeds.py
Requires: gguf, safetensors, numpy, tokenizers (pip install gguf safetensors numpy tokenizers).
"""
from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures"
OUT = ROOT / "fuzz" / "seeds"


def out_dir(target: str) -> Path:
    d = OUT / target
    if d.exists():
        shutil.rmtree(d)
    d.mkdir(parents=True)
    return d


# ---------------------------------------------------------------- gguf

def gguf_seeds() -> None:
    import gguf

    d = out_dir("gguf")
    byte_tokens = ["<unk>", "<s>", "</s>", "<|im_start|>", "<|im_end|>"] + [
        chr(c) for c in range(ord("a"), ord("z") + 1)
    ] + ["Ġ", "Ġa", "ab", "ba"]
    merges = ["Ġ a", "a b", "b a"]

    def write(name: str, *, version: int = 3, arch: str = "llama", tok: str = "gpt2",
              tensors: bool = True, template: bool = True) -> None:
        path = d / name
        w = gguf.GGUFWriter(str(path), arch)
        w.add_uint32(f"{arch}.context_length", 64)
        w.add_uint32(f"{arch}.embedding_length", 8)
        w.add_uint32(f"{arch}.block_count", 1)
        w.add_uint32(f"{arch}.feed_forward_length", 16)
        w.add_uint32(f"{arch}.attention.head_count", 2)
        w.add_uint32(f"{arch}.attention.head_count_kv", 1)
        w.add_float32(f"{arch}.attention.layer_norm_rms_epsilon", 1e-5)
        w.add_float32(f"{arch}.rope.freq_base", 10000.0)
        w.add_string("general.name", name)
        w.add_array("general.tags", ["tiny", "seed"])
        w.add_tokenizer_model(tok)
        if tok == "gpt2":
            w.add_tokenizer_pre("default")
            w.add_token_list(byte_tokens)
            w.add_token_merges(merges)
            w.add_token_types([3, 3, 3, 3, 3] + [1] * (len(byte_tokens) - 5))
        else:
            pieces = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)] + [
                "▁", "▁a", "ab"
            ]
            w.add_token_list(pieces)
            w.add_token_scores([0.0] * 3 + [0.0] * 256 + [-1.0, -2.0, -3.0])
            w.add_token_types([2, 3, 3] + [6] * 256 + [1, 1, 1])
        w.add_bos_token_id(1)
        w.add_eos_token_id(2)
        if template:
            w.add_chat_template(
                "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n"
                "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
            )
        if tensors:
            vocab = len(byte_tokens) if tok == "gpt2" else len(pieces)
            w.add_tensor("token_embd.weight", np.arange(vocab * 8, dtype=np.float32)
                         .reshape(vocab, 8) / 100)
            w.add_tensor("output_norm.weight", np.ones(8, dtype=np.float16))
            q = np.zeros((2, 32), dtype=np.float32)
            w.add_tensor("blk.0.attn_q.weight", gguf.quants.quantize(q, gguf.GGMLQuantizationType.Q8_0),
                         raw_dtype=gguf.GGMLQuantizationType.Q8_0)
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()
        if version == 2:
            raw = bytearray(path.read_bytes())
            raw[4:8] = (2).to_bytes(4, "little")
            path.write_bytes(bytes(raw))

    write("llama_gpt2_v3.gguf")
    write("llama_gpt2_v2.gguf", version=2)
    write("llama_spm.gguf", tok="llama")
    write("qwen2_no_tensors.gguf", arch="qwen2", tensors=False)
    write("llama_no_template.gguf", template=False)
    # The smallest well-formed file: magic, version, no tensors, no metadata.
    (d / "empty_v3.gguf").write_bytes(b"GGUF" + (3).to_bytes(4, "little") + bytes(16))


# ---------------------------------------------------------------- safetensors

def safetensors_seeds() -> None:
    from safetensors.numpy import save

    d = out_dir("safetensors")
    (d / "f32.safetensors").write_bytes(save({"w": np.arange(6, dtype=np.float32).reshape(2, 3)}))
    (d / "mixed.safetensors").write_bytes(save({
        "a.weight": np.ones((2, 2), dtype=np.float16),
        "b.qweight": np.arange(4, dtype=np.int32),
        "c.bias": np.zeros(3, dtype=np.float32),
    }, metadata={"format": "pt"}))
    (d / "u8_unsupported.safetensors").write_bytes(save({"x": np.arange(5, dtype=np.uint8)}))
    (d / "scalar.safetensors").write_bytes(save({"s": np.array(1.5, dtype=np.float32)}))
    (d / "empty.safetensors").write_bytes(save({}))
    # BF16 by hand (numpy has no bfloat16): header + 4 bytes.
    header = json.dumps({"h": {"dtype": "BF16", "shape": [2], "data_offsets": [0, 4]}}).encode()
    (d / "bf16.safetensors").write_bytes(len(header).to_bytes(8, "little") + header + bytes(4))


# ---------------------------------------------------------------- hf_config

def hf_config_seeds() -> None:
    d = out_dir("hf_config")
    for cfg in sorted(FIXTURES.glob("*/config.json")):
        shutil.copy(cfg, d / f"{cfg.parent.name}.json")
    base = json.loads((FIXTURES / "tiny-qwen2" / "config.json").read_text())
    variants = {
        "rope_llama3": {"rope_scaling": {"rope_type": "llama3", "factor": 8.0,
                                         "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                         "original_max_position_embeddings": 8192}},
        "rope_yarn": {"rope_scaling": {"type": "yarn", "factor": 4.0,
                                       "original_max_position_embeddings": 32}},
        "rope_parameters": {"rope_parameters": {"rope_theta": 1e6, "rope_type": "linear",
                                                "factor": 2.0}},
        "layer_types": {"layer_types": ["sliding_attention", "full_attention"],
                        "sliding_window": 16, "use_sliding_window": True},
        "zero_heads": {"num_attention_heads": 0},
    }
    for name, patch in variants.items():
        (d / f"qwen2_{name}.json").write_text(json.dumps({**base, **patch}))


# ---------------------------------------------------------------- tokenizer_json

def tokenizer_json_seeds() -> None:
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors

    d = out_dir("tokenizer_json")
    shutil.copy(FIXTURES / "tiny-qwen2" / "tokenizer.json", d / "tiny_bpe_bytelevel.json")
    wp = Tokenizer(models.WordPiece({"[UNK]": 0, "[CLS]": 1, "[SEP]": 2, "hello": 3, "##s": 4},
                                    unk_token="[UNK]"))
    wp.normalizer = normalizers.BertNormalizer()
    wp.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    wp.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", special_tokens=[("[CLS]", 1), ("[SEP]", 2)])
    wp.decoder = decoders.WordPiece()
    (d / "wordpiece.json").write_text(wp.to_str())
    wl = Tokenizer(models.WordLevel({"<unk>": 0, "hello": 1, "world": 2}, unk_token="<unk>"))
    wl.pre_tokenizer = pre_tokenizers.Whitespace()
    (d / "wordlevel.json").write_text(wl.to_str())
    ug = Tokenizer(models.Unigram([("<unk>", 0.0), ("▁", -1.0), ("▁hello", -2.0), ("h", -3.0),
                                   ("e", -3.0), ("l", -3.0), ("o", -3.0)], 0, byte_fallback=False))
    ug.normalizer = normalizers.Sequence([normalizers.NFKC(), normalizers.Replace(" ", "▁")])
    ug.pre_tokenizer = pre_tokenizers.Metaspace()
    ug.decoder = decoders.Metaspace()
    (d / "unigram.json").write_text(ug.to_str())
    spm = Tokenizer(models.BPE({"<unk>": 0, "<s>": 1, "▁": 2, "a": 3, "▁a": 4, "<0x41>": 5},
                               [("▁", "a")], unk_token="<unk>", byte_fallback=True))
    spm.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    spm.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(),
                                     decoders.Fuse(), decoders.Strip(" ", 1, 0)])
    (d / "bpe_byte_fallback.json").write_text(spm.to_str())


# ---------------------------------------------------------------- chat_template

CONVERSATION = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "Weather in Paris?"},
    {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_1", "type": "function",
         "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
    {"role": "tool", "content": "18C", "tool_call_id": "call_1", "name": "get_weather"},
    {"role": "user", "content": "Thanks"},
]


def chat_template_seeds() -> None:
    d = out_dir("chat_template")
    messages = json.dumps(CONVERSATION, ensure_ascii=False)
    simple = json.dumps([{"role": "user", "content": "Hi"}])
    templates = json.loads((FIXTURES / "chat_templates" / "tools.json").read_text())["templates"]
    for t in templates:
        (d / f"{t['name']}.txt").write_text(messages + "\n" + t["template"])
    seen = set()
    for cfg in sorted(FIXTURES.glob("*/tokenizer_config.json")):
        tpl = json.loads(cfg.read_text()).get("chat_template")
        if isinstance(tpl, str) and tpl not in seen:
            seen.add(tpl)
            (d / f"{cfg.parent.name}.txt").write_text(simple + "\n" + tpl)
    small = {
        "raise.txt": "{% if messages[0].role != 'user' %}{{ raise_exception('first must be user') }}{% endif %}",
        "tojson.txt": "{{ messages | tojson(indent=2) }}{{ tools | tojson }}",
        "strftime.txt": "{{ strftime_now('%Y-%m-%d') }}{{ bos_token }}{{ eos_token }}",
        "loop_controls.txt": "{% for m in messages %}{% if loop.index > 2 %}{% break %}{% endif %}"
                             "{{ m.content.strip().upper() }}{% endfor %}",
        "namespace.txt": "{% set ns = namespace(n=0) %}{% for m in messages %}{% set ns.n = ns.n + 1 %}"
                         "{% endfor %}{{ ns.n }}{{ messages[-1]['content'][:3] }}",
        "macro.txt": "{% macro r(m) %}[{{ m.role }}]{% endmacro %}{% for m in messages %}{{ r(m) }}{% endfor %}",
    }
    for name, tpl in small.items():
        (d / name).write_text(simple + "\n" + tpl)


# ---------------------------------------------------------------- request

def request_seeds() -> None:
    d = out_dir("request")
    tools = json.loads((FIXTURES / "chat_templates" / "tools.json").read_text())["tools"]
    bodies = {
        "chat_min": {"messages": [{"role": "user", "content": "Hi"}]},
        "chat_full": {"model": "fuzz", "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": [{"type": "text", "text": "Hi"}]}],
            "max_tokens": 8, "temperature": 0.7, "top_p": 0.9, "top_k": 20, "min_p": 0.05,
            "n": 2, "seed": 1, "stop": ["\n\n", "END"], "logprobs": True, "top_logprobs": 2,
            "presence_penalty": 0.1, "frequency_penalty": 0.1, "repetition_penalty": 1.1,
            "logit_bias": {"5": -100, "7": 2.5}, "stream": True,
            "stream_options": {"include_usage": True}},
        "chat_tools": {"messages": [{"role": "user", "content": "Weather?"}], "tools": tools,
                       "tool_choice": "auto"},
        "chat_tool_forced": {"messages": [{"role": "user", "content": "Weather?"}], "tools": tools,
                             "tool_choice": {"type": "function",
                                             "function": {"name": tools[0]["function"]["name"]}}},
        "chat_tool_turns": {"messages": CONVERSATION, "tools": tools},
        "chat_json_schema": {"messages": [{"role": "user", "content": "Hi"}],
                             "response_format": {"type": "json_schema", "json_schema": {
                                 "name": "x", "schema": {"type": "object", "properties": {
                                     "a": {"type": "integer"}}}}}},
        "chat_guided": {"messages": [{"role": "user", "content": "Hi"}],
                        "guided_choice": ["yes", "no"], "prompt_logprobs": 1},
        "completion_min": {"prompt": "Hello"},
        "completion_list": {"prompt": ["a", "b"], "max_tokens": 4, "best_of": 3, "n": 2,
                            "echo": True, "logprobs": 2},
        "completion_ids": {"prompt": [[1, 2, 3], [4]], "suffix": "", "stop_token_ids": [2],
                           "priority": 0, "ignore_eos": True, "min_tokens": 1},
        "tgi_min": {"inputs": "Hello"},
        "tgi_full": {"inputs": "Hello", "parameters": {
            "max_new_tokens": 5, "do_sample": True, "temperature": 0.5, "top_k": 10,
            "top_p": 0.9, "typical_p": 0.9, "repetition_penalty": 1.2, "seed": 3,
            "stop": ["x"], "details": True, "return_full_text": True, "decoder_input_details": False,
            "truncate": 10, "watermark": False, "top_n_tokens": 2,
            "grammar": {"type": "json", "value": {"type": "object"}}}, "stream": False},
        "unknown_fields": {"prompt": "x", "inputs": "y", "messages": [], "made_up": 1},
    }
    for name, body in bodies.items():
        (d / f"{name}.json").write_text(json.dumps(body, ensure_ascii=False))
    # Leading space: the first byte is even, so the lenient unknown-field policy applies.
    (d / "lenient_unknown.json").write_text(" " + json.dumps({"prompt": "x", "extra": True}))


def main() -> None:
    gguf_seeds()
    safetensors_seeds()
    hf_config_seeds()
    tokenizer_json_seeds()
    chat_template_seeds()
    request_seeds()
    for d in sorted(OUT.iterdir()):
        files = list(d.iterdir())
        print(f"{d.name}: {len(files)} files, {sum(f.stat().st_size for f in files)} bytes")


if __name__ == "__main__":
    main()
