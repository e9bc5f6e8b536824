"""Golden embeddings of the tiny random-weight HF Llama (tests/fixtures/tiny-llama-f32).

Kestrel's /v1/embeddings pools a prompt as vLLM does by default for decoder LMs: the last
token's final hidden state (after the model's final norm), L2-normalised. The reference is
transformers' `model.model(ids).last_hidden_state[0, -1]` (LlamaModel applies the final norm),
normalised, in float32.

Writes tests/fixtures/goldens/tiny-llama-f32-embeddings.json: per prompt its text, the ids the
HF tokenizer gives it (with BOS) and the normalised embedding.

Run: python3 scripts/goldens/tiny_llama_embeddings.py   (after scripts/goldens/tiny_llama.py)
"""
from __future__ import annotations

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from _common import FIXTURES, versions, write_json

PROMPTS = [
    "hello",
    "The quick brown fox jumps over the lazy dog.",
    "one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen "
    "sixteen seventeen eighteen nineteen twenty",
]


def main() -> None:
    ckpt = FIXTURES / "tiny-llama-f32"
    tok = AutoTokenizer.from_pretrained(str(ckpt))
    model = AutoModelForCausalLM.from_pretrained(
        str(ckpt), torch_dtype=torch.float32, attn_implementation="eager"
    ).eval()
    records = []
    with torch.no_grad():
        for text in PROMPTS:
            ids = tok(text, add_special_tokens=True)["input_ids"]
            hidden = model.model(torch.tensor([ids])).last_hidden_state[0, -1]
            emb = torch.nn.functional.normalize(hidden, dim=0)
            records.append({"text": text, "prompt_ids": ids, "embedding": emb.tolist()})
    write_json(
        FIXTURES / "goldens" / "tiny-llama-f32-embeddings.json",
        {"pooling": "last token, final norm, L2-normalised", "versions": versions(), "prompts": records},
    )


if __name__ == "__main__":
    main()
