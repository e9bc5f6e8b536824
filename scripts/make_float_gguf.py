#!/usr/bin/env python3
"""Rewrite a GGUF with every quantized tensor dequantized to a float type, for benchmarks of
float weights on a real model's shapes and tokenizer.

    scripts/make_float_gguf.py IN.gguf OUT.gguf --type bf16|f16|f32

Metadata is copied as is (the file type is set to the new one); float tensors (norms and the
like) are kept as they are. The values are those of the quantized file, rounded to the chosen
type (bf16: nearest, ties to even), so the output is as fast to read as a float checkpoint of
the model, not a better model. Needs the `gguf` Python package.
"""

import argparse
import sys

import numpy as np

try:
    import gguf
    from gguf import quants
except ImportError:
    sys.exit("make_float_gguf.py needs the `gguf` Python package (pip install gguf)")

Q = gguf.GGMLQuantizationType
FLOATS = {Q.F32, Q.F16, Q.BF16}
OUT = {
    "f32": (Q.F32, gguf.LlamaFileType.ALL_F32),
    "f16": (Q.F16, gguf.LlamaFileType.MOSTLY_F16),
    "bf16": (Q.BF16, gguf.LlamaFileType.MOSTLY_BF16),
}


def copy_metadata(r, w, ftype):
    for field in r.fields.values():
        name = field.name
        if name.startswith("GGUF.") or name == gguf.Keys.General.ARCHITECTURE:
            continue
        if name == gguf.Keys.General.FILE_TYPE:
            w.add_file_type(ftype)
            continue
        vtype = field.types[0]
        if vtype == gguf.GGUFValueType.ARRAY:
            sub = field.types[-1]
            w.add_key_value(name, field.contents(), vtype, sub_type=sub)
        else:
            w.add_key_value(name, field.contents(), vtype)


def converted(t, qtype):
    """The tensor's data in `qtype` (as numpy, in its logical shape)."""
    if t.tensor_type in FLOATS:
        return np.asarray(t.data), t.tensor_type
    shape = tuple(reversed([int(d) for d in t.shape]))
    x = quants.dequantize(t.data, t.tensor_type).reshape(shape).astype(np.float32)
    if qtype == Q.F32:
        return x, Q.F32
    if qtype == Q.F16:
        return x.astype(np.float16), Q.F16
    return quants.quantize(x, Q.BF16), Q.BF16


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("input")
    ap.add_argument("output")
    ap.add_argument("--type", choices=sorted(OUT), required=True)
    args = ap.parse_args()
    qtype, ftype = OUT[args.type]
    r = gguf.GGUFReader(args.input)
    arch = r.fields[gguf.Keys.General.ARCHITECTURE].contents()
    w = gguf.GGUFWriter(args.output, arch)
    copy_metadata(r, w, ftype)
    for t in r.tensors:
        data, raw = converted(t, qtype)
        w.add_tensor(t.name, data, raw_dtype=raw)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print(args.output)


if __name__ == "__main__":
    main()
