"""Tiny random-weight HF Phi-3 checkpoints, their GGUF conversions by llama.cpp's converter, and
their golden outputs (transformers, float32); plus a tiny Qwen2 checkpoint with YaRN scaling.

Checkpoints (config.json, model.safetensors in float16, tokenizer.json, tokenizer_config.json)
and GGUF files (llama.cpp's convert_hf_to_gguf.py --outtype f16, same weights bit for bit):
  tests/fixtures/tiny-phi3/          + tiny-phi3.gguf           Phi3ForCausalLM: fused qkv_proj and
                                                               gate_up_proj, partial rotary 0.75
                                                               (12 of head_dim 16), GQA 4/2, untied head
  tests/fixtures/tiny-phi3-longrope/ + tiny-phi3-longrope.gguf  Phi3ForCausalLM with LongRoPE:
                                                               original_max_position_embeddings 16,
                                                               max_position_embeddings 256 (attention
                                                               factor sqrt(2)), short/long factors, tied
  tests/fixtures/tiny-qwen2-yarn/    + tiny-qwen2-yarn.gguf     Qwen2ForCausalLM with YaRN: factor 4,
                                                               original_max_position_embeddings 32
Goldens (tests/fixtures/goldens/): tiny-phi3.json, tiny-phi3-longrope.json, tiny-qwen2-yarn.json.

LongRoPE in transformers picks the long factors whenever the sequence is longer than
original_max_position_embeddings (16 here) and the short ones otherwise; every teacher-forced
sequence here is longer than 16, so those rows use the long factors. The golden records, per
prompt, the sequence length of each greedy step, so a test can tell which factors each step used.

The converter's Phi-3 vocabulary reader wants a SentencePiece tokenizer.model (or a GPT2Tokenizer
class); the tiny tokenizer is a byte-level BPE tokenizer.json, so the converter's subprocess reads
it with the converter's GPT-2 vocabulary path. The pre-tokenizer is answered "gpt-2" as in
tiny_qwen.py.

Run: python3 scripts/goldens/tiny_phi3.py   (LLAMA_CPP_CONVERTER as for tiny_qwen.py)
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import torch
from transformers import (AutoModelForCausalLM, Phi3Config, Phi3ForCausalLM, PreTrainedTokenizerFast, Qwen2Config,
                          Qwen2ForCausalLM)

from _common import FIXTURES, versions, write_json
from _tiny_hf import LM_HEAD_STD, NORM_JITTER, WEIGHT_STD, init_weights, prompt_records, reference, save_tokenizer
from _tiny_tokenizer import train_tokenizer

SEED = 3033
DEFAULT_CONVERTER = "/tmp/lcp/llama_cpp_python-0.3.36/vendor/llama.cpp/convert_hf_to_gguf.py"
COMMON = dict(hidden_size=64, intermediate_size=128, num_attention_heads=4, num_key_value_heads=2,
              num_hidden_layers=3, max_position_embeddings=256, rms_norm_eps=1e-5, hidden_act="silu",
              bos_token_id=1, eos_token_id=2, pad_token_id=None, initializer_range=WEIGHT_STD)
LONGROPE_ORIG = 16


def longrope_factors(n: int, hi: float) -> list[float]:
    return [round(1.0 + (hi - 1.0) * (i / (n - 1)) ** 1.5, 4) for i in range(n)]


VARIANTS = {
    "phi3": {"cls": (Phi3Config, Phi3ForCausalLM), "seed": SEED,
             "config": dict(rope_theta=10000.0, partial_rotary_factor=0.75, tie_word_embeddings=False,
                            original_max_position_embeddings=256, sliding_window=None)},
    "phi3-longrope": {"cls": (Phi3Config, Phi3ForCausalLM), "seed": SEED + 1,
                      "config": dict(rope_theta=10000.0, tie_word_embeddings=True, sliding_window=None,
                                     original_max_position_embeddings=LONGROPE_ORIG,
                                     rope_scaling={"rope_type": "longrope",
                                                   "short_factor": longrope_factors(8, 1.5),
                                                   "long_factor": longrope_factors(8, 24.0)})},
    "qwen2-yarn": {"cls": (Qwen2Config, Qwen2ForCausalLM), "seed": SEED + 2,
                   "config": dict(rope_theta=10000.0, tie_word_embeddings=False, use_sliding_window=False,
                                  sliding_window=None, max_window_layers=3,
                                  rope_scaling={"rope_type": "yarn", "factor": 4.0,
                                                "original_max_position_embeddings": 32})},
}

# Runs in the converter's subprocess: Phi-3's vocabulary through the GPT-2 path, the
# pre-tokenizer named, then the converter's main.
CONVERT = """
import runpy, sys
sys.path.insert(0, sys.argv[1])
from conversion.base import TextModel
from conversion.phi import Phi3MiniModel
TextModel.get_vocab_base_pre = lambda self, tokenizer: "gpt-2"
Phi3MiniModel.set_vocab = lambda self: self._set_vocab_gpt2()
sys.argv = [sys.argv[1] + "/convert_hf_to_gguf.py"] + sys.argv[2:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def build_checkpoint(name: str, spec: dict, vocab: int) -> Path:
    out = FIXTURES / f"tiny-{name}"
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    config_cls, model_cls = spec["cls"]
    model = model_cls(config_cls(vocab_size=vocab, **COMMON, **spec["config"]))
    init_weights(model, spec["seed"])
    model.to(torch.float16).save_pretrained(str(out), safe_serialization=True)
    add_legacy_config_keys(out)
    save_tokenizer(out, pad_token="</s>")
    return out


def add_legacy_config_keys(out: Path) -> None:
    """`rope_theta`, `rope_scaling` and `torch_dtype` at the top level, as published checkpoints have them."""
    path = out / "config.json"
    cfg = json.loads(path.read_text())
    params = cfg["rope_parameters"]
    cfg["rope_theta"] = params["rope_theta"]
    if params.get("rope_type", "default") != "default":
        cfg["rope_scaling"] = {k: v for k, v in params.items() if k not in ("rope_theta", "partial_rotary_factor")}
    if "partial_rotary_factor" in params and params["partial_rotary_factor"] != 1.0:
        cfg["partial_rotary_factor"] = params["partial_rotary_factor"]
    cfg["torch_dtype"] = "float16"
    write_json(path, dict(sorted(cfg.items())))


def convert_to_gguf(ckpt: Path) -> Path:
    converter = Path(os.environ.get("LLAMA_CPP_CONVERTER", DEFAULT_CONVERTER))
    if not converter.is_file():
        raise SystemExit(f"llama.cpp converter not found at {converter}; set LLAMA_CPP_CONVERTER")
    out = FIXTURES / f"{ckpt.name}.gguf"
    env = {k: v for k, v in os.environ.items() if k != "NO_LOCAL_GGUF"}
    args = [str(converter.parent), str(ckpt), "--outfile", str(out), "--outtype", "f16"]
    done = subprocess.run([sys.executable, "-c", CONVERT, *args], env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"convert_hf_to_gguf.py failed on {ckpt}:\n{done.stderr[-3000:]}")
    return out


def golden_for(name: str, ckpt: Path, spec: dict) -> dict:
    model = AutoModelForCausalLM.from_pretrained(str(ckpt), dtype=torch.float32, attn_implementation="eager").eval()
    assert model.model.embed_tokens.weight.dtype == torch.float32
    tok = PreTrainedTokenizerFast.from_pretrained(str(ckpt))
    cfg = json.loads((ckpt / "config.json").read_text())
    print(f"  rope_parameters {model.config.rope_parameters}")
    records = prompt_records(model, tok)
    for rec in records:
        n = rec["n_prompt"]
        rec["greedy"]["step_seq_lens"] = [n + i for i in range(len(rec["greedy"]["ids"]))]
    return {
        "generator": "scripts/goldens/tiny_phi3.py",
        "versions": versions(),
        "checkpoint_dir": f"tests/fixtures/{ckpt.name}",
        "gguf_file": f"tests/fixtures/{ckpt.name}.gguf",
        "gguf_converter": "llama.cpp convert_hf_to_gguf.py --outtype f16 (llama-cpp-python 0.3.36 sdist, "
                          "with its bundled gguf-py; pre-tokenizer answered gpt-2; GPT-2 vocabulary path)",
        "weights_dtype_in_file": "float16",
        "init": {"torch_generator_seed": spec["seed"], "matrix_std": WEIGHT_STD, "lm_head_std": LM_HEAD_STD,
                 "norm_weight": f"1 + {NORM_JITTER} * N(0,1)"},
        "config": {k: cfg.get(k) for k in (
            "model_type", "vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
            "num_attention_heads", "num_key_value_heads", "max_position_embeddings",
            "original_max_position_embeddings", "rope_theta", "rope_scaling", "partial_rotary_factor",
            "rms_norm_eps", "tie_word_embeddings", "sliding_window", "bos_token_id", "eos_token_id")},
        "rope_parameters": model.config.rope_parameters,
        "reference": reference("float32 (float16 weights upcast exactly to float32 at load)"),
        "prompts": records,
    }


def main() -> None:
    torch.manual_seed(SEED)
    torch.set_num_threads(2)
    vocab = train_tokenizer().get_vocab_size()
    goldens = FIXTURES / "goldens"
    for name, spec in VARIANTS.items():
        ckpt = build_checkpoint(name, spec, vocab)
        gguf = convert_to_gguf(ckpt)
        print(f"{ckpt.name} -> {gguf.name}:")
        write_json(goldens / f"tiny-{name}.json", golden_for(name, ckpt, spec))


if __name__ == "__main__":
    main()
