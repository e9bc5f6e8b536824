"""A random rank-8 LoRA adapter on the real SmolLM2-135M-Instruct Q4_1 GGUF, with goldens from
PEFT on transformers' dequantized float32 model (as smollm2_goldens.py makes the base goldens).

Writes:
  tests/fixtures/lora/smollm2-r8/       PEFT adapter: r=8, lora_alpha=16, all seven projections
                                        of layers 3 and 20 (layers_to_transform, to keep the
                                        fixture small); A, B ~ N(0, 0.05) rounded to and stored
                                        as BF16
  tests/fixtures/goldens/smollm2-lora-r8.json   per-prompt records (plain, chat, code), plus
                                        how far the adapter moves the reference's logits

Run: python3 scripts/goldens/smollm2_lora.py   (uses $KESTREL_DEFAULT_MODEL if set)
"""
from __future__ import annotations

import hashlib
import json
import shutil

import torch
from peft import LoraConfig, get_peft_model
from safetensors.torch import load_file, save_file
from transformers import AutoModelForCausalLM, AutoTokenizer

from _common import FIXTURES, smollm2_path, versions, write_json
from _lm import logits_for, prompt_record
from smollm2_goldens import prompts

OUT = FIXTURES / "lora" / "smollm2-r8"
N_NEW = 16
STD = 0.05
SEED = 21
LAYERS = [3, 20]
TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def main() -> None:
    path = smollm2_path()
    torch.manual_seed(0)
    torch.set_num_threads(2)
    tok = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
    base = AutoModelForCausalLM.from_pretrained(
        str(path.parent), gguf_file=path.name, torch_dtype=torch.float32, attn_implementation="eager"
    ).eval()
    chosen = [p for p in prompts(tok) if p[0] in ("plain", "chat", "code")]
    base_logits = {name: logits_for(base, ids) for name, _, _, ids in chosen}
    cfg = LoraConfig(r=8, lora_alpha=16, target_modules=TARGETS, layers_to_transform=LAYERS,
                     lora_dropout=0.0, bias="none", task_type="CAUSAL_LM")
    model = get_peft_model(base, cfg).eval()
    gen = torch.Generator().manual_seed(SEED)
    with torch.no_grad():
        for name, p in sorted(model.named_parameters()):
            if "lora_A" in name or "lora_B" in name:
                p.copy_((STD * torch.randn(p.shape, generator=gen)).to(torch.bfloat16).float())
    shutil.rmtree(OUT, ignore_errors=True)
    model.save_pretrained(str(OUT), safe_serialization=True)
    (OUT / "README.md").unlink(missing_ok=True)
    cfg_path = OUT / "adapter_config.json"
    c = json.loads(cfg_path.read_text())
    c["base_model_name_or_path"] = path.name
    c["target_modules"] = sorted(c["target_modules"])  # a set in PEFT: fix the order
    write_json(cfg_path, dict(sorted(c.items())))
    st = OUT / "adapter_model.safetensors"
    save_file({k: v.to(torch.bfloat16) for k, v in load_file(str(st)).items()}, str(st), metadata={"format": "pt"})
    records, shifts = [], {}
    for name, kind, text, ids in chosen:
        rec, _ = prompt_record(model, tok, name, kind, text, ids, N_NEW)
        shifts[name] = float((logits_for(model, ids) - base_logits[name]).abs().max())
        records.append(rec)
        print(f"{name}: {len(ids)} ids, adapter moves logits by up to {shifts[name]:.3f}; -> {rec['greedy']['text']!r}")
    write_json(FIXTURES / "goldens" / "smollm2-lora-r8.json", {
        "generator": "scripts/goldens/smollm2_lora.py",
        "versions": versions() | {"peft": __import__("peft").__version__},
        "model": {"file": path.name, "sha256": hashlib.sha256(path.read_bytes()).hexdigest()},
        "adapter": {"r": 8, "lora_alpha": 16, "targets": TARGETS, "layers": LAYERS, "std": STD, "seed": SEED,
                    "stored_as": "bfloat16"},
        "reference": "peft get_peft_model over transformers AutoModelForCausalLM.from_pretrained(dir, gguf_file=..., torch_dtype=float32), eager attention, CPU",
        "max_abs_logit_shift_vs_base_prompt_rows": shifts,
        "prompts": records,
    })


if __name__ == "__main__":
    main()
