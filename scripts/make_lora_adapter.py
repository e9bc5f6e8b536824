#!/usr/bin/env python3
"""Write a random PEFT LoRA adapter that fits a Llama-family GGUF, for speed benchmarks.

    scripts/make_lora_adapter.py BASE.gguf OUT_DIR [--rank 16] [--alpha 32] [--seed N]

The adapter targets all seven projections (q/k/v/o, gate/up/down) of every layer; the shapes
come from the GGUF's metadata (hidden size, FFN size, heads, KV heads, layers). A and B are
drawn from N(0, 0.02) and stored as BF16, as a fine-tuned adapter would ship them. The
output is a directory with adapter_config.json and adapter_model.safetensors, the layout PEFT
writes. Needs the `gguf` and `numpy` Python packages.
"""

import argparse
import json
import pathlib
import sys

import numpy as np

try:
    import gguf
except ImportError:
    sys.exit("make_lora_adapter.py needs the `gguf` Python package (pip install gguf)")

TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def field(reader: "gguf.GGUFReader", key: str) -> int:
    f = reader.fields.get(key)
    if f is None:
        sys.exit(f"the base GGUF has no {key}")
    return int(f.parts[f.data[0]][0])


def shapes(base: pathlib.Path) -> tuple[int, dict[str, tuple[int, int]]]:
    """Layers, and (out, in) of each target projection."""
    r = gguf.GGUFReader(str(base))
    arch = bytes(r.fields["general.architecture"].parts[-1]).decode()
    h = field(r, f"{arch}.embedding_length")
    ffn = field(r, f"{arch}.feed_forward_length")
    heads = field(r, f"{arch}.attention.head_count")
    kv_heads = field(r, f"{arch}.attention.head_count_kv")
    layers = field(r, f"{arch}.block_count")
    kv = h // heads * kv_heads
    dims = {"q_proj": (h, h), "k_proj": (kv, h), "v_proj": (kv, h), "o_proj": (h, h),
            "gate_proj": (ffn, h), "up_proj": (ffn, h), "down_proj": (h, ffn)}
    return layers, dims


def bf16(x: np.ndarray) -> np.ndarray:
    """Round float32 to bfloat16, returned as the uint16 bit patterns safetensors stores."""
    bits = x.astype(np.float32).view(np.uint32)
    rounded = bits + 0x7FFF + ((bits >> 16) & 1)
    return (rounded >> 16).astype(np.uint16)


def write_bf16_safetensors(path: pathlib.Path, tensors: dict[str, np.ndarray]) -> None:
    """A safetensors file of BF16 tensors (given as uint16 bit patterns): an 8-byte header
    length, the JSON header, then the data in header order."""
    header, offset = {"__metadata__": {"format": "pt"}}, 0
    for name, t in tensors.items():
        header[name] = {"dtype": "BF16", "shape": list(t.shape), "data_offsets": [offset, offset + t.nbytes]}
        offset += t.nbytes
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(len(text).to_bytes(8, "little"))
        f.write(text)
        for t in tensors.values():
            f.write(np.ascontiguousarray(t, dtype="<u2").tobytes())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("base", type=pathlib.Path)
    ap.add_argument("out", type=pathlib.Path)
    ap.add_argument("--rank", type=int, default=16)
    ap.add_argument("--alpha", type=int, default=32)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    layers, dims = shapes(args.base)
    rng = np.random.default_rng(args.seed)
    tensors = {}
    for i in range(layers):
        for t in TARGETS:
            out, inp = dims[t]
            group = "self_attn" if t in TARGETS[:4] else "mlp"
            name = f"base_model.model.model.layers.{i}.{group}.{t}"
            tensors[f"{name}.lora_A.weight"] = bf16(rng.normal(0, 0.02, (args.rank, inp)))
            tensors[f"{name}.lora_B.weight"] = bf16(rng.normal(0, 0.02, (out, args.rank)))
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / "adapter_model.safetensors"
    write_bf16_safetensors(path, tensors)
    config = {"base_model_name_or_path": args.base.name, "bias": "none", "fan_in_fan_out": False,
              "lora_alpha": args.alpha, "lora_dropout": 0.0, "modules_to_save": None,
              "peft_type": "LORA", "r": args.rank, "target_modules": TARGETS,
              "task_type": "CAUSAL_LM", "use_rslora": False}
    (args.out / "adapter_config.json").write_text(json.dumps(config, indent=1) + "\n")
    print(f"{args.out}: rank {args.rank}, {layers} layers x {len(TARGETS)} projections, "
          f"{path.stat().st_size / 1e6:.1f} MB")


if __name__ == "__main__":
    main()
