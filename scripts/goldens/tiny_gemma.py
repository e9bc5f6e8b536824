"""Tiny random-weight HF Gemma 3 (text) / Gemma 2 checkpoints, their GGUF conversions by llama.cpp's
converter, and their golden outputs (transformers, float32).

Checkpoints (config.json, model.safetensors in float32, tokenizer.json, tokenizer_config.json)
and GGUF files (llama.cpp's convert_hf_to_gguf.py --outtype f32; norm weights stored as 1 + w):
  tests/fixtures/tiny-gemma3/ + tiny-gemma3.gguf   Gemma3ForCausalLM (gemma3_text): 6 layers, the
      default sliding_window_pattern 6 (layers 0-4 slide with a window of 8, layer 5 is global),
      local RoPE base 1e4, global base 1e6 with linear scaling x8 (global layers only), q/k norm,
      hidden 32, head_dim 16 != 32 / 4, query_pre_attn_scalar 16, final_logit_softcapping 20
  tests/fixtures/tiny-gemma2/ + tiny-gemma2.gguf   Gemma2ForCausalLM: 4 layers alternating window 8 /
      global, attn_logit_softcapping 5 (small, so the cap bites on these weights), final 20,
      hidden 32, head_dim 8, query_pre_attn_scalar 16 (!= head_dim)
Goldens (tests/fixtures/goldens/):
  tiny-gemma3.json, tiny-gemma2.json                 transformers on the checkpoint
  tiny-gemma2-head-dim-scale.json                    Gemma 2 with query_pre_attn_scalar = head_dim:
      GGUF files carry no query_pre_attn_scalar and llama.cpp scales by head_dim^-1/2 (except the
      27B models), so the GGUF of tiny-gemma2 is checked against this one
The script also runs Gemma 3 with every layer global and asserts its logits differ from
tiny-gemma3.json (the window matters for these prompts); that run is not saved.

Prompts run up to ~110 tokens, far past the window. Every weight is random (seeded), norm weights
0.1 * N(0, 1) (Gemma norms multiply by 1 + w), embeddings N(0, 0.3) (tied head).

Converter notes. It runs in a subprocess with its own gguf-py (as in tiny_qwen.py). Its BPE
pre-tokenizer check answers "gpt-2" for the tiny tokenizer. Gemma 3's converter takes a
tokenizer.json when there is no tokenizer.model; Gemma 2's always reads a SentencePiece
tokenizer.model, so the subprocess gives Gemma 2 the same tokenizer.json path (the vocabulary does
not touch the weights or the metadata under test).

Run: python3 scripts/goldens/tiny_gemma.py   (LLAMA_CPP_CONVERTER = path of convert_hf_to_gguf.py,
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
from transformers import AutoConfig, AutoModelForCausalLM, Gemma2Config, Gemma2ForCausalLM, Gemma3ForCausalLM, Gemma3TextConfig, PreTrainedTokenizerFast

from _common import FIXTURES, versions, write_json
from _tiny_hf import WEIGHT_STD, init_weights, prompt_records, reference, save_tokenizer
from _tiny_tokenizer import train_tokenizer

SEED = 3031
DEFAULT_CONVERTER = "/tmp/lcp/llama_cpp_python-0.3.36/vendor/llama.cpp/convert_hf_to_gguf.py"
WINDOW = 8
NORM_STD = 0.1
EMBED_STD = 0.3
COMMON = dict(hidden_size=32, intermediate_size=64, num_attention_heads=4, num_key_value_heads=2,
              max_position_embeddings=256, rms_norm_eps=1e-6, hidden_activation="gelu_pytorch_tanh",
              bos_token_id=1, eos_token_id=2, pad_token_id=0, initializer_range=WEIGHT_STD,
              tie_word_embeddings=True, sliding_window=WINDOW)

VARIANTS = {
    "gemma3": {"cls": (Gemma3TextConfig, Gemma3ForCausalLM), "seed": SEED,
               "config": dict(num_hidden_layers=6, head_dim=16, query_pre_attn_scalar=16,
                              final_logit_softcapping=20.0, attn_logit_softcapping=None,
                              rope_parameters={
                                  "full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1e6},
                                  "sliding_attention": {"rope_type": "default", "rope_theta": 1e4}})},
    "gemma2": {"cls": (Gemma2Config, Gemma2ForCausalLM), "seed": SEED + 1,
               "config": dict(num_hidden_layers=4, head_dim=8, query_pre_attn_scalar=16,
                              final_logit_softcapping=20.0, attn_logit_softcapping=5.0,
                              rope_parameters={"rope_type": "default", "rope_theta": 1e4})},
}

# Runs in the converter's subprocess: name the pre-tokenizer, let Gemma 2 read tokenizer.json,
# then run the converter's main.
CONVERT = """
import runpy, sys
sys.path.insert(0, sys.argv[1])
from conversion.base import TextModel
from conversion import gemma
TextModel.get_vocab_base_pre = lambda self, tokenizer: "gpt-2"
gemma.Gemma2Model.set_vocab = lambda self: self._set_vocab_gpt2()
sys.argv = [sys.argv[1] + "/convert_hf_to_gguf.py"] + sys.argv[2:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


@torch.no_grad()
def gemma_init(model: torch.nn.Module, seed: int) -> None:
    """_tiny_hf's seeded init, then Gemma's norm convention (stored w of 1 + w) and a larger
    embedding (it is also the LM head)."""
    init_weights(model, seed)
    for name, p in model.named_parameters():
        if name.endswith("norm.weight"):
            p.sub_(1.0).mul_(NORM_STD / 0.1)
        elif name.endswith("embed_tokens.weight"):
            p.mul_(EMBED_STD / WEIGHT_STD)


def build_checkpoint(name: str, spec: dict, vocab: int) -> Path:
    out = FIXTURES / f"tiny-{name}"
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    config_cls, model_cls = spec["cls"]
    model = model_cls(config_cls(vocab_size=vocab, **COMMON, **spec["config"]))
    gemma_init(model, spec["seed"])
    model.to(torch.float32).save_pretrained(str(out), safe_serialization=True)
    save_tokenizer(out, pad_token="<unk>")
    return out


def convert_to_gguf(ckpt: Path) -> Path:
    converter = Path(os.environ.get("LLAMA_CPP_CONVERTER", DEFAULT_CONVERTER))
    if not converter.is_file():
        raise SystemExit(f"llama.cpp converter not found at {converter}; set LLAMA_CPP_CONVERTER")
    out = FIXTURES / f"{ckpt.name}.gguf"
    env = {k: v for k, v in os.environ.items() if k != "NO_LOCAL_GGUF"}
    args = [str(converter.parent), str(ckpt), "--outfile", str(out), "--outtype", "f32"]
    done = subprocess.run([sys.executable, "-c", CONVERT, *args], env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"convert_hf_to_gguf.py failed on {ckpt}:\n{done.stderr[-3000:]}")
    return out


def load_f32(ckpt: Path, overrides: dict):
    config = AutoConfig.from_pretrained(str(ckpt))
    for k, v in overrides.items():
        setattr(config, k, v)
    model = AutoModelForCausalLM.from_pretrained(str(ckpt), config=config, dtype=torch.float32,
                                                 attn_implementation="eager").eval()
    assert model.model.embed_tokens.weight.dtype == torch.float32
    return model


def golden_for(ckpt: Path, spec: dict, overrides: dict | None = None) -> dict:
    overrides = overrides or {}
    model = load_f32(ckpt, overrides)
    tok = PreTrainedTokenizerFast.from_pretrained(str(ckpt))
    cfg = json.loads((ckpt / "config.json").read_text())
    print(f"  layer_types {model.config.layer_types}, overrides {overrides}")
    return {
        "generator": "scripts/goldens/tiny_gemma.py",
        "versions": versions(),
        "checkpoint_dir": f"tests/fixtures/{ckpt.name}",
        "gguf_file": f"tests/fixtures/{ckpt.name}.gguf",
        "gguf_converter": "llama.cpp convert_hf_to_gguf.py --outtype f32 (llama-cpp-python 0.3.36 sdist, "
                          "with its bundled gguf-py; pre-tokenizer answered gpt-2; Gemma 2 vocabulary from tokenizer.json)",
        "weights_dtype_in_file": "float32",
        "init": {"torch_generator_seed": spec["seed"], "matrix_std": WEIGHT_STD, "embed_std": EMBED_STD,
                 "norm_weight": f"{NORM_STD} * N(0,1) (the norms multiply by 1 + w)"},
        "config": {k: cfg.get(k) for k in (
            "model_type", "vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
            "num_attention_heads", "num_key_value_heads", "head_dim", "query_pre_attn_scalar",
            "max_position_embeddings", "rope_parameters", "rms_norm_eps", "tie_word_embeddings",
            "sliding_window", "layer_types", "attn_logit_softcapping", "final_logit_softcapping",
            "bos_token_id", "eos_token_id")},
        "overrides_for_this_golden": overrides,
        "reference": reference("float32"),
        "prompts": prompt_records(model, tok),
    }


def max_top1_difference(a: dict, b: dict) -> float:
    worst = 0.0
    for pa, pb in zip(a["prompts"], b["prompts"]):
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
        golden = golden_for(ckpt, spec)
        write_json(goldens / f"tiny-{name}.json", golden)
        n = spec["config"]["num_hidden_layers"]
        if name == "gemma3":
            full = golden_for(ckpt, spec, {"layer_types": ["full_attention"] * n})
            diff = max_top1_difference(golden, full)
            print(f"  window vs all-global: max |top-1 logit difference| = {diff:.3f}")
            assert diff > 0.1, "the sliding window does not change these prompts' logits"
        if name == "gemma2":
            alt = golden_for(ckpt, spec, {"query_pre_attn_scalar": spec["config"]["head_dim"]})
            diff = max_top1_difference(golden, alt)
            print(f"  query_pre_attn_scalar 16 vs 8: max |top-1 logit difference| = {diff:.3f}")
            assert diff > 0.1, "the attention scale does not change these prompts' logits"
            write_json(goldens / f"tiny-{name}-head-dim-scale.json", alt)


if __name__ == "__main__":
    main()
