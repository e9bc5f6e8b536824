"""Tiny AWQ- and GPTQ-format checkpoints made from tests/fixtures/tiny-llama-f32, with the exact
dequantized weights they encode.

Writes (each a full HF directory: config.json with quantization_config, model.safetensors,
tokenizer files copied from tiny-llama-f32, plus expected.safetensors):
  tests/fixtures/awq-tiny/   AutoAWQ GEMM layout: 4 bits, group 32, zero_point, version "gemm"
  tests/fixtures/gptq-tiny/  AutoGPTQ/GPTQModel layout: 4 bits, group 32, sym false, desc_act true
                             (a random column permutation, so g_idx is not sorted),
                             checkpoint_format "gptq" (v1: stored zero = zero - 1); also
                             quantize_config.json as GPTQModel writes it

Every q/k/v/o/gate/up/down projection is quantized with a plain round-to-nearest group
quantizer in numpy (no calibration: the layout, not the method, is under test); embeddings,
norms and lm_head stay unquantized and are stored as float16, as both tools leave them.

expected.safetensors holds, for each quantized `<prefix>`, `<prefix>.weight` [out, in] float16:
(code - zero) * scale computed in float32 from the codes, the float16 scales and the integer zeros
*before packing*, then rounded to float16 (to keep the fixtures small). A reader that recovers
codes, scales and zeros exactly reproduces these values bit for bit after the same rounding.

Packing (derived from the projects' pack/dequantize code; written independently here):
  AWQ GEMM: qweight int32 [in, out/8]; qzeros int32 [in/group, out/8]; scales f16 [in/group, out].
    Packed word c of a row holds output columns 8c..8c+7; nibble i (bits 4i..4i+3) holds column
    8c + AWQ_ORDER[i], AWQ_ORDER = [0, 2, 4, 6, 1, 3, 5, 7].  w[o][i] = (q - z) * s.
  GPTQ: qweight int32 [in*bits/32, out], packed along the input dim: word r of column o holds
    inputs r*(32/bits) + j at bits*j; qzeros int32 [groups, out*bits/32] packed the same way
    along the output dim; scales f16 [groups, out]; g_idx int32 [in] = group of each input
    column.  v1 ("gptq") stores zero - 1 (masked to `bits`), readers add 1 and mask again.
  In the GPTQ fixture one group (layer 0 q_proj, output row 0, first quantized group) is made
  all-positive so its zero is 0 and its v1 stored zero wraps to 2^bits - 1.

Run: python3 scripts/goldens/make_awq_gptq_fixtures.py   (~2 s, deterministic)
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
from safetensors.numpy import load_file, save_file

from _common import FIXTURES, versions, write_json

SEED = 20240611
SRC = FIXTURES / "tiny-llama-f32"
LINEARS = ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
           "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj")
AWQ_ORDER = (0, 2, 4, 6, 1, 3, 5, 7)
GROUP = 32
BITS = 4
COPIED = ("tokenizer.json", "tokenizer_config.json", "generation_config.json")


def group_for(cols: int) -> int:
    """GROUP if it divides cols, else the whole row."""
    return GROUP if cols % GROUP == 0 else cols


def rtn(w: np.ndarray, group: int, bits: int, sym: bool):
    """Round-to-nearest asymmetric (or symmetric) group quantization of w [rows, cols] along cols.
    Returns codes uint8 [rows, cols], scales float16 [rows, groups], zeros uint8 [rows, groups]."""
    rows, cols = w.shape
    maxq = (1 << bits) - 1
    wg = w.reshape(rows, cols // group, group).astype(np.float64)
    if sym:
        amax = np.maximum(np.abs(wg).max(-1), 1e-5)
        scale = 2.0 * amax / maxq
        zero = np.full(scale.shape, (maxq + 1) // 2, dtype=np.int64)
    else:
        lo, hi = wg.min(-1), wg.max(-1)
        scale = np.maximum(hi - lo, 1e-5) / maxq
        zero = np.clip(np.round(-lo / scale), 0, maxq).astype(np.int64)
    scale16 = scale.astype(np.float16)
    s32 = scale16.astype(np.float32).astype(np.float64)
    q = np.clip(np.round(wg / s32[..., None]) + zero[..., None], 0, maxq)
    return q.reshape(rows, cols).astype(np.uint8), scale16, zero.astype(np.uint8)


def dequant(codes: np.ndarray, scales: np.ndarray, zeros: np.ndarray, group: int) -> np.ndarray:
    """(code - zero) * scale in float32, the value GroupQuant::dequantize computes."""
    rows, cols = codes.shape
    g = np.arange(cols) // group
    diff = codes.astype(np.float32) - zeros[:, g].astype(np.float32)
    return diff * scales[:, g].astype(np.float32)


def pack_awq(v: np.ndarray) -> np.ndarray:
    """[rows, n] 4-bit values -> int32 [rows, n/8] in AWQ's interleaved nibble order."""
    rows, n = v.shape
    v = v.astype(np.uint32).reshape(rows, n // 8, 8)
    out = np.zeros((rows, n // 8), dtype=np.uint32)
    for i, col in enumerate(AWQ_ORDER):
        out |= (v[:, :, col] & 0xF) << np.uint32(4 * i)
    return out.view(np.int32)


def unpack_awq(p: np.ndarray) -> np.ndarray:
    """Inverse of pack_awq, written the other way round (shift then undo the order)."""
    u = p.view(np.uint32)
    nibbles = np.stack([(u >> np.uint32(4 * i)) & 0xF for i in range(8)], axis=-1)
    out = np.empty_like(nibbles)
    out[..., list(AWQ_ORDER)] = nibbles
    return out.reshape(p.shape[0], -1)


def pack_seq(v: np.ndarray, bits: int, axis: int) -> np.ndarray:
    """Pack `bits`-bit values along `axis` (32/bits per int32, value j at bit bits*j)."""
    per = 32 // bits
    v = np.moveaxis(v.astype(np.uint32) & np.uint32((1 << bits) - 1), axis, 0)
    v = v.reshape(v.shape[0] // per, per, *v.shape[1:])
    out = np.zeros((v.shape[0], *v.shape[2:]), dtype=np.uint32)
    for j in range(per):
        out |= v[:, j] << np.uint32(bits * j)
    return np.ascontiguousarray(np.moveaxis(out, 0, axis)).view(np.int32)


def unpack_seq(p: np.ndarray, bits: int, axis: int) -> np.ndarray:
    per = 32 // bits
    u = np.moveaxis(p.view(np.uint32), axis, 0)
    parts = np.stack([(u >> np.uint32(bits * j)) & np.uint32((1 << bits) - 1) for j in range(per)], axis=1)
    return np.moveaxis(parts.reshape(u.shape[0] * per, *u.shape[1:]), 0, axis)


def quantize_awq(w: np.ndarray) -> tuple[dict, np.ndarray]:
    group = group_for(w.shape[1])
    codes, scales, zeros = rtn(w, group, BITS, sym=False)
    out = {"qweight": pack_awq(codes.T.copy()), "qzeros": pack_awq(zeros.T.copy()),
           "scales": np.ascontiguousarray(scales.T)}
    assert (unpack_awq(out["qweight"]) == codes.T).all() and (unpack_awq(out["qzeros"]) == zeros.T).all()
    return out, dequant(codes, scales, zeros, group)


def quantize_gptq(w: np.ndarray, rng: np.random.Generator, force_zero0: bool) -> tuple[dict, np.ndarray]:
    """desc_act-style: quantize columns in a random order `perm`; g_idx[perm[k]] = k // group."""
    rows, cols = w.shape
    group = group_for(cols)
    perm = rng.permutation(cols)
    wp = w[:, perm].copy()
    if force_zero0:
        wp[0, :group] = np.abs(wp[0, :group]) + 0.01
    codes_p, scales, zeros = rtn(wp, group, BITS, sym=False)
    if force_zero0:
        assert zeros[0, 0] == 0
    expected_p = dequant(codes_p, scales, zeros, group)
    codes = np.empty_like(codes_p)
    codes[:, perm] = codes_p
    expected = np.empty_like(expected_p)
    expected[:, perm] = expected_p
    g_idx = np.empty(cols, dtype=np.int32)
    g_idx[perm] = np.arange(cols) // group
    stored_zeros = (zeros.astype(np.int64) - 1) & ((1 << BITS) - 1)  # v1 layout
    out = {"qweight": pack_seq(codes.T, BITS, axis=0), "qzeros": pack_seq(stored_zeros.T, BITS, axis=1),
           "scales": np.ascontiguousarray(scales.T), "g_idx": g_idx}
    check_gptq_v1(out, expected)
    return out, expected


def check_gptq_v1(t: dict, expected: np.ndarray) -> None:
    """Dequantize the packed tensors the way GPTQ's reference torch path does and compare."""
    q = unpack_seq(t["qweight"], BITS, axis=0).astype(np.float32)           # [in, out]
    z = (unpack_seq(t["qzeros"], BITS, axis=1) + 1) & ((1 << BITS) - 1)     # [groups, out]
    s = t["scales"].astype(np.float32)
    g = t["g_idx"]
    w = (q - z[g].astype(np.float32)) * s[g]
    assert np.array_equal(w.T, expected), "GPTQ self-check failed"


def base_tensors() -> dict:
    return load_file(str(SRC / "model.safetensors"))


def write_dir(name: str, tensors: dict, expected: dict, qcfg: dict, extra_files: dict) -> Path:
    out = FIXTURES / name
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    cfg = json.loads((SRC / "config.json").read_text())
    cfg["torch_dtype"] = "float16"
    cfg["dtype"] = "float16"
    cfg["quantization_config"] = qcfg
    write_json(out / "config.json", dict(sorted(cfg.items())))
    for fname, obj in extra_files.items():
        write_json(out / fname, obj)
    for fname in COPIED:
        if (SRC / fname).is_file():
            shutil.copy(SRC / fname, out / fname)
    # One metadata key: safetensors writes a multi-key header map in no fixed order.
    meta = {"source": json.dumps({"generator": "scripts/goldens/make_awq_gptq_fixtures.py",
                                  "versions": versions()}, sort_keys=True)}
    save_file(dict(sorted(tensors.items())), str(out / "model.safetensors"), metadata={"format": "pt"})
    save_file(dict(sorted(expected.items())), str(out / "expected.safetensors"), metadata=meta)
    for fname, want in (("model.safetensors", tensors), ("expected.safetensors", expected)):
        back = load_file(str(out / fname))
        assert all(np.array_equal(back[k], v) and back[k].dtype == v.dtype for k, v in want.items()), fname
    return out


def build(kind: str, rng: np.random.Generator) -> tuple[dict, dict]:
    """All tensors of the quantized checkpoint and the expected float16 weights."""
    tensors, expected = {}, {}
    for name, w in base_tensors().items():
        prefix = name.removesuffix(".weight")
        if not any(prefix.endswith(l) for l in LINEARS):
            tensors[name] = w.astype(np.float16)
            continue
        if kind == "awq":
            packed, deq = quantize_awq(w)
        else:
            packed, deq = quantize_gptq(w, rng, force_zero0=prefix == "model.layers.0.self_attn.q_proj")
        for suffix, t in packed.items():
            tensors[f"{prefix}.{suffix}"] = t
        expected[f"{prefix}.weight"] = deq.astype(np.float16)
    return tensors, expected


AWQ_CONFIG = {"bits": BITS, "group_size": GROUP, "modules_to_not_convert": None, "quant_method": "awq",
              "version": "gemm", "zero_point": True}
GPTQ_CONFIG = {"bits": BITS, "checkpoint_format": "gptq", "desc_act": True, "group_size": GROUP,
               "lm_head": False, "meta": {"damp_percent": 0.01, "quantizer": ["kestrel-fixture-rtn"],
                                          "static_groups": False, "true_sequential": True},
               "pack_dtype": "int32", "quant_method": "gptq", "sym": False}


def main() -> None:
    rng = np.random.default_rng(SEED)
    awq_t, awq_e = build("awq", rng)
    write_dir("awq-tiny", awq_t, awq_e, AWQ_CONFIG, {})
    gptq_t, gptq_e = build("gptq", rng)
    write_dir("gptq-tiny", gptq_t, gptq_e, GPTQ_CONFIG, {"quantize_config.json": GPTQ_CONFIG})
    for name in ("awq-tiny", "gptq-tiny"):
        size = sum(p.stat().st_size for p in (FIXTURES / name).iterdir())
        print(f"{name}: {size} bytes")


if __name__ == "__main__":
    main()
