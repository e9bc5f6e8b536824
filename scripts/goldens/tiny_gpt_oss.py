"""A tiny random-weight gpt-oss checkpoint (transformers' GptOssForCausalLM), its GGUF with MXFP4
experts written by llama.cpp's converter, and its golden outputs (transformers, float32).

  tests/fixtures/tiny-gpt-oss/     config.json, model.safetensors (bfloat16), tokenizer.json,
                                   tokenizer_config.json (the harmony chat template below)
  tests/fixtures/tiny-gpt-oss.gguf llama.cpp's convert_hf_to_gguf.py --outtype f32 run on the same
                                   checkpoint stored as the released gpt-oss checkpoints store their
                                   experts (MXFP4 `*_blocks` / `*_scales`, `quant_method: mxfp4`): the
                                   converter repacks those into ggml MXFP4 (type 39) tensors. Every
                                   expert weight is drawn on the MXFP4 grid (an E2M1 value times a
                                   power-of-two scale per block of 32 inputs), so the bfloat16 and the
                                   MXFP4 experts hold the same numbers; this script checks that by
                                   dequantizing the GGUF's expert tensors with gguf-py.
  tests/fixtures/tiny-gpt-oss-bf16.gguf  the converter run on the bfloat16 checkpoint itself
                                   (--outtype bf16): what it writes for experts that are not MXFP4
                                   (BF16 `ffn_*_exps`).
  tests/fixtures/goldens/tiny-gpt-oss.json

The model: hidden 64, 4 query heads of 16 sharing 2 KV heads, 2 layers (layer 0 a sliding window of
8, layer 1 full: `layer_types`), q/k/v/o biases, a learned attention sink per head, YaRN RoPE
(factor 4 over 256 original positions, 1024 in all; beta 32/1, truncate false), 4 experts of 32, top-2 (router
with bias: top-k of the logits, softmax over the chosen), gate/up interleaved in `gate_up_proj`,
clamped SwiGLU (limit 7, alpha 1.702; expert weights scaled so that some pre-activations pass the
limit), down projection with bias. Tokenizer: the tiny BPE tokenizer plus the harmony special
tokens (ids 384..390); EOS `<|return|>` and `<|call|>`.

Run: python3 scripts/goldens/tiny_gpt_oss.py   (LLAMA_CPP_CONVERTER as for tiny_qwen.py)
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import load_file, save_file
from transformers import GptOssConfig, GptOssForCausalLM, PreTrainedTokenizerFast

from _common import FIXTURES, versions, write_json
from _lm import prompt_record
from _tiny_hf import LM_HEAD_STD, N_NEW, NORM_JITTER, PROMPTS, WEIGHT_STD, init_weights, reference
from _tiny_tokenizer import SPECIALS, train_tokenizer
from tiny_qwen import CONVERT, DEFAULT_CONVERTER, load_f32

SEED = 4242
NAME = "tiny-gpt-oss"
HARMONY = ["<|start|>", "<|end|>", "<|message|>", "<|channel|>", "<|return|>", "<|call|>", "<|constrain|>"]
E2M1 = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0]
# Power-of-two block scales of the expert matrices (gate/up larger, so that some gate and up
# pre-activations pass the SwiGLU limit of 7).
GATE_UP_EXP, DOWN_EXP = -3, -4
SINK_STD = 1.0
# Router weights larger than the other matrices, so that the top-2 choices are rarely near-ties
# (a near-tie flips under the MXFP4 GGUF's 8-bit activations and moves that row's logits by O(1)).
ROUTER_STD = 0.6

CONFIG = dict(hidden_size=64, intermediate_size=32, head_dim=16, num_attention_heads=4,
              num_key_value_heads=2, num_hidden_layers=2, num_local_experts=4, num_experts_per_tok=2,
              max_position_embeddings=1024, rms_norm_eps=1e-5, sliding_window=8,
              layer_types=["sliding_attention", "full_attention"], attention_bias=True,
              swiglu_limit=7.0, tie_word_embeddings=False, initializer_range=WEIGHT_STD,
              rope_parameters={"rope_type": "yarn", "rope_theta": 150000.0, "factor": 4.0,
                               "beta_fast": 32.0, "beta_slow": 1.0, "truncate": False,
                               "original_max_position_embeddings": 256})

# The harmony format as gpt-oss's own template renders it, reduced to what Kestrel's routes send:
# the system header (identity, knowledge cutoff, reasoning effort, valid channels; no date line, so
# a render is reproducible), system/developer messages as the developer message's instructions,
# tools as a `functions` namespace (each parameter schema written as JSON), assistant reasoning
# (`thinking` or `reasoning_content`) on the analysis channel before tool calls or as the last turn,
# answers on the final channel, tool calls on commentary to `functions.NAME`, tool results from
# `functions.NAME` to the assistant; the generation prompt `<|start|>assistant`.
CHAT_TEMPLATE = (
    "{%- set ns = namespace(instructions='', last_tool='') -%}"
    "{%- for m in messages if m['role'] in ['system', 'developer'] -%}"
    "{%- set ns.instructions = ns.instructions + m['content'] -%}"
    "{%- endfor -%}"
    "<|start|>system<|message|>You are ChatGPT, a large language model trained by OpenAI.\n"
    "Knowledge cutoff: 2024-06\n\nReasoning: {{ reasoning_effort | default('medium') }}\n\n"
    "# Valid channels: analysis, commentary, final. Channel must be included for every message."
    "{%- if tools %}\nCalls to these tools must go to the commentary channel: 'functions'.{%- endif %}"
    "<|end|>"
    "{%- if ns.instructions or tools -%}"
    "<|start|>developer<|message|>"
    "{%- if ns.instructions %}# Instructions\n\n{{ ns.instructions }}{% endif -%}"
    "{%- if tools %}{% if ns.instructions %}\n\n{% endif %}# Tools\n\n## functions\n\nnamespace functions {\n"
    "{%- for t in tools %}{% set f = t['function'] if t['function'] is defined else t %}\n"
    "// {{ f['description'] | default('') }}\ntype {{ f['name'] }} = (_: {{ f['parameters'] | tojson }}) => any;\n"
    "{%- endfor %}\n} // namespace functions{% endif -%}"
    "<|end|>"
    "{%- endif -%}"
    "{%- for m in messages -%}"
    "{%- if m['role'] == 'user' -%}"
    "<|start|>user<|message|>{{ m['content'] }}<|end|>"
    "{%- elif m['role'] == 'assistant' -%}"
    "{%- set thinking = m['thinking'] if m['thinking'] is defined and m['thinking'] else "
    "(m['reasoning_content'] if m['reasoning_content'] is defined and m['reasoning_content'] else '') -%}"
    "{%- if m['tool_calls'] is defined and m['tool_calls'] -%}"
    "{%- if thinking %}<|start|>assistant<|channel|>analysis<|message|>{{ thinking }}<|end|>{% endif -%}"
    "{%- for c in m['tool_calls'] %}{% set f = c['function'] if c['function'] is defined else c %}"
    "{%- set ns.last_tool = f['name'] -%}"
    "<|start|>assistant to=functions.{{ f['name'] }}<|channel|>commentary json<|message|>"
    "{{ f['arguments'] if f['arguments'] is string else f['arguments'] | tojson }}<|call|>"
    "{%- endfor -%}"
    "{%- else -%}"
    "{%- if thinking and loop.last %}<|start|>assistant<|channel|>analysis<|message|>{{ thinking }}<|end|>{% endif -%}"
    "<|start|>assistant<|channel|>final<|message|>{{ m['content'] }}"
    "{{ '<|return|>' if loop.last else '<|end|>' }}"
    "{%- endif -%}"
    "{%- elif m['role'] == 'tool' -%}"
    "<|start|>functions.{{ m['name'] if m['name'] is defined and m['name'] else ns.last_tool }} to=assistant"
    "<|channel|>commentary<|message|>{{ m['content'] }}<|end|>"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt %}<|start|>assistant{% endif -%}"
)
CHAT_MESSAGES = [{"role": "user", "content": "What is the capital of France?"}]


def tokenizer() -> PreTrainedTokenizerFast:
    tok = train_tokenizer()
    tok.add_special_tokens(HARMONY)
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="<|return|>",
                                   unk_token="<unk>", pad_token="</s>",
                                   additional_special_tokens=SPECIALS[3:] + HARMONY)


def save_tokenizer(out: Path, fast: PreTrainedTokenizerFast) -> None:
    fast.save_pretrained(str(out))
    path = out / "tokenizer_config.json"
    cfg = json.loads(path.read_text())
    cfg.update(chat_template=CHAT_TEMPLATE, add_bos_token=True, tokenizer_class="PreTrainedTokenizerFast")
    write_json(path, cfg)
    for extra in ("chat_template.jinja", "special_tokens_map.json"):
        (out / extra).unlink(missing_ok=True)


def mxfp4_codes(gen: torch.Generator, shape: tuple[int, ...]) -> torch.Tensor:
    """Random E2M1 codes (0..15), `shape` = [..., rows, cols]."""
    return torch.randint(0, 16, shape, generator=gen, dtype=torch.uint8)


def decode(codes: torch.Tensor, exp: int) -> torch.Tensor:
    return torch.tensor(E2M1)[codes.long()] * (2.0 ** exp)


def pack_blocks(codes: torch.Tensor) -> torch.Tensor:
    """[E, rows, cols] codes -> the checkpoint's `_blocks` [E, rows, cols/32, 16]: element 2j in
    the low nibble of byte j, element 2j+1 in the high nibble."""
    e, r, c = codes.shape
    pairs = codes.reshape(e, r, c // 32, 16, 2)
    return pairs[..., 0] | (pairs[..., 1] << 4)


@torch.no_grad()
def build(vocab: int):
    cfg = GptOssConfig(vocab_size=vocab, bos_token_id=1, eos_token_id=[vocab - 3, vocab - 2],
                       pad_token_id=2, **CONFIG)
    model = GptOssForCausalLM(cfg)
    init_weights(model, SEED)
    gen = torch.Generator().manual_seed(SEED + 1)
    codes = {}
    for i, layer in enumerate(model.model.layers):
        layer.self_attn.sinks.copy_(SINK_STD * torch.randn(layer.self_attn.sinks.shape, generator=gen))
        layer.mlp.router.weight.mul_(ROUTER_STD / WEIGHT_STD)
        ex = layer.mlp.experts
        n, h, f = cfg.num_local_experts, cfg.hidden_size, cfg.intermediate_size
        gu = mxfp4_codes(gen, (n, 2 * f, h))  # [E, out = 2f interleaved gate/up, in = h]
        dn = mxfp4_codes(gen, (n, h, f))  # [E, out = h, in = f]
        ex.gate_up_proj.copy_(decode(gu, GATE_UP_EXP).transpose(1, 2))
        ex.down_proj.copy_(decode(dn, DOWN_EXP).transpose(1, 2))
        codes[i] = (gu, dn)
    return model.to(torch.bfloat16), codes


def save_checkpoint(model, fast, out: Path) -> None:
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    model.save_pretrained(str(out), safe_serialization=True)
    path = out / "config.json"
    write_json(path, dict(sorted(json.loads(path.read_text()).items())))
    save_tokenizer(out, fast)


def mxfp4_checkpoint(src: Path, codes: dict, dst: Path) -> None:
    """`src` with its expert matrices as MXFP4 blocks and scales, as released gpt-oss stores them."""
    shutil.copytree(src, dst)
    tensors = load_file(str(src / "model.safetensors"))
    for i, (gu, dn) in codes.items():
        stem = f"model.layers.{i}.mlp.experts"
        del tensors[f"{stem}.gate_up_proj"], tensors[f"{stem}.down_proj"]
        for name, c, exp in (("gate_up_proj", gu, GATE_UP_EXP), ("down_proj", dn, DOWN_EXP)):
            tensors[f"{stem}.{name}_blocks"] = pack_blocks(c).contiguous()
            tensors[f"{stem}.{name}_scales"] = torch.full(c.shape[:2] + (c.shape[2] // 32,), 127 + exp,
                                                          dtype=torch.uint8)
    save_file(tensors, str(dst / "model.safetensors"), metadata={"format": "pt"})
    cfg = json.loads((dst / "config.json").read_text())
    cfg["quantization_config"] = {"quant_method": "mxfp4",
                                  "modules_to_not_convert": ["model.layers.*.self_attn", "model.layers.*.mlp.router",
                                                             "model.embed_tokens", "lm_head"]}
    write_json(dst / "config.json", cfg)


def convert(ckpt: Path, out: Path, outtype: str) -> None:
    converter = Path(os.environ.get("LLAMA_CPP_CONVERTER", DEFAULT_CONVERTER))
    if not converter.is_file():
        raise SystemExit(f"llama.cpp converter not found at {converter}; set LLAMA_CPP_CONVERTER")
    env = {k: v for k, v in os.environ.items() if k != "NO_LOCAL_GGUF"}
    args = [str(converter.parent), str(ckpt), "--outfile", str(out), "--outtype", outtype]
    done = subprocess.run([sys.executable, "-c", CONVERT, *args], env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"convert_hf_to_gguf.py failed on {ckpt}:\n{done.stderr[-3000:]}")


def check_gguf(path: Path, model) -> dict:
    """The GGUF's expert tensors are MXFP4 and dequantize to the checkpoint's expert weights."""
    sys.path.insert(0, str(Path(os.environ.get("LLAMA_CPP_CONVERTER", DEFAULT_CONVERTER)).parent / "gguf-py"))
    import gguf
    reader = gguf.GGUFReader(str(path))
    types = {}
    tensors = {t.name: t for t in reader.tensors}
    for i, layer in enumerate(model.model.layers):
        ex = layer.mlp.experts
        gate_up = ex.gate_up_proj.float().transpose(1, 2)  # [E, 2f, h]
        want = {"ffn_gate_exps": gate_up[:, ::2], "ffn_up_exps": gate_up[:, 1::2],
                "ffn_down_exps": ex.down_proj.float().transpose(1, 2)}
        for part, w in want.items():
            t = tensors[f"blk.{i}.{part}.weight"]
            types[t.tensor_type.name] = types.get(t.tensor_type.name, 0) + 1
            got = gguf.quants.dequantize(t.data, t.tensor_type).reshape(w.shape)
            assert t.tensor_type == gguf.GGMLQuantizationType.MXFP4, t.tensor_type
            assert np.array_equal(got, w.detach().numpy()), f"blk.{i}.{part} differs from the checkpoint"
    return types


def clamp_fraction(model, ids: list[int]) -> float:
    """Share of expert gate/up pre-activations past the SwiGLU limit on one prompt."""
    seen = []

    def hook(module, args, output):
        gate_up = args[0] @ module.gate_up_proj[0].float() + module.gate_up_proj_bias[0].float()
        seen.append((gate_up.abs() > module.limit).float().mean().item())

    handles = [layer.mlp.experts.register_forward_hook(hook) for layer in model.model.layers]
    with torch.no_grad():
        model(input_ids=torch.tensor([ids]))
    for h in handles:
        h.remove()
    return float(np.mean(seen))


def records(model, tok) -> list[dict]:
    out = []
    prompts = [(n, k, t, tok(t)["input_ids"]) for n, k, t in PROMPTS]
    chat = tok.apply_chat_template(CHAT_MESSAGES, tokenize=False, add_generation_prompt=True)
    prompts.append(("chat", "chat_template", chat, tok(chat, add_special_tokens=False)["input_ids"]))
    for name, kind, text, ids in prompts:
        rec, _ = prompt_record(model, tok, name, kind, text, ids, N_NEW)
        g = rec["greedy"]
        print(f"  {name}: {len(ids)} ids, consistent={g['consistent_with_teacher_forced']} "
              f"min_margin={g['min_margin']:.4f}")
        out.append(rec)
    return out


def main() -> None:
    torch.manual_seed(SEED)
    torch.set_num_threads(2)
    fast = tokenizer()
    vocab = len(fast)
    assert [fast.convert_tokens_to_ids(t) for t in HARMONY] == list(range(vocab - 7, vocab))
    model, codes = build(vocab)
    ckpt = FIXTURES / NAME
    save_checkpoint(model, fast, ckpt)
    gguf_path = FIXTURES / f"{NAME}.gguf"
    with tempfile.TemporaryDirectory() as tmp:
        mx = Path(tmp) / NAME
        mxfp4_checkpoint(ckpt, codes, mx)
        convert(mx, gguf_path, "f32")
    convert(ckpt, FIXTURES / f"{NAME}-bf16.gguf", "bf16")
    types = check_gguf(gguf_path, model)
    print(f"{NAME}.gguf expert tensor types: {types}")
    ref = load_f32(ckpt, window_off=False)
    tok = PreTrainedTokenizerFast.from_pretrained(str(ckpt))
    clamped = clamp_fraction(ref, tok(PROMPTS[3][2])["input_ids"])
    print(f"  share of expert-0 gate/up pre-activations past the limit: {clamped:.4f}")
    assert clamped > 0, "no pre-activation reaches the SwiGLU limit"
    cfg = json.loads((ckpt / "config.json").read_text())
    write_json(FIXTURES / "goldens" / f"{NAME}.json", {
        "generator": "scripts/goldens/tiny_gpt_oss.py",
        "versions": versions(),
        "checkpoint_dir": f"tests/fixtures/{NAME}",
        "gguf_file": f"tests/fixtures/{NAME}.gguf",
        "gguf_file_bf16": f"tests/fixtures/{NAME}-bf16.gguf",
        "gguf_converter": "llama.cpp convert_hf_to_gguf.py --outtype f32 (llama-cpp-python 0.3.36 sdist, with its "
                          "bundled gguf-py; pre-tokenizer answered gpt-2) on the checkpoint with MXFP4 experts",
        "gguf_expert_types": types,
        "gguf_bf16_converter": "the same converter with --outtype bf16 on the bfloat16 checkpoint (experts as BF16 tensors)",
        "weights_dtype_in_file": "bfloat16",
        "init": {"torch_generator_seed": SEED, "matrix_std": WEIGHT_STD, "lm_head_std": LM_HEAD_STD,
                 "norm_weight": f"1 + {NORM_JITTER} * N(0,1)", "sinks": f"{SINK_STD} * N(0,1)", "router_std": ROUTER_STD,
                 "experts": f"E2M1 codes uniform, block scale 2^{GATE_UP_EXP} (gate_up), 2^{DOWN_EXP} (down)"},
        "expert_preactivations_past_limit": clamped,
        "config": {k: cfg.get(k) for k in (
            "model_type", "vocab_size", "hidden_size", "intermediate_size", "head_dim", "num_local_experts",
            "num_experts_per_tok", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
            "sliding_window", "layer_types", "rope_parameters", "rms_norm_eps", "swiglu_limit",
            "tie_word_embeddings")},
        "reference": reference("float32 (bfloat16 weights upcast exactly to float32 at load)"),
        "prompts": records(ref, tok),
    })


if __name__ == "__main__":
    main()
