#!/usr/bin/env python3
"""Write a random-weight GGUF with the layer shapes of gpt-oss-20b or DeepSeek-V2-Lite, for
speed benchmarks of the sparse families beside llama.cpp.

    scripts/make_sparse_shape_gguf.py OUT.gguf --family gpt-oss|deepseek2 [--layers N] [--seed N]

Both files are laid out as llama.cpp's converter writes the real checkpoints, with only the
number of layers cut down (the full models do not fit the benchmark host's disk):

* `gpt-oss` (gpt-oss-20b): hidden 2880, 64 query / 8 KV heads of 64 (biases, a learned sink
  logit per head), sliding window 128 on even layers, YaRN (factor 32 over 4096, theta 150000),
  32 experts of FFN 2880 with 4 used per token (router with bias, experts with biases), vocab
  201088, untied output. Experts are written in MXFP4 as the converter repacks them from the
  checkpoint (E8M0 scale byte, then 16 bytes of E2M1 nibbles per 32 weights); the attention
  matrices in BF16 (the converter's type, so `llama-quantize MXFP4_MOE` has them to quantize);
  the embedding and output matrices directly in Q8_0, the type `llama-quantize MXFP4_MOE` gives
  them (writing them as BF16 first would double the file for no difference).
* `deepseek2` (DeepSeek-V2-Lite): hidden 2048, 16 heads, no query bottleneck (`attn_q`;
  `attention.q_lora_rank` 0, which llama.cpp reads as "none" whatever the layer count),
  `kv_lora_rank` 512, `qk_nope` 128, `qk_rope` 64, `v_head` 128 (`kv_b` split into
  `attn_k_b` / `attn_v_b`), layer 0 dense (FFN 10944), the others 64 routed experts of FFN 1408
  with 6 used per token (softmax) plus 2 shared experts, YaRN (factor 40 over 4096, mscale_all_dim
  0.707), vocab 102400, untied output. Every matrix is Q8_0, the input for `llama-quantize
  --allow-requantize` to Q4_K_M or IQ2_XXS.

Routers, norms, biases and sinks are F32. Weights are random with a standard deviation of about
0.02 (quantized blocks drawn directly, as in make_tinyllama_gguf.py), so activations stay finite.
The tokenizer (byte-level BPE, its merges, special tokens and chat template) is the one of the
tiny fixture of the same family (tests/fixtures/tiny-gpt-oss.gguf, tiny-deepseek-v2.gguf),
padded to the real vocabulary size with plain tokens `<|pad_N|>`; llama.cpp and Kestrel both
load it. Tensors are written one at a time, so memory stays at about one layer's experts.
Needs numpy and the `gguf` package.
"""

import argparse
import dataclasses
import os
import sys

import numpy as np

import make_tinyllama_gguf as tiny

gguf = tiny.gguf
QK = 32
Q = gguf.GGMLQuantizationType
ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
# E8M0 exponent byte of the random MXFP4 blocks: E2M1 nibbles drawn uniformly have a standard
# deviation of 2.93, times 2^(120-127) gives about 0.023.
MXFP4_SCALE_BYTE = 120


@dataclasses.dataclass(frozen=True)
class Family:
    arch: str
    layers: int
    vocab: int
    tokenizer_fixture: str


FAMILIES = {
    "gpt-oss": Family("gpt-oss", 3, 201088, "tests/fixtures/tiny-gpt-oss.gguf"),
    "deepseek2": Family("deepseek2", 3, 102400, "tests/fixtures/tiny-deepseek-v2.gguf"),
}

# gpt-oss-20b
GO_HIDDEN, GO_HEADS, GO_KV_HEADS, GO_HEAD_DIM = 2880, 64, 8, 64
GO_EXPERTS, GO_USED, GO_FFN, GO_WINDOW = 32, 4, 2880, 128
# DeepSeek-V2-Lite
DS_HIDDEN, DS_HEADS, DS_KV_LORA, DS_NOPE, DS_ROPE, DS_V = 2048, 16, 512, 128, 64, 128
DS_EXPERTS, DS_USED, DS_SHARED, DS_MOE_FFN, DS_DENSE_FFN = 64, 6, 2, 1408, 10944


class Plan:
    """Tensors in file order: (name, numpy shape of the stored bytes, nbytes, raw type,
    numpy dtype, make)."""

    def __init__(self, rng):
        self.rng = rng
        self.items = []

    def q8_0(self, name, rows, cols, experts=None):
        nb = rows * cols // QK * 34
        n = experts or 1
        shape = (rows, cols // QK * 34) if experts is None else (experts, rows, cols // QK * 34)
        make = lambda: np.stack([tiny.random_blocks(self.rng, rows, cols, "q8_0")
                                 for _ in range(n)]).reshape(shape)
        self.items.append((name, shape, n * nb, Q.Q8_0, np.uint8, make))

    def mxfp4(self, name, rows, cols, experts):
        shape = (experts, rows, cols // QK * 17)

        def make():
            blocks = self.rng.integers(0, 256, size=(experts * rows * cols // QK, 17), dtype=np.uint8)
            blocks[:, 0] = MXFP4_SCALE_BYTE
            return blocks.reshape(shape)

        self.items.append((name, shape, experts * rows * cols // QK * 17, Q.MXFP4, np.uint8, make))

    def bf16(self, name, rows, cols):
        self.items.append((name, (rows, 2 * cols), 2 * rows * cols, Q.BF16, np.uint8,
                           lambda: tiny.random_bf16(self.rng, rows, cols)))

    def f32(self, name, shape, make):
        n = int(np.prod(shape))
        self.items.append((name, shape, 4 * n, None, np.float32,
                           lambda: make(shape).astype(np.float32)))

    def ones(self, name, n):
        self.f32(name, (n,), np.ones)

    def normal(self, name, shape, std=0.02):
        self.f32(name, shape, lambda s: self.rng.normal(0.0, std, size=s))


def gpt_oss_plan(rng, layers, vocab):
    p = Plan(rng)
    q, kv = GO_HEADS * GO_HEAD_DIM, GO_KV_HEADS * GO_HEAD_DIM
    p.q8_0("token_embd.weight", vocab, GO_HIDDEN)
    for i in range(layers):
        b = f"blk.{i}."
        p.ones(b + "attn_norm.weight", GO_HIDDEN)
        p.bf16(b + "attn_q.weight", q, GO_HIDDEN)
        p.normal(b + "attn_q.bias", (q,))
        p.bf16(b + "attn_k.weight", kv, GO_HIDDEN)
        p.normal(b + "attn_k.bias", (kv,))
        p.bf16(b + "attn_v.weight", kv, GO_HIDDEN)
        p.normal(b + "attn_v.bias", (kv,))
        p.bf16(b + "attn_output.weight", GO_HIDDEN, q)
        p.normal(b + "attn_output.bias", (GO_HIDDEN,))
        p.normal(b + "attn_sinks.weight", (GO_HEADS,), 1.0)
        p.ones(b + "post_attention_norm.weight", GO_HIDDEN)
        p.normal(b + "ffn_gate_inp.weight", (GO_EXPERTS, GO_HIDDEN))
        p.normal(b + "ffn_gate_inp.bias", (GO_EXPERTS,))
        p.mxfp4(b + "ffn_gate_exps.weight", GO_FFN, GO_HIDDEN, GO_EXPERTS)
        p.normal(b + "ffn_gate_exps.bias", (GO_EXPERTS, GO_FFN))
        p.mxfp4(b + "ffn_up_exps.weight", GO_FFN, GO_HIDDEN, GO_EXPERTS)
        p.normal(b + "ffn_up_exps.bias", (GO_EXPERTS, GO_FFN))
        p.mxfp4(b + "ffn_down_exps.weight", GO_HIDDEN, GO_FFN, GO_EXPERTS)
        p.normal(b + "ffn_down_exps.bias", (GO_EXPERTS, GO_HIDDEN))
    p.ones("output_norm.weight", GO_HIDDEN)
    p.q8_0("output.weight", vocab, GO_HIDDEN)
    return p.items


def deepseek_plan(rng, layers, vocab):
    p = Plan(rng)
    qk = DS_NOPE + DS_ROPE
    p.q8_0("token_embd.weight", vocab, DS_HIDDEN)
    for i in range(layers):
        b = f"blk.{i}."
        p.ones(b + "attn_norm.weight", DS_HIDDEN)
        p.q8_0(b + "attn_q.weight", DS_HEADS * qk, DS_HIDDEN)
        p.q8_0(b + "attn_kv_a_mqa.weight", DS_KV_LORA + DS_ROPE, DS_HIDDEN)
        p.ones(b + "attn_kv_a_norm.weight", DS_KV_LORA)
        p.q8_0(b + "attn_k_b.weight", DS_KV_LORA, DS_NOPE, DS_HEADS)
        p.q8_0(b + "attn_v_b.weight", DS_V, DS_KV_LORA, DS_HEADS)
        p.q8_0(b + "attn_output.weight", DS_HIDDEN, DS_HEADS * DS_V)
        p.ones(b + "ffn_norm.weight", DS_HIDDEN)
        if i == 0:
            p.q8_0(b + "ffn_gate.weight", DS_DENSE_FFN, DS_HIDDEN)
            p.q8_0(b + "ffn_up.weight", DS_DENSE_FFN, DS_HIDDEN)
            p.q8_0(b + "ffn_down.weight", DS_HIDDEN, DS_DENSE_FFN)
            continue
        shared = DS_SHARED * DS_MOE_FFN
        p.normal(b + "ffn_gate_inp.weight", (DS_EXPERTS, DS_HIDDEN))
        p.q8_0(b + "ffn_gate_exps.weight", DS_MOE_FFN, DS_HIDDEN, DS_EXPERTS)
        p.q8_0(b + "ffn_up_exps.weight", DS_MOE_FFN, DS_HIDDEN, DS_EXPERTS)
        p.q8_0(b + "ffn_down_exps.weight", DS_HIDDEN, DS_MOE_FFN, DS_EXPERTS)
        p.q8_0(b + "ffn_gate_shexp.weight", shared, DS_HIDDEN)
        p.q8_0(b + "ffn_up_shexp.weight", shared, DS_HIDDEN)
        p.q8_0(b + "ffn_down_shexp.weight", DS_HIDDEN, shared)
    p.ones("output_norm.weight", DS_HIDDEN)
    p.q8_0("output.weight", vocab, DS_HIDDEN)
    return p.items


def gpt_oss_metadata(w, layers):
    a = "gpt-oss"
    w.add_name("gpt-oss-20b-shape-random")
    w.add_file_type(gguf.LlamaFileType.MOSTLY_MXFP4_MOE)
    w.add_uint32(f"{a}.block_count", layers)
    w.add_uint32(f"{a}.context_length", 131072)
    w.add_uint32(f"{a}.embedding_length", GO_HIDDEN)
    w.add_uint32(f"{a}.feed_forward_length", GO_FFN)
    w.add_uint32(f"{a}.attention.head_count", GO_HEADS)
    w.add_uint32(f"{a}.attention.head_count_kv", GO_KV_HEADS)
    w.add_string(f"{a}.rope.scaling.type", "yarn")
    w.add_float32(f"{a}.rope.scaling.factor", 32.0)
    w.add_uint32(f"{a}.rope.scaling.original_context_length", 4096)
    w.add_float32(f"{a}.rope.scaling.yarn_beta_fast", 32.0)
    w.add_float32(f"{a}.rope.scaling.yarn_beta_slow", 1.0)
    w.add_float32(f"{a}.rope.freq_base", 150000.0)
    w.add_float32(f"{a}.attention.layer_norm_rms_epsilon", 1e-5)
    w.add_uint32(f"{a}.expert_count", GO_EXPERTS)
    w.add_uint32(f"{a}.expert_used_count", GO_USED)
    w.add_uint32(f"{a}.attention.key_length", GO_HEAD_DIM)
    w.add_uint32(f"{a}.attention.value_length", GO_HEAD_DIM)
    w.add_uint32(f"{a}.attention.sliding_window", GO_WINDOW)
    w.add_uint32(f"{a}.expert_feed_forward_length", GO_FFN)


def deepseek_metadata(w, layers):
    a = "deepseek2"
    w.add_name("deepseek-v2-lite-shape-random")
    w.add_file_type(gguf.LlamaFileType.MOSTLY_Q8_0)
    w.add_uint32(f"{a}.block_count", layers)
    w.add_uint32(f"{a}.context_length", 163840)
    w.add_uint32(f"{a}.embedding_length", DS_HIDDEN)
    w.add_uint32(f"{a}.feed_forward_length", DS_DENSE_FFN)
    w.add_uint32(f"{a}.attention.head_count", DS_HEADS)
    w.add_uint32(f"{a}.attention.head_count_kv", 1)
    w.add_string(f"{a}.rope.scaling.type", "yarn")
    w.add_float32(f"{a}.rope.scaling.factor", 40.0)
    w.add_uint32(f"{a}.rope.scaling.original_context_length", 4096)
    w.add_float32(f"{a}.rope.scaling.yarn_beta_fast", 32.0)
    w.add_float32(f"{a}.rope.scaling.yarn_beta_slow", 1.0)
    w.add_float32(f"{a}.rope.freq_base", 10000.0)
    w.add_float32(f"{a}.attention.layer_norm_rms_epsilon", 1e-6)
    w.add_uint32(f"{a}.expert_count", DS_EXPERTS)
    w.add_uint32(f"{a}.expert_used_count", DS_USED)
    w.add_uint32(f"{a}.attention.key_length", DS_KV_LORA + DS_ROPE)
    w.add_uint32(f"{a}.attention.value_length", DS_KV_LORA)
    w.add_uint32(f"{a}.leading_dense_block_count", 1)
    w.add_uint32(f"{a}.vocab_size", FAMILIES["deepseek2"].vocab)
    w.add_uint32(f"{a}.attention.q_lora_rank", 0)
    w.add_uint32(f"{a}.attention.kv_lora_rank", DS_KV_LORA)
    w.add_uint32(f"{a}.attention.key_length_mla", DS_NOPE + DS_ROPE)
    w.add_uint32(f"{a}.attention.value_length_mla", DS_V)
    w.add_uint32(f"{a}.expert_feed_forward_length", DS_MOE_FFN)
    w.add_uint32(f"{a}.expert_shared_count", DS_SHARED)
    w.add_float32(f"{a}.expert_weights_scale", 1.0)
    w.add_uint32(f"{a}.rope.dimension_count", DS_ROPE)
    w.add_float32(f"{a}.rope.scaling.yarn_log_multiplier", 0.0707)


def add_tokenizer(w, fixture, vocab):
    """The fixture's tokenizer, padded with plain tokens to `vocab` entries."""
    fields = gguf.GGUFReader(os.path.join(ROOT, fixture)).fields
    tokens = list(fields["tokenizer.ggml.tokens"].contents())
    types = list(fields["tokenizer.ggml.token_type"].contents())
    if len(tokens) > vocab:
        raise SystemExit(f"{fixture}: {len(tokens)} tokens, more than {vocab}")
    pad = vocab - len(tokens)
    tokens += [f"<|pad_{i}|>" for i in range(pad)]
    types += [gguf.TokenType.NORMAL] * pad
    w.add_tokenizer_model(fields["tokenizer.ggml.model"].contents())
    w.add_tokenizer_pre(fields["tokenizer.ggml.pre"].contents())
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(list(fields["tokenizer.ggml.merges"].contents()))
    for key in ("bos_token_id", "eos_token_id", "unknown_token_id", "padding_token_id"):
        full = f"tokenizer.ggml.{key}"
        if full in fields:
            w.add_uint32(full, int(fields[full].contents()))
    w.add_add_bos_token(bool(fields["tokenizer.ggml.add_bos_token"].contents()))
    if "tokenizer.chat_template" in fields:
        w.add_chat_template(fields["tokenizer.chat_template"].contents())


def write(path, family, layers, seed):
    fam = FAMILIES[family]
    rng = np.random.default_rng(seed)
    w = gguf.GGUFWriter(path, fam.arch)
    if family == "gpt-oss":
        gpt_oss_metadata(w, layers)
        plan = gpt_oss_plan(rng, layers, fam.vocab)
    else:
        deepseek_metadata(w, layers)
        plan = deepseek_plan(rng, layers, fam.vocab)
    add_tokenizer(w, fam.tokenizer_fixture, fam.vocab)
    for name, shape, nbytes, raw_dtype, dtype, _ in plan:
        w.add_tensor_info(name, shape, np.dtype(dtype), nbytes, raw_dtype=raw_dtype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    for *_, make in plan:
        w.write_tensor_data(make())
    w.close()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", help="path of the .gguf file to write")
    ap.add_argument("--family", choices=sorted(FAMILIES), required=True)
    ap.add_argument("--layers", type=int, default=None,
                    help="decoder layers (default 3: about 2.7 GB for gpt-oss, 1.8 GB for deepseek2)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    layers = FAMILIES[args.family].layers if args.layers is None else args.layers
    if args.family == "deepseek2" and layers < 2:
        raise SystemExit("deepseek2 needs at least 2 layers (layer 0 is dense)")
    write(args.out, args.family, layers, args.seed)
    print(args.out)


if __name__ == "__main__":
    sys.exit(main())
