"""Reference computations on a HF causal LM: greedy decoding and teacher-forced top-k.

All math runs in float32 on CPU with the eager attention implementation.
"""
from __future__ import annotations

import numpy as np
import torch

TOP_K = 20


def f32(x: float) -> float:
    """Shortest decimal that round-trips to the same f32 (parsed back exactly as f32)."""
    return float(str(np.float32(x)))


@torch.no_grad()
def logits_for(model, ids: list[int]) -> torch.Tensor:
    """Logits [len(ids), vocab] in float32 from one full forward pass (no KV cache)."""
    inp = torch.tensor([ids], dtype=torch.long)
    out = model(input_ids=inp, use_cache=False)
    return out.logits[0].float()


@torch.no_grad()
def greedy(model, prompt_ids: list[int], n_new: int) -> list[int]:
    """Greedy argmax continuation of n_new tokens; EOS does not stop it.

    Each step recomputes the full sequence without a KV cache, so each token is the
    argmax of exactly the computation the teacher-forced pass repeats.
    """
    ids = list(prompt_ids)
    for _ in range(n_new):
        ids.append(int(torch.argmax(logits_for(model, ids)[-1])))
    return ids[len(prompt_ids):]


def teacher_forced(model, ids: list[int], top_k: int = TOP_K) -> tuple[dict, torch.Tensor]:
    """Per-position top-1/top-2/margin/top-k of one forward over ids; also returns the logits."""
    logits = logits_for(model, ids)
    vals, idx = torch.topk(logits, k=top_k, dim=-1)  # sorted descending
    rec = {
        "top1": idx[:, 0].tolist(),
        "top2": idx[:, 1].tolist(),
        "margin": [f32(v) for v in (vals[:, 0] - vals[:, 1]).tolist()],
        "topk_ids": idx.tolist(),
        "topk_logits": [[f32(v) for v in row] for row in vals.tolist()],
    }
    return rec, logits


def prompt_record(model, tok, name: str, kind: str, text: str, prompt_ids: list[int], n_new: int) -> tuple[dict, torch.Tensor]:
    """Everything recorded for one prompt; also returns the full teacher-forced logits."""
    cont = greedy(model, prompt_ids, n_new)
    full = prompt_ids + cont
    tf, logits = teacher_forced(model, full)
    p = len(prompt_ids)
    # Consistency: the teacher-forced argmax at positions p-1..p+n_new-2 must reproduce cont.
    tf_cont = tf["top1"][p - 1 : p - 1 + n_new]
    margins = tf["margin"][p - 1 : p - 1 + n_new]
    rec = {
        "name": name,
        "kind": kind,
        "text": text,
        "prompt_ids": prompt_ids,
        "n_prompt": p,
        "greedy": {
            "n_new": n_new,
            "ids": cont,
            "text": tok.decode(cont, skip_special_tokens=False),
            "full_text": tok.decode(full, skip_special_tokens=False),
            "consistent_with_teacher_forced": tf_cont == cont,
            "min_margin": min(margins),
        },
        "teacher_forced": {"ids": full, **tf},
    }
    return rec, logits
