"""Tiny random-weight HF Qwen2 / Qwen3 checkpoints, their GGUF conversions by llama.cpp's
converter, and their golden outputs (transformers, float32).

Checkpoints (config.json, model.safetensors in float16, tokenizer.json, tokenizer_config.json)
and GGUF files (llama.cpp's convert_hf_to_gguf.py --outtype f16, same weights bit for bit):
  tests/fixtures/tiny-qwen2/       + tiny-qwen2.gguf       Qwen2, q/k/v biases, untied lm_head
  tests/fixtures/tiny-qwen2-swa/   + tiny-qwen2-swa.gguf   Qwen2, tied embeddings, sliding window 8
                                                           on layers >= max_window_layers = 1
  tests/fixtures/tiny-qwen3/       + tiny-qwen3.gguf       Qwen3, q/k RMSNorm, head_dim 24 != 64/4,
                                                           tied embeddings, rope theta 1e6
Goldens (tests/fixtures/goldens/):
  tiny-qwen2.json, tiny-qwen2-swa.json, tiny-qwen3.json      transformers on the checkpoint
  tiny-qwen2-swa-full-attention.json                         the same weights with the window off

llama.cpp's converter writes no sliding-window metadata for qwen2 (and llama.cpp runs every
Qwen2 layer with full attention), so the GGUF of tiny-qwen2-swa is checked against the
full-attention golden; the script checks that the two goldens differ, i.e. that the window
matters for these prompts.

The converter runs in a subprocess with the gguf-py it ships beside it (its default): the newest
converter needs GGUF constants (e.g. MODEL_ARCH.DFLASH) that the `gguf` 0.19.0 on PyPI lacks. It identifies
BPE pre-tokenizers by hashing a tokenization of a fixed text, which for this tiny vocabulary
matches no known model; the subprocess answers "gpt-2" instead (the tokenizer's GPT-2 regex),
which is what registering the hash with convert_hf_to_gguf_update.py would do.

Every golden is computed in float32: the float16 weights are upcast exactly at load.

Run: python3 scripts/goldens/tiny_qwen.py   (LLAMA_CPP_CONVERTER = path of convert_hf_to_gguf.py,
     default /tmp/lcp/llama_cpp_python-0.3.36/vendor/llama.cpp/convert_hf_to_gguf.py)
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import torch
from transformers import AutoConfig, AutoModelForCausalLM, PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM, Qwen3Config, Qwen3ForCausalLM

from _common import FIXTURES, versions, write_json
from _tiny_hf import LM_HEAD_STD, NORM_JITTER, WEIGHT_STD, init_weights, prompt_records, reference, save_tokenizer
from _tiny_tokenizer import train_tokenizer

SEED = 2024
DEFAULT_CONVERTER = "/tmp/lcp/llama_cpp_python-0.3.36/vendor/llama.cpp/convert_hf_to_gguf.py"
WINDOW = 8
COMMON = dict(hidden_size=64, intermediate_size=128, num_attention_heads=4, num_key_value_heads=2,
              max_position_embeddings=256, rms_norm_eps=1e-6, hidden_act="silu", bos_token_id=1,
              eos_token_id=2, pad_token_id=None, initializer_range=WEIGHT_STD)

VARIANTS = {
    "qwen2": {"cls": (Qwen2Config, Qwen2ForCausalLM), "seed": SEED,
              "config": dict(num_hidden_layers=3, rope_theta=10000.0, tie_word_embeddings=False,
                             use_sliding_window=False, sliding_window=None, max_window_layers=3)},
    "qwen2-swa": {"cls": (Qwen2Config, Qwen2ForCausalLM), "seed": SEED + 1,
                  "config": dict(num_hidden_layers=3, rope_theta=10000.0, tie_word_embeddings=True,
                                 use_sliding_window=True, sliding_window=WINDOW, max_window_layers=1)},
    "qwen3": {"cls": (Qwen3Config, Qwen3ForCausalLM), "seed": SEED + 2,
              "config": dict(num_hidden_layers=3, head_dim=24, rope_theta=1e6, tie_word_embeddings=True,
                             attention_bias=False, use_sliding_window=False, sliding_window=None,
                             max_window_layers=3)},
}

# Runs in the converter's subprocess: name the pre-tokenizer, then run the converter's main.
CONVERT = """
import runpy, sys
sys.path.insert(0, sys.argv[1])
from conversion.base import TextModel
TextModel.get_vocab_base_pre = lambda self, tokenizer: "gpt-2"
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
    """`rope_theta` and `torch_dtype` at the top level, as published Qwen checkpoints have them."""
    path = out / "config.json"
    cfg = json.loads(path.read_text())
    cfg["rope_theta"] = cfg["rope_parameters"]["rope_theta"]
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


def load_f32(ckpt: Path, window_off: bool):
    """The checkpoint in float32; with `window_off`, every layer attends to all positions."""
    config = AutoConfig.from_pretrained(str(ckpt))
    if window_off:
        config.use_sliding_window, config.sliding_window = False, None
        config.layer_types = ["full_attention"] * config.num_hidden_layers
    model = AutoModelForCausalLM.from_pretrained(str(ckpt), config=config, dtype=torch.float32,
                                                 attn_implementation="eager").eval()
    assert model.model.embed_tokens.weight.dtype == torch.float32
    return model


def golden_for(name: str, ckpt: Path, spec: dict, window_off: bool = False) -> dict:
    model = load_f32(ckpt, window_off)
    # The class tokenizer_config.json names: transformers 5's AutoTokenizer would build a
    # Qwen2Tokenizer (Qwen's regex and NFC) from the vocabulary instead of tokenizer.json's pipeline.
    tok = PreTrainedTokenizerFast.from_pretrained(str(ckpt))
    cfg = json.loads((ckpt / "config.json").read_text())
    layer_types = model.config.layer_types
    print(f"  layer_types {layer_types}, sliding_window {model.config.sliding_window}")
    records = prompt_records(model, tok)
    return {
        "generator": "scripts/goldens/tiny_qwen.py",
        "versions": versions(),
        "checkpoint_dir": f"tests/fixtures/{ckpt.name}",
        "gguf_file": f"tests/fixtures/{ckpt.name}.gguf",
        "gguf_converter": "llama.cpp convert_hf_to_gguf.py --outtype f16 (llama-cpp-python 0.3.36 sdist, "
                          "with its bundled gguf-py; pre-tokenizer answered gpt-2)",
        "weights_dtype_in_file": "float16",
        "init": {"torch_generator_seed": spec["seed"], "matrix_std": WEIGHT_STD, "lm_head_std": LM_HEAD_STD,
                 "bias_std": WEIGHT_STD, "norm_weight": f"1 + {NORM_JITTER} * N(0,1) (q_norm/k_norm too)"},
        "config": {k: cfg.get(k) for k in (
            "model_type", "vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
            "num_attention_heads", "num_key_value_heads", "head_dim", "max_position_embeddings", "rope_theta",
            "rms_norm_eps", "tie_word_embeddings", "use_sliding_window", "sliding_window", "max_window_layers",
            "attention_bias", "bos_token_id", "eos_token_id")},
        "attention": {"layer_types": layer_types, "sliding_window": model.config.sliding_window,
                      "window_disabled_for_this_golden": window_off},
        "reference": reference("float32 (float16 weights upcast exactly to float32 at load)"),
        "prompts": records,
    }


def max_topk_difference(a: dict, b: dict) -> float:
    """Largest difference between two goldens' top-1 logits over all rows of all prompts."""
    worst = 0.0
    for pa, pb in zip(a["prompts"], b["prompts"]):
        assert pa["teacher_forced"]["ids"][: pa["n_prompt"]] == pb["teacher_forced"]["ids"][: pb["n_prompt"]]
        for ra, rb in zip(pa["teacher_forced"]["topk_logits"], pb["teacher_forced"]["topk_logits"]):
            worst = max(worst, abs(ra[0] - rb[0]))
    return worst


def main() -> None:
    torch.manual_seed(SEED)
    torch.set_num_threads(2)
    vocab = train_tokenizer().get_vocab_size()
    goldens = FIXTURES / "goldens"
    for name, spec in VARIANTS.items():
        ckpt = build_checkpoint(name, spec, vocab)
        gguf = convert_to_gguf(ckpt)
        print(f"{ckpt.name} -> {gguf.name}:")
        golden = golden_for(name, ckpt, spec)
        write_json(goldens / f"tiny-{name}.json", golden)
        if spec["config"]["use_sliding_window"]:
            print(f"{ckpt.name} with the window off:")
            full = golden_for(name, ckpt, spec, window_off=True)
            diff = max_topk_difference(golden, full)
            print(f"  window vs full attention: max |top-1 logit difference| = {diff:.3f}")
            assert diff > 0.1, "the sliding window does not change these prompts' logits"
            write_json(goldens / f"tiny-{name}-full-attention.json", full)


if __name__ == "__main__":
    main()
