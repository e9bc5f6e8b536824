"""Golden outputs of the real SmolLM2-135M-Instruct Q4_1 GGUF, computed by HF transformers.

transformers loads the GGUF, dequantizes every tensor with gguf-py to float32, undoes
llama.cpp's Q/K row permutation, and runs its own Llama forward in float32 (eager attention).

Writes tests/fixtures/goldens/:
  smollm2.json                               facts about the file + per-prompt records
  smollm2_<prompt>_last_prompt_logits.f32.bin full vocab logits at the last prompt position

Run: python3 scripts/goldens/smollm2_goldens.py   (uses $KESTREL_DEFAULT_MODEL if set)
"""
from __future__ import annotations

import hashlib

import numpy as np
import torch
import gguf
from gguf.quants import dequantize
from transformers import AutoModelForCausalLM, AutoTokenizer

from _common import FIXTURES, smollm2_path, versions, write_f32, write_json
from _lm import TOP_K, prompt_record

OUT = FIXTURES / "goldens"
N_NEW = 32
LOGITS_BIN_PROMPTS = ("plain", "chat")

LONG_PARAGRAPH = (
    "The old lighthouse on the northern cape was built in 1872 from granite blocks that were "
    "carried by boat from a quarry two days to the south. For almost a century its keepers "
    "lived in a small stone cottage at the foot of the tower, trimming the wick every few hours "
    "and writing the weather into a thick leather logbook. The logbooks survive today in the "
    "town museum, and they tell a quiet story: storms that lasted a week, supply ships that "
    "arrived late, a winter when the sea froze close to the shore, and the slow arrival of new "
    "technology, from a clockwork mechanism that turned the lens to the electric lamp that "
    "finally replaced the oil flame in 1957. When the light was automated in 1969, the last "
    "keeper moved into the village, but he still walked up the hill every evening to watch the "
    "beam sweep across the water. Visitors who climb the spiral staircase now can see the "
    "original lens, polished and silent, and read his final entry in the log, which simply says"
)


def prompts(tok) -> list[tuple[str, str, str, list[int]]]:
    """(name, kind, text, ids) for each prompt; chat text is rendered by the model's template."""
    msgs = [{"role": "user", "content": "What is the capital of France? Answer in one sentence."}]
    chat_text = tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
    raw = [
        ("plain", "plain", "The capital of France is"),
        ("chat", "chat_template", chat_text),
        ("code", "code", "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n"),
        ("digits", "digits", "Compute: 1234 + 5678 = 6912. Next, 98765 - 4321 ="),
        ("long", "long_paragraph", LONG_PARAGRAPH),
    ]
    out = []
    for name, kind, text in raw:
        ids = tok(text, add_special_tokens=False)["input_ids"]
        if name == "chat":
            via_template = tok.apply_chat_template(msgs, tokenize=True, add_generation_prompt=True)
            if hasattr(via_template, "keys"):
                via_template = via_template["input_ids"]
            assert list(via_template) == ids, "chat ids differ between render+encode and template"
        out.append((name, kind, text, ids))
    return out


def gguf_meta(reader: gguf.GGUFReader) -> dict:
    keep = (
        "general.architecture", "llama.block_count", "llama.context_length", "llama.embedding_length",
        "llama.feed_forward_length", "llama.attention.head_count", "llama.attention.head_count_kv",
        "llama.rope.freq_base", "llama.rope.dimension_count", "llama.attention.layer_norm_rms_epsilon",
        "llama.vocab_size", "general.file_type", "tokenizer.ggml.model", "tokenizer.ggml.pre",
        "tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id", "tokenizer.ggml.padding_token_id",
        "tokenizer.ggml.unknown_token_id", "tokenizer.ggml.add_bos_token", "tokenizer.ggml.add_space_prefix",
    )
    return {k: reader.fields[k].contents() for k in keep if k in reader.fields}


def tensor_facts(reader: gguf.GGUFReader) -> dict:
    types: dict[str, str] = {}
    for t in reader.tensors:
        key = t.name if not t.name.startswith("blk.") else "blk.*." + t.name.split(".", 2)[2]
        types.setdefault(key, t.tensor_type.name)
    names = {t.name for t in reader.tensors}
    return {"tensor_types": dict(sorted(types.items())), "has_output_weight": "output.weight" in names,
            "tensor_count": len(reader.tensors)}


def tokenizer_facts(reader: gguf.GGUFReader, tok) -> dict:
    """Facts about the vocabulary and how transformers tokenizes it."""
    toks = reader.fields["tokenizer.ggml.tokens"].contents()
    ttype = reader.fields["tokenizer.ggml.token_type"].contents()
    multi_digit = [t for t in toks if len(t.lstrip("\u0120")) > 1 and t.lstrip("\u0120").isdigit()]
    return {
        "n_tokens": len(toks),
        "n_merges": len(reader.fields["tokenizer.ggml.merges"].contents()),
        "control_tokens": {str(i): toks[i] for i in range(len(toks)) if ttype[i] == 3},
        "token_type_counts": {str(k): ttype.count(k) for k in sorted(set(ttype))},
        "has_multi_digit_tokens": bool(multi_digit),
        "hf_pre_tokenizer": str(tok.backend_tokenizer.pre_tokenizer),
        "note": "transformers has no special split for pre='smollm' and uses the GPT-2 byte-level regex; "
                "the vocabulary has single-digit number tokens only, so digits always come out one per token",
    }


def rope_interleaved(x: np.ndarray, pos: int, theta: float) -> np.ndarray:
    """GGML 'NORM' rope: rotate adjacent pairs (2i, 2i+1) with frequency index i."""
    d = x.shape[-1]
    ang = pos * theta ** (-np.arange(0, d, 2, dtype=np.float64) / d)
    a, b = x[..., 0::2], x[..., 1::2]
    out = np.empty_like(x)
    out[..., 0::2] = a * np.cos(ang) - b * np.sin(ang)
    out[..., 1::2] = a * np.sin(ang) + b * np.cos(ang)
    return out


def rope_half(x: np.ndarray, pos: int, theta: float) -> np.ndarray:
    """HF rope: rotate pairs (i, i + d/2) with frequency index i (rotate_half)."""
    d = x.shape[-1]
    ang = pos * theta ** (-np.arange(0, d, 2, dtype=np.float64) / d)
    a, b = x[..., : d // 2], x[..., d // 2 :]
    return np.concatenate([a * np.cos(ang) - b * np.sin(ang), a * np.sin(ang) + b * np.cos(ang)], axis=-1)


def verify_layout(reader: gguf.GGUFReader, model, meta: dict) -> dict:
    """Check how HF's weights relate to the raw GGUF tensors; returns the verified facts."""
    by_name = {t.name: t for t in reader.tensors}
    deq = lambda n: dequantize(np.asarray(by_name[n].data), by_name[n].tensor_type).astype(np.float64)
    theta = float(meta["llama.rope.freq_base"])
    n_head, n_kv = int(meta["llama.attention.head_count"]), int(meta["llama.attention.head_count_kv"])
    hd = int(meta["llama.embedding_length"]) // n_head
    emb = model.model.embed_tokens.weight.detach().double().numpy()
    facts = {
        "embed_equals_dequantized_token_embd": bool(np.array_equal(emb, deq("token_embd.weight"))),
        "lm_head_tied_to_embed": model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr(),
        "hf_weight_dtype": str(model.model.embed_tokens.weight.dtype),
        "head_dim": hd,
    }
    rng = np.random.default_rng(0)
    x = rng.standard_normal(int(meta["llama.embedding_length"]))
    ok_perm, ok_rope = True, True
    for proj, heads in (("q", n_head), ("k", n_kv)):
        w_g = deq(f"blk.0.attn_{proj}.weight")  # rows in GGUF (llama.cpp-permuted) order
        w_h = getattr(model.model.layers[0].self_attn, f"{proj}_proj").weight.detach().double().numpy()
        # GGUF row h*hd + 2*j + s  ==  HF row h*hd + s*hd/2 + j
        perm = np.array([h * hd + s * (hd // 2) + j for h in range(heads) for j in range(hd // 2) for s in range(2)])
        ok_perm &= bool(np.array_equal(w_h[perm], w_g))
        qg = rope_interleaved((w_g @ x).reshape(heads, hd), 7, theta)
        qh = rope_half((w_h @ x).reshape(heads, hd), 7, theta)
        ok_rope &= bool(np.allclose(qh.reshape(-1)[perm], qg.reshape(-1), atol=1e-9))
    facts["hf_qk_rows_are_gguf_rows_depermuted"] = ok_perm
    facts["gguf_layout_with_adjacent_pair_rope_equals_hf_rotate_half"] = ok_rope
    return facts


def main() -> None:
    path = smollm2_path()
    torch.manual_seed(0)
    torch.set_num_threads(2)
    reader = gguf.GGUFReader(str(path))
    meta = gguf_meta(reader)
    tok = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
    model = AutoModelForCausalLM.from_pretrained(
        str(path.parent), gguf_file=path.name, torch_dtype=torch.float32, attn_implementation="eager"
    ).eval()
    facts = {**tensor_facts(reader), **verify_layout(reader, model, meta), "tokenizer": tokenizer_facts(reader, tok)}
    facts["hf_config"] = {k: getattr(model.config, k, None) for k in (
        "num_hidden_layers", "hidden_size", "intermediate_size", "num_attention_heads",
        "num_key_value_heads", "rms_norm_eps", "vocab_size", "tie_word_embeddings",
        "bos_token_id", "eos_token_id", "max_position_embeddings")}
    facts["hf_config"]["rope_parameters"] = getattr(model.config, "rope_parameters", None)
    records = []
    for name, kind, text, ids in prompts(tok):
        rec, logits = prompt_record(model, tok, name, kind, text, ids, N_NEW)
        if name in LOGITS_BIN_PROMPTS:
            fname = f"smollm2_{name}_last_prompt_logits.f32.bin"
            write_f32(OUT / fname, logits[len(ids) - 1].numpy())
            rec["last_prompt_logits_file"] = fname
        records.append(rec)
        g = rec["greedy"]
        print(f"{name}: {len(ids)} prompt ids, consistent={g['consistent_with_teacher_forced']} "
              f"min_margin={g['min_margin']:.4f} -> {g['text']!r}")
    golden = {
        "generator": "scripts/goldens/smollm2_goldens.py",
        "versions": versions(),
        "model": {"file": path.name, "sha256": hashlib.sha256(path.read_bytes()).hexdigest(),
                  "gguf_metadata": meta, "verified": facts},
        "reference": {
            "library": "transformers AutoModelForCausalLM.from_pretrained(dir, gguf_file=..., torch_dtype=float32)",
            "compute_dtype": "float32", "attn_implementation": "eager", "device": "cpu",
            "tokenizer": "transformers AutoTokenizer.from_pretrained(dir, gguf_file=...); ids encoded with add_special_tokens=False",
            "greedy": "argmax each step over a full no-cache forward; EOS does not stop; exactly n_new tokens",
            "teacher_forced": "one forward over prompt_ids + greedy ids; row i = logits after tokens[0..=i] (predicts token i+1)",
            "top_k": TOP_K,
        },
        "prompts": records,
    }
    write_json(OUT / "smollm2.json", golden)


if __name__ == "__main__":
    main()
