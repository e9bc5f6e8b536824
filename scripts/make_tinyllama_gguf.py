#!/usr/bin/env python3
"""Write a random-weight GGUF with TinyLlama-1.1B's shapes, for speed benchmarks.

    scripts/make_tinyllama_gguf.py OUT.gguf [--type q4_0|q8_0] [--seed N] [--layers N]

Shapes: 22 layers, hidden 2048, 32 query / 4 KV heads (head dim 64), FFN 5632, vocab 32000,
untied output matrix; every 2-D weight (embedding and output included) is stored in the chosen
type, norms in F32. The quants are drawn uniformly at random with one fixed scale per tensor
type, chosen so the weights have a standard deviation of about 0.02: activations stay finite,
and the file is as large and as fast (or slow) to read as a real checkpoint of these shapes.
Quantized blocks are written directly (no float weights are materialized), so a file takes
seconds to make.

The tokenizer is a synthetic SentencePiece-style (`llama`) vocabulary of 32000 pieces:
<unk>, <s>, </s>, the 256 byte tokens <0x00>..<0xFF>, then "▁" and letter sequences, with
descending scores, which llama.cpp and Kestrel both accept. Needs the `gguf` Python package.
"""

import argparse
import itertools
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


def random_blocks(rng, rows, cols, kind):
    """A `rows x cols` matrix of random `kind` blocks, as a uint8 array of shape
    (rows, cols / 32 * block_bytes)."""
    _, block_bytes, q_std, _ = TYPES[kind]
    nb = rows * cols // QK
    blocks = rng.integers(0, 256, size=(nb, block_bytes), dtype=np.uint8)
    scale = np.float16(TARGET_STD / q_std)
    blocks[:, 0:2] = np.frombuffer(scale.tobytes(), dtype=np.uint8)
    return blocks.reshape(rows, cols // QK * block_bytes)


def vocabulary():
    """Tokens, scores and token types of a 32000-piece SentencePiece-style vocabulary."""
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
    types = [gguf.TokenType.UNKNOWN, gguf.TokenType.CONTROL, gguf.TokenType.CONTROL]
    types += [gguf.TokenType.BYTE] * 256
    letters = string.ascii_lowercase
    pieces = ["▁"]
    for length in itertools.count(1):
        for combo in itertools.product(letters, repeat=length):
            word = "".join(combo)
            pieces += [word, "▁" + word]
        if len(tokens) + len(pieces) >= VOCAB:
            break
    pieces = pieces[: VOCAB - len(tokens)]
    tokens += pieces
    types += [gguf.TokenType.NORMAL] * len(pieces)
    scores = [0.0] * 259 + [-float(i) for i in range(len(pieces))]
    return tokens, scores, types


def add_metadata(w, kind, layers):
    w.add_name("tinyllama-shape-random")
    w.add_file_type(TYPES[kind][3])
    w.add_context_length(CONTEXT)
    w.add_embedding_length(HIDDEN)
    w.add_block_count(layers)
    w.add_feed_forward_length(FFN)
    w.add_head_count(HEADS)
    w.add_head_count_kv(KV_HEADS)
    w.add_rope_dimension_count(HEAD_DIM)
    w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_vocab_size(VOCAB)
    tokens, scores, types = vocabulary()
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)
    w.add_add_bos_token(True)
    w.add_add_eos_token(False)


def add_tensors(w, rng, kind, layers):
    qtype = TYPES[kind][0]

    def matrix(name, rows, cols):
        w.add_tensor(name, random_blocks(rng, rows, cols, kind), raw_dtype=qtype)

    def norm(name):
        w.add_tensor(name, np.ones(HIDDEN, dtype=np.float32))

    kv = KV_HEADS * HEAD_DIM
    matrix("token_embd.weight", VOCAB, HIDDEN)
    for i in range(layers):
        norm(f"blk.{i}.attn_norm.weight")
        matrix(f"blk.{i}.attn_q.weight", HIDDEN, HIDDEN)
        matrix(f"blk.{i}.attn_k.weight", kv, HIDDEN)
        matrix(f"blk.{i}.attn_v.weight", kv, HIDDEN)
        matrix(f"blk.{i}.attn_output.weight", HIDDEN, HIDDEN)
        norm(f"blk.{i}.ffn_norm.weight")
        matrix(f"blk.{i}.ffn_gate.weight", FFN, HIDDEN)
        matrix(f"blk.{i}.ffn_up.weight", FFN, HIDDEN)
        matrix(f"blk.{i}.ffn_down.weight", HIDDEN, FFN)
    norm("output_norm.weight")
    matrix("output.weight", VOCAB, HIDDEN)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", help="path of the .gguf file to write")
    ap.add_argument("--type", choices=sorted(TYPES), default="q4_0")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--layers", type=int, default=LAYERS, help="decoder layers (default 22)")
    args = ap.parse_args()
    rng = np.random.default_rng(args.seed)
    w = gguf.GGUFWriter(args.out, "llama")
    add_metadata(w, args.type, args.layers)
    add_tensors(w, rng, args.type, args.layers)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print(args.out)


if __name__ == "__main__":
    main()
