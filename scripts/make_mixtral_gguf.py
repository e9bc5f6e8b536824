#!/usr/bin/env python3
"""Write a random-weight Mixtral-shape GGUF (8 experts, top-2, about 1.06 B parameters), for
speed benchmarks.

    scripts/make_mixtral_gguf.py OUT.gguf [--type q4_0|q8_0] [--seed N] [--layers N]

Shapes: 11 layers, hidden 1024, 16 query / 4 KV heads (head dim 64), 8 experts of FFN 3584 per
layer with 2 used per token, vocab 32000, untied output matrix: 1.06 B parameters in all, about
0.30 B of them read per token. The file is arch `llama` with `llama.expert_count` /
`llama.expert_used_count`, as llama.cpp's converter writes Mixtral: the experts of each layer
are stacked into 3-D tensors `blk.N.ffn_{gate,up,down}_exps.weight` ([8, 3584, 1024] and
[8, 1024, 3584]) and the router is `blk.N.ffn_gate_inp.weight` (F32, [8, 1024]). Every other
2-D weight is stored in the chosen type, norms in F32; quantized blocks are drawn at random as
in make_tinyllama_gguf.py (whose vocabulary and metadata this reuses). Needs the `gguf` package.
"""

import argparse
import sys

import numpy as np

import make_tinyllama_gguf as tiny

gguf = tiny.gguf

LAYERS = 11
HIDDEN = 1024
HEADS = 16
KV_HEADS = 4
HEAD_DIM = HIDDEN // HEADS
FFN = 3584
EXPERTS = 8
USED = 2
VOCAB = tiny.VOCAB
ROUTER_STD = 0.02


def add_metadata(w, kind, layers):
    tiny.add_metadata(w, kind, layers)
    # Override the TinyLlama shapes (GGUFWriter keeps the last value written for a key).
    w.add_embedding_length(HIDDEN)
    w.add_feed_forward_length(FFN)
    w.add_head_count(HEADS)
    w.add_head_count_kv(KV_HEADS)
    w.add_rope_dimension_count(HEAD_DIM)
    w.add_expert_count(EXPERTS)
    w.add_expert_used_count(USED)
    w.add_name("mixtral-shape-random")


def add_tensors(w, rng, kind, layers):
    qtype = tiny.TYPES[kind][0]

    def matrix(name, rows, cols):
        w.add_tensor(name, tiny.random_blocks(rng, rows, cols, kind), raw_dtype=qtype)

    def experts(name, rows, cols):
        blocks = [tiny.random_blocks(rng, rows, cols, kind) for _ in range(EXPERTS)]
        w.add_tensor(name, np.stack(blocks), raw_dtype=qtype)

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
        router = rng.normal(0.0, ROUTER_STD, size=(EXPERTS, HIDDEN)).astype(np.float32)
        w.add_tensor(f"blk.{i}.ffn_gate_inp.weight", router)
        experts(f"blk.{i}.ffn_gate_exps.weight", FFN, HIDDEN)
        experts(f"blk.{i}.ffn_up_exps.weight", FFN, HIDDEN)
        experts(f"blk.{i}.ffn_down_exps.weight", HIDDEN, FFN)
    norm("output_norm.weight")
    matrix("output.weight", VOCAB, HIDDEN)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", help="path of the .gguf file to write")
    ap.add_argument("--type", choices=sorted(tiny.TYPES), default="q4_0")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--layers", type=int, default=LAYERS, help="decoder layers (default 11)")
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
    sys.exit(main())
