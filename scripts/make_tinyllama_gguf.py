#!/usr/bin/env python3
"""Write a random-weight GGUF with TinyLlama-1.1B's (or Llama-3.2-3B's) shapes, for speed
benchmarks.

    scripts/make_tinyllama_gguf.py OUT.gguf [--type q4_0|q8_0|f16|bf16|f32]
        [--preset tinyllama|llama-3.2-3b] [--seed N] [--layers N]

Shapes (`--preset`, default tinyllama): 22 layers, hidden 2048, 32 query / 4 KV heads (head dim
64), FFN 5632, vocab 32000, untied output matrix, rope theta 10000. `llama-3.2-3b`: 28 layers,
hidden 3072, 24 query / 8 KV heads (head dim 128), FFN 8192, vocab 128256, tied embeddings (no
`output.weight`), rope theta 500000 with Llama 3's long-context rope scaling as a
`rope_freqs.weight` tensor (factor 32, low/high frequency factors 1 and 4, original context
8192) and a context length of 131072, as llama.cpp's converter writes Llama-3.2-3B.

Every 2-D weight (embedding and output included) is stored in the chosen type, norms (and
`rope_freqs.weight`) in F32. Quantized types: the quants are drawn uniformly at random with one
fixed scale per tensor type, chosen so the weights have a standard deviation of about 0.02:
activations stay finite, and the file is as large and as fast (or slow) to read as a real
checkpoint of these shapes. Quantized blocks are written directly (no float weights are
materialized), so a file takes seconds to make. Float types (f16, bf16, f32) hold normal weights
of standard deviation 0.02 (bf16: the f32 draw rounded to nearest even); they are the input for `llama-quantize` (e.g. to Q4_K_M or Q6_K, the
k-quant mixes llama.cpp itself makes). All types are written one tensor at a time, so memory
stays at about the largest tensor (the 3B shape's embedding: 0.8 GB in f16).

The tokenizer is a synthetic SentencePiece-style (`llama`) vocabulary of the preset's size:
<unk>, <s>, </s>, the 256 byte tokens <0x00>..<0xFF>, then "▁" and letter sequences, with
descending scores, which llama.cpp and Kestrel both accept. Needs the `gguf` Python package.
"""

import argparse
import dataclasses
import itertools
import math
import string
import sys

import numpy as np

try:
    import gguf
except ImportError:
    sys.exit("make_tinyllama_gguf.py needs the `gguf` Python package (pip install gguf)")

LAYERS = 22
HIDDEN = 2048
HEADS = 32
KV_HEADS = 4
HEAD_DIM = HIDDEN // HEADS
FFN = 5632
VOCAB = 32000
CONTEXT = 2048
QK = 32
TARGET_STD = 0.02

# Per type: ggml block type, bytes per 32-weight block, the standard deviation of the integer
# quant value (uniform nibble 0..15 minus 8; uniform signed byte), llama.cpp file type.
TYPES = {
    "q4_0": (gguf.GGMLQuantizationType.Q4_0, 18, np.sqrt((16**2 - 1) / 12), gguf.LlamaFileType.MOSTLY_Q4_0),
    "q8_0": (gguf.GGMLQuantizationType.Q8_0, 34, np.sqrt((256**2 - 1) / 12), gguf.LlamaFileType.MOSTLY_Q8_0),
}
# Float types: numpy dtype, llama.cpp file type.
FLOAT_TYPES = {
    "f16": (np.float16, gguf.LlamaFileType.MOSTLY_F16),
    "f32": (np.float32, gguf.LlamaFileType.ALL_F32),
    "bf16": (np.uint16, gguf.LlamaFileType.MOSTLY_BF16),
}


@dataclasses.dataclass(frozen=True)
class Shape:
    name: str
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    ffn: int
    vocab: int
    context: int
    rope_theta: float
    tied: bool = False
    # Llama 3 rope scaling: (factor, low_freq_factor, high_freq_factor, original context).
    llama3_rope: tuple | None = None


PRESETS = {
    "tinyllama": Shape("tinyllama-shape-random", LAYERS, HIDDEN, HEADS, KV_HEADS, HEAD_DIM, FFN,
                       VOCAB, CONTEXT, 10000.0),
    "llama-3.2-3b": Shape("llama-3.2-3b-shape-random", 28, 3072, 24, 8, 128, 8192, 128256, 131072,
                          500000.0, tied=True, llama3_rope=(32.0, 1.0, 4.0, 8192)),
}
TINYLLAMA = PRESETS["tinyllama"]


def random_blocks(rng, rows, cols, kind):
    """A `rows x cols` matrix of random `kind` blocks, as a uint8 array of shape
    (rows, cols / 32 * block_bytes)."""
    _, block_bytes, q_std, _ = TYPES[kind]
    nb = rows * cols // QK
    blocks = rng.integers(0, 256, size=(nb, block_bytes), dtype=np.uint8)
    scale = np.float16(TARGET_STD / q_std)
    blocks[:, 0:2] = np.frombuffer(scale.tobytes(), dtype=np.uint8)
    return blocks.reshape(rows, cols // QK * block_bytes)


def random_floats(rng, rows, cols, dtype, chunk=1 << 22):
    """A `rows x cols` matrix of normal weights (standard deviation TARGET_STD) in `dtype`,
    drawn in f32 a few million at a time."""
    out = np.empty(rows * cols, dtype=dtype)
    for start in range(0, out.size, chunk):
        n = min(chunk, out.size - start)
        x = rng.standard_normal(n, dtype=np.float32)
        x *= TARGET_STD
        out[start:start + n] = x
    return out.reshape(rows, cols)


def random_bf16(rng, rows, cols):
    """`random_floats` rounded to bfloat16 (nearest, ties to even), as the bytes of a `rows x
    cols` BF16 tensor: a uint8 array of shape (rows, 2 * cols)."""
    bits = random_floats(rng, rows, cols, np.float32).view(np.uint32)
    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
    return bits.astype(np.uint16).view(np.uint8).reshape(rows, 2 * cols)


def llama3_rope_factors(shape):
    """`rope_freqs.weight` as llama.cpp's converter computes it for Llama 3.1 / 3.2."""
    factor, low_ff, high_ff, old_ctx = shape.llama3_rope
    low_wavelen, high_wavelen = old_ctx / low_ff, old_ctx / high_ff
    factors = []
    for i in range(0, shape.head_dim, 2):
        freq = 1.0 / (shape.rope_theta ** (i / shape.head_dim))
        wavelen = 2 * math.pi / freq
        if wavelen < high_wavelen:
            factors.append(1.0)
        elif wavelen > low_wavelen:
            factors.append(factor)
        else:
            smooth = (old_ctx / wavelen - low_ff) / (high_ff - low_ff)
            factors.append(1 / ((1 - smooth) / factor + smooth))
    return np.array(factors, dtype=np.float32)


def vocabulary(size=VOCAB):
    """Tokens, scores and token types of a `size`-piece SentencePiece-style vocabulary."""
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
    types = [gguf.TokenType.UNKNOWN, gguf.TokenType.CONTROL, gguf.TokenType.CONTROL]
    types += [gguf.TokenType.BYTE] * 256
    letters = string.ascii_lowercase
    pieces = ["▁"]
    for length in itertools.count(1):
        for combo in itertools.product(letters, repeat=length):
            word = "".join(combo)
            pieces += [word, "▁" + word]
            if len(tokens) + len(pieces) >= size:
                break
        if len(tokens) + len(pieces) >= size:
            break
    pieces = pieces[: size - len(tokens)]
    tokens += pieces
    types += [gguf.TokenType.NORMAL] * len(pieces)
    scores = [0.0] * 259 + [-float(i) for i in range(len(pieces))]
    return tokens, scores, types


def file_type(kind):
    return TYPES[kind][3] if kind in TYPES else FLOAT_TYPES[kind][1]


def add_metadata(w, kind, layers, shape=TINYLLAMA):
    w.add_name(shape.name)
    w.add_file_type(file_type(kind))
    w.add_context_length(shape.context)
    w.add_embedding_length(shape.hidden)
    w.add_block_count(layers)
    w.add_feed_forward_length(shape.ffn)
    w.add_head_count(shape.heads)
    w.add_head_count_kv(shape.kv_heads)
    w.add_rope_dimension_count(shape.head_dim)
    w.add_rope_freq_base(shape.rope_theta)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_vocab_size(shape.vocab)
    tokens, scores, types = vocabulary(shape.vocab)
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)
    w.add_add_bos_token(True)
    w.add_add_eos_token(False)


def tensor_plan(rng, kind, layers, shape=TINYLLAMA):
    """(name, shape, nbytes, raw dtype, numpy dtype, make) per tensor, in file order; `make()`
    draws the tensor's data (in this order, so a seed gives the same file as ever)."""
    plan = []

    def matrix(name, rows, cols):
        if kind in TYPES:
            qtype, block_bytes = TYPES[kind][0], TYPES[kind][1]
            byte_shape = (rows, cols // QK * block_bytes)
            nbytes = rows * cols // QK * block_bytes
            plan.append((name, byte_shape, nbytes, qtype, np.uint8,
                         lambda: random_blocks(rng, rows, cols, kind)))
        elif kind == "bf16":
            plan.append((name, (rows, 2 * cols), 2 * rows * cols, gguf.GGMLQuantizationType.BF16,
                         np.uint8, lambda: random_bf16(rng, rows, cols)))
        else:
            dtype = FLOAT_TYPES[kind][0]
            plan.append((name, (rows, cols), rows * cols * np.dtype(dtype).itemsize, None, dtype,
                         lambda: random_floats(rng, rows, cols, dtype)))

    def f32(name, make, n):
        plan.append((name, (n,), 4 * n, None, np.float32, make))

    def norm(name):
        f32(name, lambda: np.ones(shape.hidden, dtype=np.float32), shape.hidden)

    if shape.llama3_rope is not None:
        f32("rope_freqs.weight", lambda: llama3_rope_factors(shape), shape.head_dim // 2)
    q, kv = shape.heads * shape.head_dim, shape.kv_heads * shape.head_dim
    matrix("token_embd.weight", shape.vocab, shape.hidden)
    for i in range(layers):
        norm(f"blk.{i}.attn_norm.weight")
        matrix(f"blk.{i}.attn_q.weight", q, shape.hidden)
        matrix(f"blk.{i}.attn_k.weight", kv, shape.hidden)
        matrix(f"blk.{i}.attn_v.weight", kv, shape.hidden)
        matrix(f"blk.{i}.attn_output.weight", shape.hidden, q)
        norm(f"blk.{i}.ffn_norm.weight")
        matrix(f"blk.{i}.ffn_gate.weight", shape.ffn, shape.hidden)
        matrix(f"blk.{i}.ffn_up.weight", shape.ffn, shape.hidden)
        matrix(f"blk.{i}.ffn_down.weight", shape.hidden, shape.ffn)
    norm("output_norm.weight")
    if not shape.tied:
        matrix("output.weight", shape.vocab, shape.hidden)
    return plan


def add_tensors(w, rng, kind, layers, shape=TINYLLAMA):
    """Adds every tensor to `w` in memory (for callers that write with write_tensors_to_file)."""
    for name, _, _, raw_dtype, _, make in tensor_plan(rng, kind, layers, shape):
        w.add_tensor(name, make(), raw_dtype=raw_dtype)


def write(path, rng, kind, layers, shape=TINYLLAMA):
    """Writes the file one tensor at a time: memory stays at about the largest tensor."""
    w = gguf.GGUFWriter(path, "llama")
    add_metadata(w, kind, layers, shape)
    plan = tensor_plan(rng, kind, layers, shape)
    for name, tshape, nbytes, raw_dtype, dtype, _ in plan:
        w.add_tensor_info(name, tshape, np.dtype(dtype), nbytes, raw_dtype=raw_dtype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    for _, _, _, _, _, make in plan:
        w.write_tensor_data(make())
    w.close()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", help="path of the .gguf file to write")
    ap.add_argument("--type", choices=sorted(TYPES) + sorted(FLOAT_TYPES), default="q4_0")
    ap.add_argument("--preset", choices=sorted(PRESETS), default="tinyllama",
                    help="model shape (default tinyllama)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--layers", type=int, default=None,
                    help="decoder layers (default: the preset's, 22 for tinyllama)")
    ap.add_argument("--context", type=int, default=None,
                    help="context length written to the file (default: the preset's, 2048 "
                         "for tinyllama; long-context benchmarks need 8192 or more)")
    args = ap.parse_args()
    shape = PRESETS[args.preset]
    if args.context is not None:
        shape = dataclasses.replace(shape, context=args.context)
    layers = shape.layers if args.layers is None else args.layers
    write(args.out, np.random.default_rng(args.seed), args.type, layers, shape)
    print(args.out)


if __name__ == "__main__":
    main()
