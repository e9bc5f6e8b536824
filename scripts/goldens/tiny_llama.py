"""Tiny random-weight HF Llama checkpoints and their golden outputs (transformers, float32).

Checkpoints (config.json, model.safetensors, tokenizer.json, tokenizer_config.json):
  tests/fixtures/tiny-llama-f32/        3 layers, weights stored as float32
  tests/fixtures/tiny-llama-bf16/       same weights rounded to bfloat16 and stored as bfloat16
  tests/fixtures/tiny-llama-ropescale/  2 layers, float32, rope_scaling llama3
                                        (factor 8, low 1, high 4, original_max_position_embeddings 64)
Goldens:
  tests/fixtures/goldens/tiny-llama-{f32,bf16,ropescale}.json

Every golden is computed in float32: each checkpoint is reloaded from disk with
torch_dtype=torch.float32 (the bf16 one is upcast exactly from its bf16 weights).

config.json carries both the legacy keys most published checkpoints use ("rope_theta",
"rope_scaling", "torch_dtype") and transformers 5's "rope_parameters"/"dtype"; the script
checks that transformers reads both to the same values.

Run: python3 scripts/goldens/tiny_llama.py
"""
from __future__ import annotations

import copy
import json
import shutil
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaConfig, LlamaForCausalLM

from _common import FIXTURES, versions, write_json
from _tiny_hf import LM_HEAD_STD, NORM_JITTER, WEIGHT_STD, init_weights, prompt_records, reference, save_tokenizer
from _tiny_tokenizer import train_tokenizer

SEED = 1234
LLAMA3_SCALING = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                  "original_max_position_embeddings": 64}

VARIANTS = {
    "f32": {"layers": 3, "dtype": torch.float32, "rope_scaling": None},
    "bf16": {"layers": 3, "dtype": torch.bfloat16, "rope_scaling": None},
    "ropescale": {"layers": 2, "dtype": torch.float32, "rope_scaling": LLAMA3_SCALING},
}


def make_config(vocab: int, layers: int, rope_scaling: dict | None) -> LlamaConfig:
    return LlamaConfig(
        vocab_size=vocab, hidden_size=64, intermediate_size=128, num_hidden_layers=layers,
        num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=256,
        rope_theta=10000.0, rope_scaling=copy.deepcopy(rope_scaling), rms_norm_eps=1e-5, hidden_act="silu",
        tie_word_embeddings=False, bos_token_id=1, eos_token_id=2, pad_token_id=None,
        attention_bias=False, mlp_bias=False, initializer_range=WEIGHT_STD,
    )


def add_legacy_config_keys(out: Path, rope_scaling: dict | None, dtype: torch.dtype) -> None:
    """Add the legacy keys most published Llama checkpoints carry next to transformers 5's."""
    path = out / "config.json"
    cfg = json.loads(path.read_text())
    cfg["rope_theta"] = cfg["rope_parameters"]["rope_theta"]
    cfg["rope_scaling"] = rope_scaling
    cfg["torch_dtype"] = str(dtype).removeprefix("torch.")
    cfg["architectures"] = ["LlamaForCausalLM"]
    write_json(path, dict(sorted(cfg.items())))


def build_checkpoint(name: str, spec: dict, vocab: int, seed: int) -> Path:
    out = FIXTURES / f"tiny-llama-{name}"
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    config = make_config(vocab, spec["layers"], spec["rope_scaling"])
    model = LlamaForCausalLM(config)
    init_weights(model, seed)
    model.to(spec["dtype"]).save_pretrained(str(out), safe_serialization=True)
    add_legacy_config_keys(out, spec["rope_scaling"], spec["dtype"])
    save_tokenizer(out)
    return out


def golden_for(name: str, ckpt: Path, spec: dict) -> dict:
    model = AutoModelForCausalLM.from_pretrained(str(ckpt), torch_dtype=torch.float32, attn_implementation="eager").eval()
    assert model.model.embed_tokens.weight.dtype == torch.float32
    tok = AutoTokenizer.from_pretrained(str(ckpt))
    cfg = json.loads((ckpt / "config.json").read_text())
    legacy = LlamaConfig.from_dict(copy.deepcopy({k: v for k, v in cfg.items() if k != "rope_parameters"}))
    assert legacy.rope_parameters == model.config.rope_parameters, "legacy and v5 rope keys disagree"
    records = prompt_records(model, tok)
    return {
        "generator": "scripts/goldens/tiny_llama.py",
        "versions": versions(),
        "checkpoint_dir": f"tests/fixtures/{ckpt.name}",
        "weights_dtype_in_file": str(spec["dtype"]).removeprefix("torch."),
        "init": {"torch_generator_seed": seed_for(name), "matrix_std": WEIGHT_STD, "lm_head_std": LM_HEAD_STD, "norm_weight": f"1 + {NORM_JITTER} * N(0,1)"},
        "config": {k: cfg.get(k) for k in (
            "vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
            "num_key_value_heads", "head_dim", "max_position_embeddings", "rope_theta", "rope_scaling",
            "rms_norm_eps", "tie_word_embeddings", "bos_token_id", "eos_token_id")},
        "reference": reference("float32 (bf16 checkpoint: bf16 weights upcast exactly to float32 at load)"),
        "prompts": records,
    }


def seed_for(name: str) -> int:
    """f32 and bf16 share one seed, so bf16 holds the f32 weights rounded to bf16."""
    return SEED if name in ("f32", "bf16") else SEED + 1


def main() -> None:
    torch.manual_seed(SEED)
    torch.set_num_threads(2)
    vocab = train_tokenizer().get_vocab_size()
    for name, spec in VARIANTS.items():
        ckpt = build_checkpoint(name, spec, vocab, seed_for(name))
        print(f"{ckpt.name}:")
        write_json(FIXTURES / "goldens" / f"tiny-llama-{name}.json", golden_for(name, ckpt, spec))


if __name__ == "__main__":
    main()
