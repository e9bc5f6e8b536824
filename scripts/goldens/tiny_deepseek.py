"""Tiny random-weight DeepSeek V2 and V3 checkpoints (transformers' DeepseekV2ForCausalLM and
DeepseekV3ForCausalLM), their GGUF conversions by llama.cpp's converter (architecture `deepseek2`
for both), and their golden outputs (transformers, float32).

  tests/fixtures/tiny-deepseek-v2/  + tiny-deepseek-v2.gguf
      multi-head latent attention without a query LoRA (`q_proj`, as V2-Lite), kv_lora_rank 32,
      4 heads of 16 (nope) + 8 (rope) query/key dims, value 16; YaRN (factor 4 over 64 positions,
      mscale = mscale_all_dim = 0.707 as the released V2 configs: the rotary attention factor is
      1, the softmax scale gets mscale(4, 0.707)^2; a GGUF stores only mscale_all_dim, as
      `yarn_log_multiplier`); layer 0 dense (first_k_dense_replace 1), layers 1-2 sparse: 4 routed
      experts of 32, top-2 by softmax without renormalisation, routed_scaling_factor 1.5, one
      shared expert.
  tests/fixtures/tiny-deepseek-v3/  + tiny-deepseek-v3.gguf
      query LoRA (q_lora_rank 24 with its RMSNorm), the same latent attention, YaRN (factor 4
      over 64, mscale = mscale_all_dim = 1.0, as the released V3 config); layer 0 dense, layers
      1-2 sparse: 8 routed experts in 4 groups, top-2 groups (by the sum of their two best
      scores), top-2 experts by sigmoid score plus e_score_correction_bias (random, large enough
      to change some choices), weights renormalised (norm_topk_prob) and scaled by 2.5; one
      shared expert.
Checkpoints are stored in float16; goldens: tests/fixtures/goldens/tiny-deepseek-v{2,3}.json
(float16 weights upcast exactly to float32).

Run: python3 scripts/goldens/tiny_deepseek.py   (LLAMA_CPP_CONVERTER as for tiny_qwen.py)
"""
from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import torch
from transformers import (DeepseekV2Config, DeepseekV2ForCausalLM, DeepseekV3Config, DeepseekV3ForCausalLM,
                          PreTrainedTokenizerFast)

from _common import FIXTURES, versions, write_json
from _tiny_hf import LM_HEAD_STD, NORM_JITTER, WEIGHT_STD, init_weights, prompt_records, reference, save_tokenizer
from _tiny_tokenizer import train_tokenizer
from tiny_qwen import convert_to_gguf, load_f32

SEED = 5151
BIAS_STD = 0.3
COMMON = dict(hidden_size=64, intermediate_size=96, num_attention_heads=4, num_key_value_heads=4,
              num_hidden_layers=3, max_position_embeddings=256, rms_norm_eps=1e-6, hidden_act="silu",
              bos_token_id=1, eos_token_id=2, pad_token_id=None, initializer_range=WEIGHT_STD,
              kv_lora_rank=32, qk_nope_head_dim=16, qk_rope_head_dim=8, v_head_dim=16,
              moe_intermediate_size=32, n_shared_experts=1, first_k_dense_replace=1,
              num_experts_per_tok=2, tie_word_embeddings=False, attention_bias=False)

VARIANTS = {
    "v2": {"cls": (DeepseekV2Config, DeepseekV2ForCausalLM), "seed": SEED,
           "config": dict(q_lora_rank=None, n_routed_experts=4, routed_scaling_factor=1.5,
                          norm_topk_prob=False, topk_method="greedy", n_group=None, topk_group=None,
                          rope_parameters={"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0,
                                           "original_max_position_embeddings": 64, "beta_fast": 32.0,
                                           "beta_slow": 1.0, "mscale": 0.707, "mscale_all_dim": 0.707})},
    "v3": {"cls": (DeepseekV3Config, DeepseekV3ForCausalLM), "seed": SEED + 1,
           "config": dict(q_lora_rank=24, n_routed_experts=8, routed_scaling_factor=2.5, norm_topk_prob=True,
                          n_group=4, topk_group=2, rope_interleave=True,
                          rope_parameters={"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0,
                                           "original_max_position_embeddings": 64, "beta_fast": 32.0,
                                           "beta_slow": 1.0, "mscale": 1.0, "mscale_all_dim": 1.0})},
}
# Keys the released DeepSeek-V3 config.json has and transformers' config class does not write:
# llama.cpp's converter reads `scoring_func` into `expert_gating_func` (without it llama.cpp
# would route a deepseek2 GGUF by softmax, as V2).
EXTRA_CONFIG = {"v3": {"scoring_func": "sigmoid", "topk_method": "noaux_tc"}}


def build_checkpoint(name: str, spec: dict, vocab: int) -> Path:
    out = FIXTURES / f"tiny-deepseek-{name}"
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    config_cls, model_cls = spec["cls"]
    model = model_cls(config_cls(vocab_size=vocab, **COMMON, **spec["config"]))
    init_weights(model, spec["seed"])
    gen = torch.Generator().manual_seed(spec["seed"] + 100)
    with torch.no_grad():
        for n, b in model.named_buffers():
            if n.endswith("e_score_correction_bias"):
                b.copy_(BIAS_STD * torch.randn(b.shape, generator=gen))
    model.to(torch.float16).save_pretrained(str(out), safe_serialization=True)
    path = out / "config.json"
    cfg = json.loads(path.read_text())
    cfg["torch_dtype"] = "float16"
    cfg.update(EXTRA_CONFIG.get(name, {}))
    write_json(path, dict(sorted(cfg.items())))
    save_tokenizer(out, pad_token="</s>")
    return out


def routing_spread(model, tok, n_experts: int) -> list[list[int]]:
    """Tokens routed to each expert per sparse layer on one prompt (every expert is used)."""
    counts = []

    def hook(module, args, output):
        _, _, idx = output
        counts.append(torch.bincount(idx.flatten(), minlength=n_experts).tolist())

    handles = [m.register_forward_hook(hook) for n, m in model.named_modules() if n.endswith("mlp.gate")]
    with torch.no_grad():
        model(input_ids=torch.tensor([tok("The quick brown fox jumps over the lazy dog")["input_ids"]]))
    for h in handles:
        h.remove()
    return counts


def golden_for(name: str, ckpt: Path, spec: dict) -> dict:
    model = load_f32(ckpt, window_off=False)
    tok = PreTrainedTokenizerFast.from_pretrained(str(ckpt))
    cfg = json.loads((ckpt / "config.json").read_text())
    spread = routing_spread(model, tok, cfg["n_routed_experts"])
    print(f"  experts per sparse layer on one prompt: {spread}")
    return {
        "generator": "scripts/goldens/tiny_deepseek.py",
        "versions": versions(),
        "checkpoint_dir": f"tests/fixtures/{ckpt.name}",
        "gguf_file": f"tests/fixtures/{ckpt.name}.gguf",
        "gguf_converter": "llama.cpp convert_hf_to_gguf.py --outtype f16 (llama-cpp-python 0.3.36 sdist, "
                          "with its bundled gguf-py; pre-tokenizer answered gpt-2)",
        "weights_dtype_in_file": "float16",
        "init": {"torch_generator_seed": spec["seed"], "matrix_std": WEIGHT_STD, "lm_head_std": LM_HEAD_STD,
                 "norm_weight": f"1 + {NORM_JITTER} * N(0,1)", "e_score_correction_bias": f"{BIAS_STD} * N(0,1)"},
        "routing_spread": spread,
        "config": {k: cfg.get(k) for k in (
            "model_type", "vocab_size", "hidden_size", "intermediate_size", "moe_intermediate_size",
            "n_routed_experts", "n_shared_experts", "num_experts_per_tok", "n_group", "topk_group",
            "topk_method", "scoring_func", "norm_topk_prob", "routed_scaling_factor", "first_k_dense_replace",
            "num_hidden_layers", "num_attention_heads", "q_lora_rank", "kv_lora_rank", "qk_nope_head_dim",
            "qk_rope_head_dim", "v_head_dim", "rope_parameters", "rms_norm_eps", "tie_word_embeddings")},
        "reference": reference("float32 (float16 weights upcast exactly to float32 at load)"),
        "prompts": prompt_records(model, tok),
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
        write_json(FIXTURES / "goldens" / f"tiny-deepseek-{name}.json", golden_for(name, ckpt, spec))


if __name__ == "__main__":
    main()
