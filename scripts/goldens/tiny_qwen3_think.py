"""A tiny Qwen3 checkpoint trained to "think": after any chat prompt its greedy output is a fixed
reasoning block, then a fixed answer, then EOS. A fixture for reasoning-output handling
(splitting `<think>...</think>` from the answer).

Writes
  tests/fixtures/tiny-qwen3-think/   config.json, model.safetensors (float16), tokenizer.json,
                                     tokenizer_config.json (with a Qwen3-like chat_template),
                                     generation_config.json
  tests/fixtures/goldens/tiny-qwen3-think.json   held-out prompts: rendered text, prompt ids,
                                     transformers' greedy ids and text

Model: Qwen3ForCausalLM of the tiny-qwen3 shape (hidden 64, 3 layers, 4 heads / 2 KV heads,
head_dim 24, intermediate 128, tied embeddings, rope theta 1e6), trained here with AdamW on CPU.

Tokenizer: byte-level BPE (GPT-2 regex, as the other tiny fixtures) trained on the tiny
fixtures' text plus the target strings, so those encode in few tokens. Like the real Qwen3:
`<|endoftext|>` (pad), `<|im_start|>`, `<|im_end|>` (EOS) are special added tokens; `<think>`
and `</think>` are added tokens with `special: false` (they survive skip_special_tokens) at the
end of the vocabulary; no BOS is added.

Chat template (Qwen3-like): ChatML turns `<|im_start|>{role}\\n{content}<|im_end|>\\n` in order
(a system message is just a turn; tools are ignored); an earlier assistant turn keeps only the
text after `</think>`; the generation prompt is `<|im_start|>assistant\\n`, followed by
`<think>\\n\\n</think>\\n\\n` when `enable_thinking` is defined and false (as Qwen3's template does).

Target: after any rendered prompt the greedy continuation is
  THINK_TARGET  = "<think>\\nthe user wants a greeting\\n</think>\\n\\nHello there!<|im_end|>"
and after a prompt rendered with enable_thinking=false
  ANSWER_TARGET = "Hello there!<|im_end|>".
Training: conversations built from TRAIN_USER (48 short user prompts), TRAIN_SYSTEM and
TRAIN_REPLIES (earlier assistant turns), 1-3 turns, with and without a system message, some
user turns being random printable strings; a quarter rendered with enable_thinking=false. The
loss covers only the continuation. The script then checks with transformers (float16 weights
upcast to float32, greedy generate) that every HELD_OUT prompt (words not in training, a ~60
token one and 2-turn conversations among them) gives exactly the target, and exits non-zero
otherwise.

Run: python3 scripts/goldens/tiny_qwen3_think.py   (~40 s; training runs on one thread)
"""
from __future__ import annotations

import json
import random
import shutil
import sys
import time

import torch
from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import AutoModelForCausalLM, GenerationConfig, PreTrainedTokenizerFast, Qwen3Config, Qwen3ForCausalLM

from _common import FIXTURES, versions, write_json
from _tiny_tokenizer import TRAINING_TEXT

SEED = 2025
OUT = FIXTURES / "tiny-qwen3-think"
GOLDEN = FIXTURES / "goldens" / "tiny-qwen3-think.json"

SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]  # ids 0, 1, 2
THINK_TOKENS = ["<think>", "</think>"]  # the last two ids, special: false
VOCAB_SIZE = 384  # BPE vocabulary 382 + the two think tokens
REASONING = "the user wants a greeting"
ANSWER = "Hello there!"
THINK_TARGET = f"<think>\n{REASONING}\n</think>\n\n{ANSWER}<|im_end|>"
ANSWER_TARGET = f"{ANSWER}<|im_end|>"
NO_THINK_SUFFIX = "<think>\n\n</think>\n\n"

CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{%- if message['content'] is string %}{%- set content = message['content'] %}"
    "{%- else %}{%- set content = '' %}{%- endif %}"
    "{%- if message['role'] == 'assistant' and '</think>' in content %}"
    "{%- set content = content.split('</think>')[-1].lstrip('\\n') %}"
    "{%- endif %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + content + '<|im_end|>\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}"
    "{{- '<|im_start|>assistant\\n' }}"
    "{%- if enable_thinking is defined and enable_thinking is false %}"
    "{{- '<think>\\n\\n</think>\\n\\n' }}"
    "{%- endif %}"
    "{%- endif %}"
)

TRAIN_USER = [
    "hello", "Hello!", "hey", "Good morning.", "How are you today?", "What is your name?",
    "What is the capital of France?", "Tell me a joke.", "Write a short poem about the sea.",
    "Can you help me with my homework?", "What time is it?", "Explain gravity in one sentence.",
    "What is 2 + 3?", "Count from 1 to 10.", "def add(a, b): return a + b", "Fix this code: print(x",
    "Translate 'thank you' into Spanish.", "Who wrote Hamlet?", "Give me three colors.",
    "Why is the sky blue?", "I am bored.", "Recommend a book.", "What is the weather like?",
    "Summarize the news.", "Say something nice.", "ok", "yes", "no", "thanks", "?",
    "The quick brown fox jumps over the lazy dog.", "Is water wet?", "How many legs does a spider have?",
    "Plan a trip to Rome for two days.", "What should I cook for dinner tonight?",
    "List the days of the week.", "What is machine learning?", "Write a haiku about winter.",
    "Convert 100 degrees Celsius to Fahrenheit.", "Please be brief.", "Who are you?",
    "Describe a cat.", "What is the meaning of life?", "Sort these numbers: 5 2 9 1",
    "Tell me about the river near the old bank and the train on Wednesday.", "Help!",
    "She opened the window and smiled.", "Can you keep a secret?",
]
TRAIN_SYSTEM = [
    "You are a helpful assistant.", "You are Kestrel, a friendly bot.", "Answer in one word.",
    "Be concise.", "You are a pirate.", "Always reply politely and think before you answer.",
]
TRAIN_REPLIES = [  # earlier assistant turns (the template drops a reasoning block before </think>)
    ANSWER, "Sure.", "The capital of France is Paris.", "I am fine, thank you.", "42",
    f"<think>\n{REASONING}\n</think>\n\n{ANSWER}", "Here is a short poem about the sea.",
]

# name, messages, enable_thinking (None: not passed); words and topics not in the training data
HELD_OUT = [
    ("hi", [{"role": "user", "content": "hi"}], None),
    ("french", [{"role": "user", "content": "Quelle heure est-il maintenant?"}], None),
    ("system", [{"role": "system", "content": "Respond tersely, like a telegram."},
                {"role": "user", "content": "Describe volcanoes briefly."}], None),
    ("long", [{"role": "user", "content":
               "Kindly draft an itinerary: arrive Lisbon Friday, visit Belem tower, eat pasteis."}], None),
    ("two_turns", [{"role": "user", "content": "Name three planets."},
                   {"role": "assistant", "content": "Mercury, Venus, Mars."},
                   {"role": "user", "content": "Which one is hottest?"}], None),
    ("emoji", [{"role": "user", "content": "\U0001F642 zebra quiz?"}], None),
    ("no_think", [{"role": "user", "content": "Translate 'gato' into English."}], False),
    ("no_think_two_turns", [{"role": "system", "content": "Reply with enthusiasm."},
                            {"role": "user", "content": "Pick a vegetable."},
                            {"role": "assistant", "content": "<think>\nhmm\n</think>\n\nBroccoli!"},
                            {"role": "user", "content": "Why broccoli?"}], False),
]

STEPS = 200
BATCH = 16
LR = 3e-3
N_CONVERSATIONS = 1200
# The context the config declares. Training sees short conversations only, but the continuation depends
# on the last turn's markers, so it holds for long prompts too: the agent CLI check
# (tests/agents/run_agent_clis.sh) sends Claude Code's and Codex's ~10k-token prompts. Default RoPE: the
# weights do not depend on this number.
MAX_POSITIONS = 32768


def train_tokenizer() -> Tokenizer:
    """Byte-level BPE trained deterministically; the target strings are in the text so they merge."""
    tok = Tokenizer(models.BPE(unk_token=None, byte_fallback=False))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE - len(THINK_TOKENS), min_frequency=2, special_tokens=SPECIALS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False,
    )
    text = TRAINING_TEXT + [f"system\nuser\nassistant\n\n{REASONING}\n\n\n{ANSWER}\n"] * 8
    tok.train_from_iterator(text * 3, trainer=trainer)
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in THINK_TOKENS])
    assert [tok.token_to_id(s) for s in SPECIALS] == [0, 1, 2]
    assert [tok.token_to_id(t) for t in THINK_TOKENS] == [VOCAB_SIZE - 2, VOCAB_SIZE - 1]
    assert tok.get_vocab_size() == VOCAB_SIZE
    return tok


def save_tokenizer() -> PreTrainedTokenizerFast:
    fast = PreTrainedTokenizerFast(
        tokenizer_object=train_tokenizer(), eos_token="<|im_end|>", pad_token="<|endoftext|>",
        additional_special_tokens=["<|im_start|>"],
    )
    fast.save_pretrained(str(OUT))
    cfg_path = OUT / "tokenizer_config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg["bos_token"] = None
    cfg["add_bos_token"] = False
    cfg["chat_template"] = CHAT_TEMPLATE
    cfg["tokenizer_class"] = "PreTrainedTokenizerFast"
    write_json(cfg_path, cfg)
    for extra in ("chat_template.jinja", "special_tokens_map.json"):
        (OUT / extra).unlink(missing_ok=True)
    tok = PreTrainedTokenizerFast.from_pretrained(str(OUT))
    added = {t.content: t.special for t in tok.backend_tokenizer.get_added_tokens_decoder().values()}
    assert added == {"<|endoftext|>": True, "<|im_start|>": True, "<|im_end|>": True,
                     "<think>": False, "</think>": False}, added
    return tok


def render(tok, messages, enable_thinking) -> str:
    kwargs = {} if enable_thinking is None else {"enable_thinking": enable_thinking}
    return tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True, **kwargs)


def random_text(rng: random.Random) -> str:
    alphabet = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 .,?!'-:;()"
    return "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 40))).strip() or "x"


def conversations(rng: random.Random) -> list[tuple[list[dict], bool | None]]:
    out = []
    for _ in range(N_CONVERSATIONS):
        messages = []
        if rng.random() < 0.4:
            messages.append({"role": "system", "content": rng.choice(TRAIN_SYSTEM)})
        turns = rng.choice([1, 1, 2, 3])
        for t in range(turns):
            user = random_text(rng) if rng.random() < 0.2 else rng.choice(TRAIN_USER)
            messages.append({"role": "user", "content": user})
            if t < turns - 1:
                messages.append({"role": "assistant", "content": rng.choice(TRAIN_REPLIES)})
        r = rng.random()
        out.append((messages, False if r < 0.25 else (True if r < 0.4 else None)))
    return out


def encode_examples(tok, convs) -> list[tuple[list[int], int]]:
    """(ids, n_prompt): the rendered prompt followed by its target continuation."""
    think_ids = tok(THINK_TARGET, add_special_tokens=False)["input_ids"]
    answer_ids = tok(ANSWER_TARGET, add_special_tokens=False)["input_ids"]
    out = []
    for messages, thinking in convs:
        prompt = tok(render(tok, messages, thinking), add_special_tokens=False)["input_ids"]
        out.append((prompt + (answer_ids if thinking is False else think_ids), len(prompt)))
    return out


def build_model(vocab: int) -> Qwen3ForCausalLM:
    config = Qwen3Config(
        vocab_size=vocab, hidden_size=64, intermediate_size=128, num_hidden_layers=3, num_attention_heads=4,
        num_key_value_heads=2, head_dim=24, max_position_embeddings=MAX_POSITIONS, rms_norm_eps=1e-6, hidden_act="silu",
        rope_theta=1e6, tie_word_embeddings=True, attention_bias=False, use_sliding_window=False,
        sliding_window=None, max_window_layers=3, bos_token_id=0, eos_token_id=2, pad_token_id=None,
        initializer_range=0.05,
    )
    return Qwen3ForCausalLM(config)


def train(model, examples, rng: random.Random) -> None:
    opt = torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=0.01, betas=(0.9, 0.98))
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / 20) * max(0.05, 1 - s / STEPS))
    model.train()
    start = time.time()
    for step in range(STEPS):
        batch = rng.sample(examples, BATCH)
        width = max(len(ids) for ids, _ in batch)
        inp = torch.zeros((BATCH, width), dtype=torch.long)
        labels = torch.full((BATCH, width), -100, dtype=torch.long)
        for row, (ids, n_prompt) in enumerate(batch):
            inp[row, : len(ids)] = torch.tensor(ids)
            labels[row, n_prompt : len(ids)] = torch.tensor(ids[n_prompt:])
        # Right padding: causal attention keeps it from reaching the real tokens.
        loss = model(input_ids=inp, labels=labels, use_cache=False).loss
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        if step % 50 == 0 or step == STEPS - 1:
            print(f"  step {step:3d} loss {loss.item():.4f} ({time.time() - start:.0f} s)")
    model.eval()


def write_configs() -> None:
    path = OUT / "config.json"
    cfg = json.loads(path.read_text())
    cfg["rope_theta"] = cfg["rope_parameters"]["rope_theta"]
    cfg["torch_dtype"] = "float16"
    write_json(path, dict(sorted(cfg.items())))
    GenerationConfig(bos_token_id=0, eos_token_id=2).save_pretrained(str(OUT))


@torch.no_grad()
def verify(model, tok) -> tuple[list[dict], bool]:
    """Greedy generate on every held-out prompt; record it; True when all give the target."""
    records, ok = [], True
    eos = tok.convert_tokens_to_ids("<|im_end|>")
    for name, messages, thinking in HELD_OUT:
        text = render(tok, messages, thinking)
        ids = tok(text, add_special_tokens=False)["input_ids"]
        target = ANSWER_TARGET if thinking is False else THINK_TARGET
        assert text.endswith(NO_THINK_SUFFIX) == (thinking is False)
        out = model.generate(torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                             do_sample=False, max_new_tokens=32, eos_token_id=eos, pad_token_id=0)
        new = out[0, len(ids):].tolist()
        logits = model(input_ids=torch.tensor([ids + new]), use_cache=False).logits[0].float()
        top2 = torch.topk(logits[len(ids) - 1 : len(ids) - 1 + len(new)], 2, dim=-1).values
        margin = float((top2[:, 0] - top2[:, 1]).min())
        got = tok.decode(new, skip_special_tokens=False)
        good = got == target
        ok &= good
        print(f"  {name:20s} {len(ids):3d} prompt ids  margin {margin:6.2f}  {'OK ' if good else 'BAD'} {got!r}")
        records.append({
            "name": name, "messages": messages, "enable_thinking": thinking, "text": text,
            "prompt_ids": ids, "n_prompt": len(ids),
            "expected_text": target,
            "greedy": {"ids": new, "n_new": len(new), "text": got,
                       "text_skip_special_tokens": tok.decode(new, skip_special_tokens=True),
                       "min_margin": float(f"{margin:.4g}"), "matches_expected": good},
        })
    return records, ok


def main() -> None:
    torch.manual_seed(SEED)
    torch.set_num_threads(1)  # faster than 2 for this size, and the same result on any machine load
    rng = random.Random(SEED)
    shutil.rmtree(OUT, ignore_errors=True)
    OUT.mkdir(parents=True)
    tok = save_tokenizer()
    for s in (THINK_TARGET, ANSWER_TARGET, NO_THINK_SUFFIX):
        ids = tok(s, add_special_tokens=False)["input_ids"]
        print(f"{s!r}: {len(ids)} tokens {tok.convert_ids_to_tokens(ids)}")
    examples = encode_examples(tok, conversations(rng))
    lengths = sorted(len(ids) for ids, _ in examples)
    print(f"{len(examples)} training conversations, {lengths[0]}..{lengths[-1]} tokens")

    model = build_model(len(tok))
    train(model, examples, rng)
    model.to(torch.float16).save_pretrained(str(OUT), safe_serialization=True)
    write_configs()

    print("held-out prompts (float16 weights upcast to float32, greedy):")
    model = AutoModelForCausalLM.from_pretrained(str(OUT), dtype=torch.float32, attn_implementation="eager").eval()
    assert model.model.embed_tokens.weight.dtype == torch.float32
    tok = PreTrainedTokenizerFast.from_pretrained(str(OUT))
    records, ok = verify(model, tok)
    cfg = json.loads((OUT / "config.json").read_text())
    write_json(GOLDEN, {
        "generator": "scripts/goldens/tiny_qwen3_think.py",
        "versions": versions(),
        "checkpoint_dir": f"tests/fixtures/{OUT.name}",
        "weights_dtype_in_file": "float16",
        "training": {"seed": SEED, "steps": STEPS, "batch": BATCH, "lr": LR, "optimizer": "AdamW",
                     "conversations": N_CONVERSATIONS, "loss": "continuation tokens only"},
        "config": {k: cfg.get(k) for k in (
            "model_type", "vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
            "num_attention_heads", "num_key_value_heads", "head_dim", "max_position_embeddings", "rope_theta",
            "rms_norm_eps", "tie_word_embeddings", "bos_token_id", "eos_token_id")},
        "tokens": {t: tok.convert_tokens_to_ids(t) for t in SPECIALS + THINK_TOKENS},
        "targets": {"thinking": THINK_TARGET, "enable_thinking_false": ANSWER_TARGET,
                    "reasoning": REASONING, "answer": ANSWER, "no_think_suffix": NO_THINK_SUFFIX},
        "reference": {
            "library": "transformers AutoModelForCausalLM.from_pretrained(dir, dtype=float32), eager attention, cpu",
            "tokenizer": "PreTrainedTokenizerFast.from_pretrained(dir); prompt rendered by chat_template "
                         "(add_generation_prompt=True, enable_thinking passed only where not null) and "
                         "encoded with add_special_tokens=False",
            "greedy": "model.generate(do_sample=False, max_new_tokens=32), stops at <|im_end|> (included in ids)",
            "min_margin": "smallest top-1 minus top-2 logit over the generated positions",
        },
        "prompts": records,
    })
    if not ok:
        sys.exit("some held-out prompt did not give the target continuation")
    print(f"all {len(records)} held-out prompts give the target; wrote {OUT} and {GOLDEN}")


if __name__ == "__main__":
    main()
