"""Dequantization fixtures: raw GGML block bytes + gguf-py's dequantized f32.

Writes tests/fixtures/dequant/:
  manifest.json           versions, facts about the SmolLM2 file, and every case object
  <case>.json             one case: {type, ggml_type_id, n_elements, bytes_file, values_file, source, ...}
  <case>.bytes.bin        raw block bytes exactly as stored in a GGUF tensor
  <case>.f32.bin          expected values, little-endian f32, n_elements of them

Cases:
  real_<type>   first rows of one SmolLM2 tensor of each type present in the file
  synth_<type>  random blocks (fixed seed) for every type Kestrel supports; f16 scale
                fields are overwritten with sane finite values so outputs are finite.

Run: python3 scripts/goldens/dequant_fixtures.py
"""
from __future__ import annotations

from collections import Counter

import numpy as np
import gguf
from gguf import GGMLQuantizationType as T
from gguf.quants import dequantize

from _common import FIXTURES, smollm2_path, versions, write_f32, write_json

OUT = FIXTURES / "dequant"
SEED = 20241129
REAL_ROWS = 2

# Byte offsets of the f16 scale fields inside one block, per type.
SCALE_OFFSETS = {
    T.Q4_0: [0],
    T.Q4_1: [0, 2],  # d, m
    T.Q5_0: [0],
    T.Q8_0: [0],
    T.Q4_K: [0, 2],  # d, dmin
    T.Q5_K: [0, 2],  # d, dmin
    T.Q6_K: [208],  # d is the last field
    T.Q5_1: [0, 2],  # d, m
    T.Q2_K: [80, 82],  # d, dmin follow scales and qs
    T.Q3_K: [108],  # d is the last field
    T.IQ4_NL: [0],
    T.IQ4_XS: [0],  # d (scales_h after it is a bit field, left random)
    T.IQ2_XXS: [0],
    T.IQ2_XS: [0],
    T.IQ2_S: [0],
    T.IQ3_XXS: [0],
    T.IQ3_S: [0],
    T.IQ1_S: [0],
    T.IQ1_M: [],  # d is split across the top nibbles of the scales (see synth_bytes)
    T.MXFP4: [],  # an E8M0 exponent byte, not an f16 (see synth_bytes)
}
# New types go at the end: each case's seed is SEED + its index here, so appending keeps the
# existing fixtures byte-identical.
SUPPORTED = [T.F32, T.F16, T.BF16, T.Q4_0, T.Q4_1, T.Q5_0, T.Q8_0, T.Q4_K, T.Q5_K, T.Q6_K,
             T.Q5_1, T.Q2_K, T.Q3_K, T.IQ4_NL, T.IQ4_XS, T.IQ2_XXS, T.IQ2_XS, T.IQ2_S,
             T.IQ3_XXS, T.IQ3_S, T.IQ1_S, T.IQ1_M, T.MXFP4]


def write_case(name: str, qtype: T, raw: np.ndarray, values: np.ndarray, source: str, extra: dict) -> dict:
    """Write the bytes/values pair and the case JSON; return the case object."""
    raw = np.ascontiguousarray(raw, dtype=np.uint8).reshape(-1)
    values = np.ascontiguousarray(values, dtype=np.float32).reshape(-1)
    block_size, type_size = gguf.GGML_QUANT_SIZES[qtype]
    assert raw.size % type_size == 0 and values.size == raw.size // type_size * block_size
    assert np.all(np.isfinite(values)), name
    (OUT / f"{name}.bytes.bin").write_bytes(raw.tobytes())
    write_f32(OUT / f"{name}.f32.bin", values)
    case = {
        "name": name,
        "type": qtype.name,
        "ggml_type_id": int(qtype.value),
        "n_elements": int(values.size),
        "block_size": block_size,
        "type_size": type_size,
        "n_blocks": int(raw.size // type_size),
        "bytes_file": f"{name}.bytes.bin",
        "values_file": f"{name}.f32.bin",
        "source": source,
        **extra,
    }
    write_json(OUT / f"{name}.json", case)
    return case


def real_cases(reader: gguf.GGUFReader) -> tuple[list[dict], dict]:
    """One case per tensor type in the real file: the first REAL_ROWS rows of its first tensor."""
    counts = Counter(t.tensor_type.name for t in reader.tensors)
    cases, seen = [], set()
    for t in reader.tensors:
        if t.tensor_type in seen:
            continue
        seen.add(t.tensor_type)
        data = np.asarray(t.data)  # bytes for quantized types, typed for F32/F16
        raw = data.view(np.uint8).reshape(data.shape[0] if data.ndim > 1 else 1, -1)
        rows = min(REAL_ROWS, raw.shape[0])
        raw = raw[:rows]
        values = dequantize(raw, t.tensor_type)
        shape = [int(x) for x in t.shape]  # GGUF order: ne0 (row length) first
        extra = {"tensor_name": t.name, "gguf_shape_ne": shape, "rows": rows, "row_len": shape[0]}
        src = f"smollm2:{t.name} rows 0..{rows}"
        cases.append(write_case(f"real_{t.tensor_type.name.lower()}", t.tensor_type, raw, values, src, extra))
    return cases, dict(sorted(counts.items()))


def random_finite_u16(rng: np.random.Generator, n: int, exp_mask: int) -> np.ndarray:
    """Random 16-bit float patterns (F16 or BF16) whose exponent is not all ones."""
    out = rng.integers(0, 1 << 16, size=n, dtype=np.uint32).astype(np.uint16)
    bad = (out & exp_mask) == exp_mask
    while bad.any():
        out[bad] = rng.integers(0, 1 << 16, size=int(bad.sum()), dtype=np.uint32).astype(np.uint16)
        bad = (out & exp_mask) == exp_mask
    return out


def sane_f16(rng: np.random.Generator, n: int) -> np.ndarray:
    """Random f16 scales with random sign and magnitude in [1e-3, 1e-1]."""
    mag = np.exp(rng.uniform(np.log(1e-3), np.log(1e-1), size=n))
    sign = np.where(rng.integers(0, 2, size=n) == 1, -1.0, 1.0)
    return (mag * sign).astype(np.float16)


def synth_bytes(rng: np.random.Generator, qtype: T) -> np.ndarray:
    """Random raw bytes for one synthetic case of qtype."""
    if qtype == T.F32:
        f = rng.standard_normal(256).astype(np.float32) * np.float32(3.0)
        f[:4] = [0.0, -0.0, 1e-40, -3.4e38]  # zero, negative zero, subnormal, near max
        return f.view(np.uint8)
    if qtype == T.F16:
        return random_finite_u16(rng, 256, 0x7C00).view(np.uint8)
    if qtype == T.BF16:
        return random_finite_u16(rng, 256, 0x7F80).view(np.uint8)
    block_size, type_size = gguf.GGML_QUANT_SIZES[qtype]
    n_blocks = 4 if block_size == 256 else 8
    raw = rng.integers(0, 256, size=(n_blocks, type_size), dtype=np.uint16).astype(np.uint8)
    for off in SCALE_OFFSETS[qtype]:
        raw[:, off : off + 2] = sane_f16(rng, n_blocks).view(np.uint8).reshape(n_blocks, 2)
    if qtype == T.IQ1_M:
        # The four top nibbles of the u16 scales at offset 48, lowest first, hold d.
        d = sane_f16(rng, n_blocks).view(np.uint16)
        sc = raw[:, 48:56].copy().view(np.uint16)
        for k in range(4):
            sc[:, k] = (sc[:, k] & 0x0FFF) | (((d >> (4 * k)) & 0xF) << 12)
        raw[:, 48:56] = sc.view(np.uint8)
    if qtype == T.MXFP4:
        # Exponents that keep 12 * 2^(e - 128) finite, including the subnormal e = 0, 1.
        raw[:, 0] = rng.integers(0, 200, size=n_blocks)
        raw[:2, 0] = [0, 1]
    return raw


def synth_cases() -> list[dict]:
    cases = []
    for i, qtype in enumerate(SUPPORTED):
        rng = np.random.default_rng(SEED + i)
        raw = synth_bytes(rng, qtype)
        block_size, type_size = gguf.GGML_QUANT_SIZES[qtype]
        values = dequantize(raw.reshape(-1, type_size).reshape(1, -1), qtype)
        what = "finite random values incl. subnormals" if qtype in (T.F32, T.F16, T.BF16) else "random bytes, sane f16 scales"
        src = f"synthetic: numpy default_rng(seed={SEED + i}), {what}"
        cases.append(write_case(f"synth_{qtype.name.lower()}", qtype, raw, values, src, {}))
    return cases


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    path = smollm2_path()
    reader = gguf.GGUFReader(str(path))
    real, counts = real_cases(reader)
    synth = synth_cases()
    manifest = {
        "generator": "scripts/goldens/dequant_fixtures.py",
        "versions": versions(),
        "reference": "gguf.quants.dequantize (numpy; no FMA); compare with a tolerance of a few f32 ulp",
        "smollm2_file": path.name,
        "smollm2_tensor_type_counts": counts,
        "cases": real + synth,
    }
    write_json(OUT / "manifest.json", manifest)
    for c in manifest["cases"]:
        print(f"{c['name']:12s} {c['type']:5s} n={c['n_elements']:5d} blocks={c['n_blocks']}  {c['source']}")
    print("tensor types in SmolLM2:", counts)


if __name__ == "__main__":
    main()
