"""LoRA adapters on the tiny Llama checkpoint (tests/fixtures/tiny-llama-f32) and their goldens
(PEFT on transformers, float32, CPU).

Adapters (tests/fixtures/lora/):
  all7/        r=8, lora_alpha=16, all seven projections (q k v o gate up down), F32
  all7.gguf    the same adapter as a llama.cpp LoRA GGUF (F32)
  rslora/      r=4, lora_alpha=8, use_rslora (scale alpha/sqrt(r)), q k v down; weights rounded
               to F16 values and stored as F32
  rslora.gguf  the same as an F16 llama.cpp LoRA GGUF, written with `alpha * sqrt(r)` (the format
               has no rsLoRA flag, its scale is alpha / r)
  attn-bf16/   r=2, lora_alpha=4, k o gate up; weights rounded to and stored as BF16
  zero/        r=4, q v, PEFT's default init (B = 0): must give exactly the base model
  phi3-fused/  on tests/fixtures/tiny-phi3: r=4, lora_alpha=8, the fused qkv_proj and gate_up_proj,
               o_proj, down_proj
Goldens: tests/fixtures/goldens/tiny-llama-lora-{all7,rslora,attn-bf16}.json and
tiny-phi3-lora-fused.json (same record format as tiny-llama-f32.json).

Every non-zero A and B is N(0, 0.1), drawn from a seeded generator in sorted parameter order.
The llama.cpp GGUFs follow convert_lora_to_gguf.py's layout: tensors blk.N.<part>.weight.lora_a
([r, in]) and .lora_b ([out, r]), Q/K B rows permuted like the base model's Q/K weights
(llama.cpp's interleaved-RoPE row order), general.type=adapter, adapter.type=lora,
adapter.lora.alpha. When llama.cpp's own converter is available (LLAMA_CPP_DIR), all7.gguf is
also converted with it and the tensors must equal ours.

Run: python3 scripts/goldens/tiny_lora.py
"""
from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch
from peft import LoraConfig, get_peft_model
from safetensors.torch import load_file, save_file
from transformers import AutoModelForCausalLM, AutoTokenizer

import gguf
from _common import FIXTURES, versions, write_json
from _tiny_hf import prompt_records, reference

BASE = FIXTURES / "tiny-llama-f32"
OUT = FIXTURES / "lora"
STD = 0.1
GGUF_PART = {"q_proj": "attn_q", "k_proj": "attn_k", "v_proj": "attn_v", "o_proj": "attn_output",
             "gate_proj": "ffn_gate", "up_proj": "ffn_up", "down_proj": "ffn_down"}
ALL7 = list(GGUF_PART)

ADAPTERS = {
    "all7": dict(r=8, alpha=16, rslora=False, targets=ALL7, round=None, seed=11),
    "rslora": dict(r=4, alpha=8, rslora=True, targets=["q_proj", "k_proj", "v_proj", "down_proj"],
                   round=torch.float16, seed=12),
    "attn-bf16": dict(r=2, alpha=4, rslora=False, targets=["k_proj", "o_proj", "gate_proj", "up_proj"],
                      round=torch.bfloat16, seed=13),
    "zero": dict(r=4, alpha=8, rslora=False, targets=["q_proj", "v_proj"], round=None, seed=None),
    "phi3-fused": dict(r=4, alpha=8, rslora=False, targets=["qkv_proj", "o_proj", "gate_up_proj", "down_proj"],
                       round=None, seed=14, base="tiny-phi3"),
}


def base_model(base: Path = BASE):
    return AutoModelForCausalLM.from_pretrained(str(base), torch_dtype=torch.float32,
                                                attn_implementation="eager").eval()


@torch.no_grad()
def make_adapter(spec: dict):
    cfg = LoraConfig(r=spec["r"], lora_alpha=spec["alpha"], use_rslora=spec["rslora"],
                     target_modules=spec["targets"], lora_dropout=0.0, bias="none", task_type="CAUSAL_LM")
    model = get_peft_model(base_model(base_of(spec)), cfg).eval()
    if spec["seed"] is not None:
        gen = torch.Generator().manual_seed(spec["seed"])
        for name, p in sorted(model.named_parameters()):
            if "lora_A" in name or "lora_B" in name:
                v = STD * torch.randn(p.shape, generator=gen, dtype=torch.float32)
                if spec["round"] is not None:
                    v = v.to(spec["round"]).float()
                p.copy_(v)
    return model


def base_of(spec: dict) -> Path:
    return FIXTURES / spec.get("base", "tiny-llama-f32")


def save_adapter(name: str, spec: dict, model) -> Path:
    out = OUT / name
    shutil.rmtree(out, ignore_errors=True)
    model.save_pretrained(str(out), safe_serialization=True)
    cfg_path = out / "adapter_config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg["base_model_name_or_path"] = spec.get("base", "tiny-llama-f32")
    cfg["target_modules"] = sorted(cfg["target_modules"])  # a set in PEFT: fix the order
    write_json(cfg_path, dict(sorted(cfg.items())))
    (out / "README.md").unlink(missing_ok=True)
    if spec["round"] is torch.bfloat16:
        path = out / "adapter_model.safetensors"
        tensors = {k: v.to(torch.bfloat16) for k, v in load_file(str(path)).items()}
        save_file(tensors, str(path), metadata={"format": "pt"})
    return out


def llama_permute(w: np.ndarray, n_head: int) -> np.ndarray:
    """HF Q/K rows -> llama.cpp's order (pairs of each head interleaved)."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def write_gguf(adapter_dir: Path, path: Path, alpha: float, dtype: np.dtype) -> None:
    base_cfg = json.loads((BASE / "config.json").read_text())
    tensors = load_file(str(adapter_dir / "adapter_model.safetensors"))
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_string("general.type", "adapter")
    w.add_string("adapter.type", "lora")
    w.add_float32("adapter.lora.alpha", alpha)
    for key in sorted(tensors):
        if ".lora_A." not in key:
            continue
        prefix = key.split(".lora_A.")[0]
        layer = int(prefix.split(".layers.")[1].split(".")[0])
        module = prefix.rsplit(".", 1)[1]
        a = tensors[key].float().numpy()
        b = tensors[key.replace(".lora_A.", ".lora_B.")].float().numpy()
        if module == "q_proj":
            b = llama_permute(b, base_cfg["num_attention_heads"])
        if module == "k_proj":
            b = llama_permute(b, base_cfg["num_key_value_heads"])
        name = f"blk.{layer}.{GGUF_PART[module]}.weight"
        w.add_tensor(name + ".lora_a", np.ascontiguousarray(a.astype(dtype)))
        w.add_tensor(name + ".lora_b", np.ascontiguousarray(b.astype(dtype)))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def cross_check_llama_cpp(adapter_dir: Path, ours: Path) -> str:
    """Convert with llama.cpp's converter when present; its tensors must equal ours."""
    root = os.environ.get("LLAMA_CPP_DIR")
    if not root or not (Path(root) / "convert_lora_to_gguf.py").is_file():
        return "not run (LLAMA_CPP_DIR unset)"
    with tempfile.TemporaryDirectory() as tmp:
        theirs = Path(tmp) / "lora.gguf"
        subprocess.run([sys.executable, str(Path(root) / "convert_lora_to_gguf.py"), "--base", str(BASE),
                        "--outtype", "f32", "--outfile", str(theirs), str(adapter_dir)], check=True,
                       capture_output=True)
        a, b = gguf.GGUFReader(str(ours)), gguf.GGUFReader(str(theirs))
        ta = {t.name: np.array(t.data) for t in a.tensors}
        tb = {t.name: np.array(t.data) for t in b.tensors}
        assert ta.keys() == tb.keys(), (sorted(ta), sorted(tb))
        for k in ta:
            assert np.array_equal(ta[k], tb[k]), k
        alpha = b.fields["adapter.lora.alpha"]
        assert float(alpha.parts[alpha.data[0]][0]) == float(a.fields["adapter.lora.alpha"].parts[-1][0])
    return "llama.cpp convert_lora_to_gguf.py output has identical tensors and alpha"


def main() -> None:
    torch.manual_seed(0)
    OUT.mkdir(parents=True, exist_ok=True)
    notes = {}
    for name, spec in ADAPTERS.items():
        print(name)
        tok = AutoTokenizer.from_pretrained(str(base_of(spec)))
        model = make_adapter(spec)
        out = save_adapter(name, spec, model)
        if name == "all7":
            write_gguf(out, OUT / "all7.gguf", spec["alpha"], np.float32)
            notes["all7.gguf"] = cross_check_llama_cpp(out, OUT / "all7.gguf")
        if name == "rslora":
            write_gguf(out, OUT / "rslora.gguf", spec["alpha"] * math.sqrt(spec["r"]), np.float16)
        if name == "zero":
            continue
        golden = {
            "model": f"{base_of(spec).name} + PEFT LoRA {name}",
            "adapter": {k: (str(v) if k == "round" else v) for k, v in spec.items()},
            "reference": reference("float32") | {"library": "peft get_peft_model(transformers float32 base, LoraConfig)"},
            "versions": versions() | {"peft": __import__("peft").__version__},
            "prompts": prompt_records(model, tok),
        }
        stem = "tiny-phi3-lora-fused" if name == "phi3-fused" else f"tiny-llama-lora-{name}"
        write_json(FIXTURES / "goldens" / f"{stem}.json", golden)
    print(notes)


if __name__ == "__main__":
    main()
