"""Tiny random-weight HF mixture-of-experts checkpoints (Mixtral, Qwen2-MoE, Qwen3-MoE), their
GGUF conversions by llama.cpp's converter, and their golden outputs (transformers, float32).

Checkpoints (config.json, model.safetensors in float16, tokenizer.json, tokenizer_config.json)
and GGUF files (llama.cpp's convert_hf_to_gguf.py --outtype f16, same weights bit for bit):
  tests/fixtures/tiny-mixtral/    + tiny-mixtral.gguf     4 experts, top-2 (softmax, top-k,
                                                          renormalised); GGUF arch `llama`
  tests/fixtures/tiny-qwen2-moe/  + tiny-qwen2-moe.gguf   4 experts, top-2, norm_topk_prob false,
                                                          shared expert (48) with its sigmoid gate,
                                                          q/k/v biases
  tests/fixtures/tiny-qwen3-moe/  + tiny-qwen3-moe.gguf   4 experts, top-2, norm_topk_prob true,
                                                          q/k norm
(llama.cpp's converter cannot convert a Qwen-MoE checkpoint with dense layers (mlp_only_layers),
so every layer is sparse here; the dense-layer rule is covered by the config tests.)
Goldens: tests/fixtures/goldens/tiny-{mixtral,qwen2-moe,qwen3-moe}.json (transformers on the
checkpoint, float16 weights upcast exactly to float32).

The converter runs as in tiny_qwen.py (its bundled gguf-py; pre-tokenizer answered "gpt-2").

Run: python3 scripts/goldens/tiny_moe.py   (LLAMA_CPP_CONVERTER as for tiny_qwen.py)
"""
from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import torch
from transformers import (MixtralConfig, MixtralForCausalLM, PreTrainedTokenizerFast, Qwen2MoeConfig,
                          Qwen2MoeForCausalLM, Qwen3MoeConfig, Qwen3MoeForCausalLM)

from _common import FIXTURES, versions, write_json
from _tiny_hf import LM_HEAD_STD, NORM_JITTER, WEIGHT_STD, init_weights, prompt_records, reference, save_tokenizer
from _tiny_tokenizer import train_tokenizer
from tiny_qwen import convert_to_gguf, load_f32

SEED = 3031
COMMON = dict(hidden_size=64, num_attention_heads=4, num_key_value_heads=2, num_hidden_layers=2,
              max_position_embeddings=256, rms_norm_eps=1e-6, hidden_act="silu", bos_token_id=1,
              eos_token_id=2, pad_token_id=None, initializer_range=WEIGHT_STD, num_experts_per_tok=2,
              tie_word_embeddings=False)

VARIANTS = {
    "mixtral": {"cls": (MixtralConfig, MixtralForCausalLM), "seed": SEED,
                "config": dict(num_local_experts=4, intermediate_size=32, rope_theta=10000.0,
                               sliding_window=None)},
    "qwen2-moe": {"cls": (Qwen2MoeConfig, Qwen2MoeForCausalLM), "seed": SEED + 1,
                  "config": dict(num_experts=4, moe_intermediate_size=32, intermediate_size=96,
                                 shared_expert_intermediate_size=48, norm_topk_prob=False,
                                 decoder_sparse_step=1, mlp_only_layers=[], rope_theta=10000.0,
                                 use_sliding_window=False, sliding_window=None, qkv_bias=True)},
    "qwen3-moe": {"cls": (Qwen3MoeConfig, Qwen3MoeForCausalLM), "seed": SEED + 2,
                  "config": dict(num_experts=4, moe_intermediate_size=32, intermediate_size=96,
                                 norm_topk_prob=True, decoder_sparse_step=1, mlp_only_layers=[],
                                 rope_theta=1e6, use_sliding_window=False, sliding_window=None,
                                 attention_bias=False)},
}


def build_checkpoint(name: str, spec: dict, vocab: int) -> Path:
    out = FIXTURES / f"tiny-{name}"
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    config_cls, model_cls = spec["cls"]
    model = model_cls(config_cls(vocab_size=vocab, **COMMON, **spec["config"]))
    init_weights(model, spec["seed"])
    model.to(torch.float16).save_pretrained(str(out), safe_serialization=True)
    path = out / "config.json"
    cfg = json.loads(path.read_text())
    cfg["rope_theta"] = cfg["rope_parameters"]["rope_theta"]
    cfg["torch_dtype"] = "float16"
    write_json(path, dict(sorted(cfg.items())))
    save_tokenizer(out, pad_token="</s>")
    return out


def routing_spread(model, tok) -> list[list[int]]:
    """Tokens routed to each expert per sparse layer over the prompts (shows every expert is used)."""
    counts = []

    def hook(module, args, output):
        _, _, idx = output
        counts.append(torch.bincount(idx.flatten(), minlength=4).tolist())

    handles = [m.register_forward_hook(hook) for n, m in model.named_modules() if n.endswith("mlp.gate")
               or n.endswith("block_sparse_moe.gate")]
    with torch.no_grad():
        model(input_ids=torch.tensor([tok("The quick brown fox jumps over the lazy dog")["input_ids"]]))
    for h in handles:
        h.remove()
    return counts


def golden_for(name: str, ckpt: Path, spec: dict) -> dict:
    model = load_f32(ckpt, window_off=False)
    tok = PreTrainedTokenizerFast.from_pretrained(str(ckpt))
    cfg = json.loads((ckpt / "config.json").read_text())
    print(f"  experts per layer on one prompt: {routing_spread(model, tok)}")
    records = prompt_records(model, tok)
    return {
        "generator": "scripts/goldens/tiny_moe.py",
        "versions": versions(),
        "checkpoint_dir": f"tests/fixtures/{ckpt.name}",
        "gguf_file": f"tests/fixtures/{ckpt.name}.gguf",
        "gguf_converter": "llama.cpp convert_hf_to_gguf.py --outtype f16 (llama-cpp-python 0.3.36 sdist, "
                          "with its bundled gguf-py; pre-tokenizer answered gpt-2)",
        "weights_dtype_in_file": "float16",
        "init": {"torch_generator_seed": spec["seed"], "matrix_std": WEIGHT_STD, "lm_head_std": LM_HEAD_STD,
                 "norm_weight": f"1 + {NORM_JITTER} * N(0,1)"},
        "config": {k: cfg.get(k) for k in (
            "model_type", "vocab_size", "hidden_size", "intermediate_size", "moe_intermediate_size",
            "shared_expert_intermediate_size", "num_local_experts", "num_experts", "num_experts_per_tok",
            "norm_topk_prob", "decoder_sparse_step", "mlp_only_layers", "num_hidden_layers",
            "num_attention_heads", "num_key_value_heads", "rope_theta", "rms_norm_eps", "qkv_bias",
            "tie_word_embeddings")},
        "reference": reference("float32 (float16 weights upcast exactly to float32 at load)"),
        "prompts": records,
    }


def main() -> None:
    torch.manual_seed(SEED)
    torch.set_num_threads(2)
    vocab = train_tokenizer().get_vocab_size()
    only = set(sys.argv[1:])  # optional: the variants to (re)generate
    for name, spec in VARIANTS.items():
        if only and name not in only:
            continue
        ckpt = build_checkpoint(name, spec, vocab)
        gguf = convert_to_gguf(ckpt)
        print(f"{ckpt.name} -> {gguf.name}:")
        write_json(FIXTURES / "goldens" / f"tiny-{name}.json", golden_for(name, ckpt, spec))


if __name__ == "__main__":
    main()
