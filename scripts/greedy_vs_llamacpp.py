#!/usr/bin/env python3
"""Greedy continuations of Kestrel and llama.cpp on the same GGUF files, side by side.

Usage:
  scripts/greedy_vs_llamacpp.py LLAMA_BIN_DIR KESTREL_BIN MODEL.gguf [MODEL.gguf ...]
      [--tokens N] [--prompt TEXT ...]

LLAMA_BIN_DIR holds a llama.cpp build's `llama-simple` (greedy sampling, stops at
end-of-generation). For every model and prompt both programs generate up to N tokens with
greedy decoding; the script prints one line per pair and exits non-zero if any differ.

Both programs print text, not token ids, so the texts are compared after the same
normalisation: bytes decoded as UTF-8 with invalid sequences replaced, special-token markers
that llama.cpp prints and Kestrel skips (`<s>`, `<unk>`, ...) and NUL bytes (which llama-simple's
printf drops) removed, and llama.cpp's echo of the prompt dropped. Random-weight models have near-ties; a difference there is reported with
the first differing character so it can be checked against the logit margins of the goldens.
"""
from __future__ import annotations

import argparse
import re
import subprocess
import sys

DEFAULT_PROMPTS = ["Hello world", "The capital of France is", "1, 2, 3, 4,"]
SPECIAL = re.compile(
    rb"<s>|</s>|<unk>|<pad>|<bos>|<eos>|<\|endoftext\|>|<\|im_start\|>|<\|im_end\|>|<end_of_turn>"
)


def normalise(raw: bytes) -> str:
    # llama-simple prints each piece with printf("%s"), so a byte token 0x00 prints nothing.
    # Special-token markers come out between the bytes of a character split across byte
    # tokens, so they are removed before decoding.
    raw = SPECIAL.sub(b"", raw.replace(b"\x00", b""))
    return raw.decode("utf-8", errors="replace").rstrip("\n")


def llama_cpp(bin_dir: str, model: str, prompt: str, n: int) -> str:
    out = subprocess.run(
        [f"{bin_dir}/llama-simple", "-m", model, "-n", str(n), prompt],
        capture_output=True,
        timeout=600,
        check=True,
    ).stdout
    text = normalise(out)
    if not text.startswith(prompt):
        raise RuntimeError(f"llama-simple did not echo the prompt: {text[:80]!r}")
    return text[len(prompt):]


def kestrel(binary: str, model: str, prompt: str, n: int) -> str:
    out = subprocess.run(
        [binary, "generate", "--model", model, "-n", str(n), "--temperature", "0", prompt],
        capture_output=True,
        timeout=600,
        check=True,
    ).stdout
    return normalise(out)


def first_difference(a: str, b: str) -> int:
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return min(len(a), len(b))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("llama_bin_dir")
    ap.add_argument("kestrel_bin")
    ap.add_argument("models", nargs="+")
    ap.add_argument("--tokens", type=int, default=16)
    ap.add_argument("--prompt", action="append", dest="prompts")
    args = ap.parse_args()
    prompts = args.prompts or DEFAULT_PROMPTS
    differ = 0
    for model in args.models:
        for prompt in prompts:
            ours = kestrel(args.kestrel_bin, model, prompt, args.tokens)
            try:
                theirs = llama_cpp(args.llama_bin_dir, model, prompt, args.tokens)
            except subprocess.CalledProcessError as e:
                differ += 1
                print(f"FAILED  {model}  llama-simple exited with {e.returncode}: {e.stderr[-300:]!r}")
                continue
            if ours == theirs:
                print(f"same    {model}  {prompt!r}: {ours!r}")
            else:
                differ += 1
                at = first_difference(ours, theirs)
                print(f"DIFFER  {model}  {prompt!r} at char {at}:\n  kestrel   {ours!r}\n  llama.cpp {theirs!r}")
    print(f"{differ} of {len(args.models) * len(prompts)} continuations differ")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
