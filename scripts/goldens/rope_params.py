"""transformers' rotary parameters (inverse frequencies and attention factor) for a set of RoPE
scaling configurations: YaRN (default betas; mscale / mscale_all_dim; explicit attention factor
with partial rotary; truncate off), dynamic NTK (at, below and past the original length),
LongRoPE (short and long factors), and partial rotary without scaling.

Writes tests/fixtures/goldens/rope-params.json:
  { "generator", "versions",
    "cases": [ { "name": str,
                 "config": {...},          # a config.json (older `rope_scaling` key style)
                 "seq_len": int | null,    # the sequence length given to the init function
                 "rotary_dim": int,        # len(inv_freq) * 2
                 "inv_freq": [float],      # float32 values, as transformers computes them
                 "attention_factor": float } ] }

Each value comes from transformers.modeling_rope_utils.ROPE_INIT_FUNCTIONS[rope_type](config,
"cpu", seq_len=seq_len) on the config class of `config["model_type"]`; `default` rope (partial
rotary, on Phi-3) uses Phi3RotaryEmbedding.compute_default_rope_parameters.

Run: python3 scripts/goldens/rope_params.py
"""
from __future__ import annotations

import copy

from transformers import CONFIG_MAPPING
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS
from transformers.models.phi3.modeling_phi3 import Phi3RotaryEmbedding

from _common import FIXTURES, versions, write_json

BASE = dict(vocab_size=32, num_hidden_layers=1, intermediate_size=64, rms_norm_eps=1e-5,
            bos_token_id=1, eos_token_id=2)


def llama(hidden: int, heads: int, theta: float, max_pos: int, scaling: dict | None, **extra) -> dict:
    return dict(BASE, model_type="llama", architectures=["LlamaForCausalLM"], hidden_size=hidden,
                num_attention_heads=heads, num_key_value_heads=heads, rope_theta=theta,
                max_position_embeddings=max_pos, rope_scaling=scaling, **extra)


def phi3(hidden: int, heads: int, theta: float, max_pos: int, orig: int, scaling: dict | None, **extra) -> dict:
    return dict(BASE, model_type="phi3", architectures=["Phi3ForCausalLM"], hidden_size=hidden,
                num_attention_heads=heads, num_key_value_heads=heads, rope_theta=theta,
                max_position_embeddings=max_pos, original_max_position_embeddings=orig,
                rope_scaling=scaling, **extra)


def factors(n: int, lo: float, hi: float) -> list[float]:
    return [round(lo + (hi - lo) * (i / (n - 1)) ** 2, 4) for i in range(n)]


CASES = [
    ("yarn_default_betas", llama(256, 4, 10000.0, 8192,
                                 {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 2048}), None),
    ("yarn_mscale_all_dim", llama(512, 4, 10000.0, 163840,
                                  {"rope_type": "yarn", "factor": 40.0, "original_max_position_embeddings": 4096,
                                   "beta_fast": 32, "beta_slow": 1, "mscale": 1.0, "mscale_all_dim": 0.707}), None),
    ("yarn_attention_factor_partial", llama(256, 2, 1e6, 131072,
                                            {"rope_type": "yarn", "factor": 8.0, "original_max_position_embeddings": 16384,
                                             "beta_fast": 16, "beta_slow": 2, "attention_factor": 1.3},
                                            partial_rotary_factor=0.5), None),
    ("yarn_no_truncate", llama(256, 4, 500000.0, 65536,
                               {"rope_type": "yarn", "factor": 2.0, "original_max_position_embeddings": 32768,
                                "truncate": False}), None),
    ("dynamic_within_original", llama(256, 4, 10000.0, 2048, {"rope_type": "dynamic", "factor": 2.0}), None),
    ("dynamic_below_original", llama(256, 4, 10000.0, 2048, {"rope_type": "dynamic", "factor": 2.0}), 1000),
    ("dynamic_past_original", llama(256, 4, 10000.0, 2048, {"rope_type": "dynamic", "factor": 2.0}), 4096),
    ("dynamic_partial", llama(256, 4, 10000.0, 4096, {"rope_type": "dynamic", "factor": 4.0},
                              partial_rotary_factor=0.25), 10000),
    ("longrope_short", phi3(384, 4, 10000.0, 131072, 4096,
                            {"type": "longrope", "short_factor": factors(48, 1.0, 1.2),
                             "long_factor": factors(48, 1.0, 40.0)}), None),
    ("longrope_long", phi3(384, 4, 10000.0, 131072, 4096,
                           {"type": "longrope", "short_factor": factors(48, 1.0, 1.2),
                            "long_factor": factors(48, 1.0, 40.0)}), 4097),
    ("longrope_su_partial", phi3(256, 4, 250000.0, 65536, 8192,
                                 {"type": "su", "original_max_position_embeddings": 8192, "short_factor": factors(24, 1.0, 1.5),
                                  "long_factor": factors(24, 1.0, 20.0)}, partial_rotary_factor=0.75), 9000),
    ("default_partial", phi3(256, 4, 10000.0, 2048, 2048, None, partial_rotary_factor=0.25), None),
]


def compute(config_dict: dict, seq_len: int | None):
    kwargs = {k: v for k, v in copy.deepcopy(config_dict).items() if k not in ("model_type", "architectures")}
    config = CONFIG_MAPPING[config_dict["model_type"]](**kwargs)
    rope_type = config.rope_parameters.get("rope_type", "default")
    if rope_type == "default":
        inv_freq, attention = Phi3RotaryEmbedding.compute_default_rope_parameters(config, device="cpu")
    else:
        inv_freq, attention = ROPE_INIT_FUNCTIONS[rope_type](config, "cpu", seq_len=seq_len)
    return rope_type, inv_freq.float().tolist(), float(attention)


def main() -> None:
    cases = []
    for name, config, seq_len in CASES:
        rope_type, inv_freq, attention = compute(config, seq_len)
        print(f"{name}: {rope_type}, {len(inv_freq)} frequencies, attention factor {attention:.6f}")
        cases.append({"name": name, "config": config, "seq_len": seq_len, "rope_type": rope_type,
                      "rotary_dim": 2 * len(inv_freq), "inv_freq": inv_freq, "attention_factor": attention})
    write_json(FIXTURES / "goldens" / "rope-params.json",
               {"generator": "scripts/goldens/rope_params.py", "versions": versions(), "cases": cases})


if __name__ == "__main__":
    main()
