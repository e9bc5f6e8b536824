"""Goldens for the real Gemma 3 270M base model (gemma-3-270m-q4_k_m.gguf, fetched by
scripts/fetch_gemma3_270m.sh): transformers' Gemma3ForCausalLM built from the GGUF's own
metadata and its dequantized weights, so Kestrel can be compared with transformers on exactly the
weights it runs.

* Weights: every tensor read with the `gguf` package (gguf-py) and dequantized to float32
  (Q4_K, Q5_0, Q6_K, Q8_0, F32). llama.cpp's converter stores Gemma norm weights as 1 + w, so 1
  is subtracted from every `*norm.weight` before they go into Gemma3RMSNorm (which multiplies by
  1 + w). Gemma GGUFs keep Hugging Face's Q/K row order (NeoX RoPE): no permutation to undo.
* Config: from the GGUF metadata: 18 layers, hidden 640, 4 heads, 1 kv head, head_dim 256,
  query_pre_attn_scalar 256 (= head_dim: the GGUF has no scalar, llama.cpp uses head_dim),
  sliding window 512 on every layer but each 6th (sliding_window_pattern 6), RoPE base 1e6
  global / 1e4 local (llama.cpp's default: the file has no freq_base_swa), tied embeddings.
* Prompt ids: from llama.cpp's llama-tokenize on the same file (BOS prepended; no HF tokenizer is
  available offline). The Rust test checks Kestrel's tokenizer gives the same ids.

Writes tests/fixtures/goldens/gemma3-270m.json in the tiny goldens' format (greedy 16 tokens,
teacher-forced top-20 logits per position), float32 on CPU, eager attention.

Run: python3 scripts/goldens/gemma3_270m_goldens.py [GGUF] (default: the fetch script's path;
     LLAMA_TOKENIZE = path of llama-tokenize)
"""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import torch
from gguf import GGUFReader
from gguf.quants import dequantize
from transformers import Gemma3ForCausalLM, Gemma3TextConfig

from _common import FIXTURES, versions, write_json
from _lm import prompt_record

N_NEW = 16
DEFAULT_TOKENIZE = "/tmp/lcp/llama_cpp_python-0.3.36/vendor/llama.cpp/build/bin/llama-tokenize"
PROMPTS = [
    ("capital", "plain", "The capital of France is"),
    ("story", "plain", "Once upon a time, in a small village at the edge of a great forest, there lived"),
    ("code", "code", "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n"),
]


def default_path() -> Path:
    out = subprocess.run([str(Path(__file__).parent.parent / "fetch_gemma3_270m.sh")],
                         capture_output=True, text=True, check=True)
    return Path(out.stdout.strip())


def field(r: GGUFReader, key: str):
    f = r.fields.get(key)
    return None if f is None else f.contents()


def build_model(r: GGUFReader) -> Gemma3ForCausalLM:
    a = "gemma3"
    n_layers = field(r, f"{a}.block_count")
    head_dim = field(r, f"{a}.attention.key_length")
    vocab = len(field(r, "tokenizer.ggml.tokens"))
    assert field(r, f"{a}.rope.freq_base_swa") is None and field(r, f"{a}.attention.sliding_window_pattern") is None
    cfg = Gemma3TextConfig(
        vocab_size=vocab, hidden_size=field(r, f"{a}.embedding_length"),
        intermediate_size=field(r, f"{a}.feed_forward_length"), num_hidden_layers=n_layers,
        num_attention_heads=field(r, f"{a}.attention.head_count"),
        num_key_value_heads=field(r, f"{a}.attention.head_count_kv"), head_dim=head_dim,
        query_pre_attn_scalar=head_dim, sliding_window=field(r, f"{a}.attention.sliding_window"),
        max_position_embeddings=field(r, f"{a}.context_length"),
        rms_norm_eps=field(r, f"{a}.attention.layer_norm_rms_epsilon"),
        rope_parameters={"full_attention": {"rope_type": "default", "rope_theta": field(r, f"{a}.rope.freq_base")},
                         "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0}},
        final_logit_softcapping=field(r, f"{a}.final_logit_softcapping"), attn_logit_softcapping=None,
        hidden_activation="gelu_pytorch_tanh", tie_word_embeddings=True,
        bos_token_id=field(r, "tokenizer.ggml.bos_token_id"), eos_token_id=field(r, "tokenizer.ggml.eos_token_id"),
        pad_token_id=field(r, "tokenizer.ggml.padding_token_id"),
    )
    # Built on the CPU (not the meta device): the rotary inverse frequencies are buffers made
    # at construction, which to_empty() would leave uninitialized.
    model = Gemma3ForCausalLM(cfg).to(torch.float32)
    state = {}
    hf_part = {"attn_norm": "input_layernorm", "post_attention_norm": "post_attention_layernorm",
               "ffn_norm": "pre_feedforward_layernorm", "post_ffw_norm": "post_feedforward_layernorm",
               "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
               "attn_output": "self_attn.o_proj", "attn_q_norm": "self_attn.q_norm", "attn_k_norm": "self_attn.k_norm",
               "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj", "ffn_down": "mlp.down_proj"}
    for t in r.tensors:
        w = dequantize(t.data, t.tensor_type).astype(np.float32)
        w = w.reshape([int(d) for d in reversed(t.shape)])
        name = t.name.removesuffix(".weight")
        if name == "token_embd":
            hf = "model.embed_tokens"
        elif name == "output_norm":
            hf = "model.norm"
        else:
            _, layer, part = name.split(".", 2)
            hf = f"model.layers.{layer}.{hf_part[part]}"
        if t.name.endswith("norm.weight"):
            w = w - 1.0
        state[hf + ".weight"] = torch.from_numpy(np.ascontiguousarray(w))
    missing, unexpected = model.load_state_dict(state, strict=False)
    assert not unexpected and set(missing) <= {"lm_head.weight"}, (missing, unexpected)
    model.tie_weights()
    model.config._attn_implementation = "eager"
    model.model.embed_tokens.embed_scale = torch.tensor(cfg.hidden_size ** 0.5, dtype=torch.float32)
    return model.eval()


class GgufPieces:
    """Decodes ids with the GGUF's SentencePiece pieces (for the record's text fields only)."""

    def __init__(self, r: GGUFReader):
        self.pieces = field(r, "tokenizer.ggml.tokens")

    def decode(self, ids, skip_special_tokens=False):
        return "".join(self.pieces[i] for i in ids).replace("\u2581", " ")


def tokenize(path: Path, text: str) -> list[int]:
    exe = Path(__import__("os").environ.get("LLAMA_TOKENIZE", DEFAULT_TOKENIZE))
    out = subprocess.run([str(exe), "-m", str(path), "-p", text, "--ids", "--log-disable"],
                         capture_output=True, text=True, check=True)
    line = [l for l in out.stdout.splitlines() if l.startswith("[")][-1]
    return [int(x) for x in line.strip("[]").split(",")]


def main() -> None:
    torch.set_num_threads(2)
    path = Path(sys.argv[1]) if len(sys.argv) > 1 else default_path()
    r = GGUFReader(str(path))
    model = build_model(r)
    print(f"layer_types {model.config.layer_types}")
    tok = GgufPieces(r)
    records = []
    for name, kind, text in PROMPTS:
        ids = tokenize(path, text)
        rec, _ = prompt_record(model, tok, name, kind, text, ids, N_NEW)
        print(f"  {name}: {len(ids)} ids -> {rec['greedy']['text']!r} (min margin {rec['greedy']['min_margin']:.3f})")
        records.append(rec)
    write_json(FIXTURES / "goldens" / "gemma3-270m.json", {
        "generator": "scripts/goldens/gemma3_270m_goldens.py",
        "versions": versions(),
        "model_file": path.name,
        "sha256": "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
        "reference": "transformers Gemma3ForCausalLM (float32, eager, CPU) on the GGUF's dequantized weights "
                     "(gguf-py), norms minus 1; prompt ids from llama.cpp's llama-tokenize (BOS prepended)",
        "prompts": records,
    })


if __name__ == "__main__":
    main()
