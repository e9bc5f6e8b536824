#!/usr/bin/env python3
"""Bytes of weights one decode step reads from a mixture-of-experts GGUF, from its tensor sizes.

    scripts/active_weight_bytes.py MODEL.gguf [--json]

A step reads every tensor in full (attention, router, shared experts, dense layers, norms,
biases, output matrix) except: stacked routed experts (`*_exps.*`, 3-D, or 2-D expert biases),
of which it reads `expert_used_count / expert_count` (the top-k experts' slices), and the token
embedding, of which it reads one row. The KV cache is not counted. Prints the total and the
share of each group; `--json` prints the groups as an object. Needs the `gguf` package.
"""

import argparse
import json
import sys

import gguf


def arch_value(fields, arch, key):
    f = fields.get(f"{arch}.{key}")
    return int(f.contents()) if f is not None else None


def active_bytes(path):
    r = gguf.GGUFReader(path)
    arch = r.fields["general.architecture"].contents()
    experts = arch_value(r.fields, arch, "expert_count")
    used = arch_value(r.fields, arch, "expert_used_count")
    groups = {"attention": 0, "routed experts (top-k)": 0, "shared experts / dense FFN": 0,
              "router": 0, "output": 0, "embedding row": 0, "norms, biases, sinks": 0}
    total_file = 0
    for t in r.tensors:
        n = int(t.n_bytes)
        total_file += n
        name = t.name
        if name == "token_embd.weight":
            groups["embedding row"] += n // int(t.shape[1])
        elif "_exps." in name:
            groups["routed experts (top-k)"] += n * used // experts
        elif name.startswith("output."):
            groups["output"] += n
        elif "ffn_gate_inp" in name:
            groups["router"] += n
        elif len(t.shape) == 1 or name.endswith(".bias") or "sinks" in name:
            groups["norms, biases, sinks"] += n
        elif ".attn_" in name:
            groups["attention"] += n
        else:
            groups["shared experts / dense FFN"] += n
    return groups, total_file


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    groups, total_file = active_bytes(args.model)
    total = sum(groups.values())
    if args.json:
        print(json.dumps({"groups": groups, "active_bytes": total, "file_tensor_bytes": total_file}))
        return
    for k, v in groups.items():
        print(f"{k:28} {v / 1e6:10.1f} MB")
    print(f"{'active per decode step':28} {total / 1e6:10.1f} MB "
          f"(of {total_file / 1e6:.1f} MB of tensors in the file)")


if __name__ == "__main__":
    sys.exit(main())
