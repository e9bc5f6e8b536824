"""A tiny random-weight HF BLOOM checkpoint (ALiBi positions), its GGUF conversion by llama.cpp's
converter, and its golden outputs (transformers, float32).

Checkpoint tests/fixtures/tiny-bloom/ (config.json, model.safetensors in float32, tokenizer.json,
tokenizer_config.json) and tests/fixtures/tiny-bloom.gguf (llama.cpp's convert_hf_to_gguf.py
--outtype f32, the same weights bit for bit; the converter reorders the fused query_key_value rows
from HF's per-head [n_head, 3, head_dim] interleave into [q; k; v]).

The model: 6 heads (not a power of two, so the ALiBi slopes take both branches of the rule:
heads 0-3 from 2^(-8/4), heads 4-5 the odd powers of 2^(-4/4)), head_dim 8, hidden 48, 2 layers,
LayerNorm with biases, GELU (tanh) MLP of 4 x hidden, tied LM head, word_embeddings_layernorm.
`seq_length` 256 is added to config.json: the converter writes it as the GGUF context length
(it falls back to the hidden size, 48, which is shorter than the long prompt).

Golden (tests/fixtures/goldens/): tiny-bloom.json, transformers on the checkpoint (eager).
The script also checks that transformers' slopes equal the closed form the Rust side uses.

Run: python3 scripts/goldens/tiny_bloom.py   (LLAMA_CPP_CONVERTER as for tiny_qwen.py)
"""
from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, BloomConfig, BloomForCausalLM, PreTrainedTokenizerFast
from transformers.models.bloom.modeling_bloom import build_alibi_tensor

from _common import FIXTURES, versions, write_json
from _tiny_hf import LM_HEAD_STD, NORM_JITTER, WEIGHT_STD, prompt_records, reference, save_tokenizer
from _tiny_tokenizer import train_tokenizer

SEED = 2031
NAME = "tiny-bloom"
DEFAULT_CONVERTER = "/tmp/lcp/llama_cpp_python-0.3.36/vendor/llama.cpp/convert_hf_to_gguf.py"
CONFIG = dict(hidden_size=48, n_layer=2, n_head=6, layer_norm_epsilon=1e-5, bos_token_id=1,
              eos_token_id=2, pad_token_id=None, initializer_range=WEIGHT_STD,
              apply_residual_connection_post_layernorm=False, tie_word_embeddings=True)
SEQ_LENGTH = 256

# Runs in the converter's subprocess: name the pre-tokenizer, then run the converter's main
# (see tiny_qwen.py: the tiny vocabulary's hash matches no known model).
CONVERT = """
import runpy, sys
sys.path.insert(0, sys.argv[1])
from conversion.base import TextModel
TextModel.get_vocab_base_pre = lambda self, tokenizer: "gpt-2"
sys.argv = [sys.argv[1] + "/convert_hf_to_gguf.py"] + sys.argv[2:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


@torch.no_grad()
def init_weights(model: torch.nn.Module, seed: int) -> None:
    """N(0, WEIGHT_STD) matrices and biases (LayerNorm biases too), 1 + N(0, NORM_JITTER) LayerNorm
    weights, N(0, LM_HEAD_STD) word embeddings (they are the tied LM head); sorted name order."""
    gen = torch.Generator().manual_seed(seed)
    for name, p in sorted(model.named_parameters()):
        noise = torch.randn(p.shape, generator=gen, dtype=torch.float32)
        if name.endswith("layernorm.weight") or name.endswith("ln_f.weight"):
            p.copy_(1.0 + NORM_JITTER * noise)
        elif name.endswith("word_embeddings.weight"):
            p.copy_(LM_HEAD_STD * noise)
        else:
            p.copy_(WEIGHT_STD * noise)


def closed_form_slopes(n_heads: int, max_bias: float = 8.0) -> list[float]:
    """ALiBi slopes as Kestrel computes them: n = 2^floor(log2 n_heads); head h < n gets
    2^(-max_bias/n)^(h+1), the others the odd powers 2^(-max_bias/(2n))^(2(h-n)+1)."""
    n = 2 ** int(math.floor(math.log2(n_heads)))
    m0, m1 = 2.0 ** (-max_bias / n), 2.0 ** (-max_bias / 2 / n)
    return [m0 ** (h + 1) if h < n else m1 ** (2 * (h - n) + 1) for h in range(n_heads)]


def check_slopes(n_heads: int) -> list[float]:
    alibi = build_alibi_tensor(torch.ones(1, 2, dtype=torch.long), n_heads, torch.float32)
    hf = alibi[:, 0, 1].tolist()  # slope * key position 1
    ours = closed_form_slopes(n_heads)
    assert all(abs(a - b) <= 1e-7 for a, b in zip(hf, ours)), (hf, ours)
    return hf


def build_checkpoint(vocab: int) -> Path:
    out = FIXTURES / NAME
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    model = BloomForCausalLM(BloomConfig(vocab_size=vocab, **CONFIG))
    init_weights(model, SEED)
    model.to(torch.float32).save_pretrained(str(out), safe_serialization=True)
    path = out / "config.json"
    cfg = json.loads(path.read_text())
    cfg["seq_length"] = SEQ_LENGTH
    cfg["torch_dtype"] = "float32"
    write_json(path, dict(sorted(cfg.items())))
    save_tokenizer(out)
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


def main() -> None:
    torch.manual_seed(SEED)
    torch.set_num_threads(2)
    vocab = train_tokenizer().get_vocab_size()
    slopes = check_slopes(CONFIG["n_head"])
    ckpt = build_checkpoint(vocab)
    gguf = convert_to_gguf(ckpt)
    print(f"{ckpt.name} -> {gguf.name}; slopes {slopes}")
    model = AutoModelForCausalLM.from_pretrained(str(ckpt), dtype=torch.float32,
                                                 attn_implementation="eager").eval()
    tok = PreTrainedTokenizerFast.from_pretrained(str(ckpt))
    cfg = json.loads((ckpt / "config.json").read_text())
    golden = {
        "generator": "scripts/goldens/tiny_bloom.py",
        "versions": versions(),
        "checkpoint_dir": f"tests/fixtures/{ckpt.name}",
        "gguf_file": f"tests/fixtures/{ckpt.name}.gguf",
        "gguf_converter": "llama.cpp convert_hf_to_gguf.py --outtype f32 (llama-cpp-python 0.3.36 sdist, "
                          "with its bundled gguf-py; pre-tokenizer answered gpt-2)",
        "weights_dtype_in_file": "float32",
        "init": {"torch_generator_seed": SEED, "matrix_std": WEIGHT_STD, "embedding_std": LM_HEAD_STD,
                 "bias_std": WEIGHT_STD, "norm_weight": f"1 + {NORM_JITTER} * N(0,1)"},
        "config": {k: cfg.get(k) for k in (
            "model_type", "vocab_size", "hidden_size", "n_layer", "n_head", "layer_norm_epsilon",
            "seq_length", "tie_word_embeddings", "bos_token_id", "eos_token_id")},
        "alibi_slopes": slopes,
        "reference": reference("float32"),
        "prompts": prompt_records(model, tok),
    }
    write_json(FIXTURES / "goldens" / f"{NAME}.json", golden)


if __name__ == "__main__":
    main()
