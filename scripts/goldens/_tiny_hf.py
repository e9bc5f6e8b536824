"""Shared pieces of the tiny random-weight HF checkpoint generators (tiny_llama.py, tiny_qwen.py):
explicit weight init, the tiny tokenizer saved as an HF tokenizer, the prompts, and the
per-prompt golden records.
"""
from __future__ import annotations

import json
from pathlib import Path

import torch
from transformers import PreTrainedTokenizerFast

from _common import write_json
from _lm import TOP_K, prompt_record
from _tiny_tokenizer import CHAT_TEMPLATE, SPECIALS, train_tokenizer

WEIGHT_STD = 0.15
LM_HEAD_STD = 0.3  # sharper logits, so top-1/top-2 margins are rarely tiny
NORM_JITTER = 0.1
N_NEW = 16

PROMPTS = [
    ("hello", "plain", "Hello world! How are you"),
    ("fox", "plain", "The quick brown fox jumps over the lazy dog near the river bank. On Monday the market"),
    ("code", "code", "def add(a, b):\n    return"),
    ("long", "plain", "She opened the window, looked at the garden, and smiled at the birds on the fence. "
                      "The lighthouse keeper wrote the weather into his logbook every evening before dinner. "
                      "Water boils at 100 degrees"),
]
CHAT_MESSAGES = [{"role": "user", "content": "What is the capital of France?"}]


@torch.no_grad()
def init_weights(model: torch.nn.Module, seed: int) -> None:
    """Explicit init independent of transformers: N(0, WEIGHT_STD) matrices, N(0, LM_HEAD_STD) lm_head,
    1 + N(0, NORM_JITTER) norm weights; parameters visited in sorted name order."""""
    gen = torch.Generator().manual_seed(seed)
    for name, p in sorted(model.named_parameters()):
        noise = torch.randn(p.shape, generator=gen, dtype=torch.float32)
        if name.endswith("norm.weight"):
            p.copy_(1.0 + NORM_JITTER * noise)
        elif name == "lm_head.weight":
            p.copy_(LM_HEAD_STD * noise)
        else:
            p.copy_(WEIGHT_STD * noise)


def save_tokenizer(out: Path, pad_token: str | None = None) -> None:
    """The tiny tokenizer as tokenizer.json + tokenizer_config.json (class PreTrainedTokenizerFast).
    `pad_token` names an existing token as padding (Qwen2Tokenizer, which transformers 5 picks
    for qwen2/qwen3 checkpoints, otherwise adds a new `<|endoftext|>` token)."""
    fast = PreTrainedTokenizerFast(
        tokenizer_object=train_tokenizer(), bos_token="<s>", eos_token="</s>", unk_token="<unk>",
        additional_special_tokens=SPECIALS[3:],
    )
    fast.save_pretrained(str(out))
    cfg_path = out / "tokenizer_config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg["chat_template"] = CHAT_TEMPLATE
    cfg["add_bos_token"] = True
    cfg["tokenizer_class"] = "PreTrainedTokenizerFast"
    if pad_token is not None:
        cfg["pad_token"] = pad_token
    write_json(cfg_path, cfg)
    for extra in ("chat_template.jinja", "special_tokens_map.json"):
        (out / extra).unlink(missing_ok=True)


def prompt_list(tok) -> list[tuple[str, str, str, list[int]]]:
    """(name, kind, text, ids). Plain prompts use add_special_tokens=True (BOS prepended by the
    tokenizer's post-processor); the chat prompt's template emits BOS itself and is encoded
    with add_special_tokens=False."""
    out = [(n, k, t, tok(t)["input_ids"]) for n, k, t in PROMPTS]
    chat = tok.apply_chat_template(CHAT_MESSAGES, tokenize=False, add_generation_prompt=True)
    ids = tok(chat, add_special_tokens=False)["input_ids"]
    via = tok.apply_chat_template(CHAT_MESSAGES, tokenize=True, add_generation_prompt=True)
    via = via["input_ids"] if hasattr(via, "keys") else via
    assert list(via) == ids and ids[0] == 1
    out.append(("chat", "chat_template", chat, ids))
    return out


def prompt_records(model, tok) -> list[dict]:
    """The golden record of every prompt (greedy N_NEW tokens + teacher-forced top-k)."""
    records = []
    for pname, kind, text, ids in prompt_list(tok):
        rec, _ = prompt_record(model, tok, pname, kind, text, ids, N_NEW)
        records.append(rec)
        g = rec["greedy"]
        print(f"  {pname}: {len(ids)} ids, consistent={g['consistent_with_teacher_forced']} min_margin={g['min_margin']:.4f}")
    return records


def reference(compute_dtype: str) -> dict:
    """How the goldens were computed."""
    return {
        "library": "transformers AutoModelForCausalLM.from_pretrained(dir, torch_dtype=float32)",
        "compute_dtype": compute_dtype,
        "attn_implementation": "eager", "device": "cpu",
        "tokenizer": "AutoTokenizer.from_pretrained(dir); plain prompts add_special_tokens=True (BOS=1 prepended); chat prompt rendered by chat_template (which emits BOS) and encoded with add_special_tokens=False",
        "greedy": "argmax each step over a full no-cache forward; EOS does not stop; exactly n_new tokens",
        "teacher_forced": "one forward over prompt_ids + greedy ids; row i = logits after tokens[0..=i] (predicts token i+1)",
        "top_k": TOP_K,
    }
