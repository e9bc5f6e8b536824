"""A random-weight checkpoint with DeepSeek-V2-Lite's attention and layer widths, for timing
latent attention (not for its outputs): hidden 2048, 16 heads, kv_lora_rank 512, query/key
dims 128 (nope) + 64 (rope), value 128, no query LoRA, YaRN as the released config; layer 0
dense (ffn 10944), later layers sparse with V2-Lite's expert width (1408) and 2 shared experts
but 8 routed experts (top-6) instead of 64, and the tiny DeepSeek tokenizer (384 tokens), so
that a few layers fit in little memory. Stored in bfloat16.

Run: python3 scripts/bench/deepseek_v2_lite_shape.py OUT_DIR [LAYERS]   (default 4 layers)
"""
from __future__ import annotations

import shutil
import sys
from pathlib import Path

import torch
from transformers import DeepseekV2Config, DeepseekV2ForCausalLM

FIXTURE = Path(__file__).resolve().parents[2] / "tests/fixtures/tiny-deepseek-v2"


def main() -> None:
    out = Path(sys.argv[1])
    layers = int(sys.argv[2]) if len(sys.argv) > 2 else 4
    torch.manual_seed(54)
    config = DeepseekV2Config(
        vocab_size=384, hidden_size=2048, intermediate_size=10944, moe_intermediate_size=1408,
        num_hidden_layers=layers, num_attention_heads=16, num_key_value_heads=16,
        n_shared_experts=2, n_routed_experts=8, num_experts_per_tok=6, routed_scaling_factor=1.0,
        norm_topk_prob=False, topk_method="greedy", n_group=None, topk_group=None,
        first_k_dense_replace=1, q_lora_rank=None, kv_lora_rank=512, qk_nope_head_dim=128,
        qk_rope_head_dim=64, v_head_dim=128, max_position_embeddings=163840, rms_norm_eps=1e-6,
        bos_token_id=1, eos_token_id=2, pad_token_id=None, tie_word_embeddings=False,
        attention_bias=False, initializer_range=0.02,
        rope_parameters={"rope_type": "yarn", "rope_theta": 10000.0, "factor": 40.0,
                         "original_max_position_embeddings": 4096, "beta_fast": 32.0,
                         "beta_slow": 1.0, "mscale": 0.707, "mscale_all_dim": 0.707})
    model = DeepseekV2ForCausalLM(config).to(torch.bfloat16)
    shutil.rmtree(out, ignore_errors=True)
    model.save_pretrained(out)
    for name in ["tokenizer.json", "tokenizer_config.json"]:
        shutil.copy(FIXTURE / name, out / name)
    print(f"wrote {out}: {sum(p.numel() for p in model.parameters()) / 1e6:.0f} M parameters")


if __name__ == "__main__":
    main()
