"""A small byte-level BPE tokenizer for the tiny Llama fixtures, trained on fixed text.

Special tokens: <unk>=0, <s>=1 (BOS), </s>=2 (EOS), <|im_start|>=3, <|im_end|>=4.
A TemplateProcessing post-processor prepends <s> when add_special_tokens=True.
"""
from __future__ import annotations

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

SPECIALS = ["<unk>", "<s>", "</s>", "<|im_start|>", "<|im_end|>"]
VOCAB_SIZE = 384

CHAT_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)

TRAINING_TEXT = [
    "The quick brown fox jumps over the lazy dog near the river bank.",
    "A small model can still learn simple patterns when the data is clean and the task is narrow.",
    "Kestrel reads weights, builds a graph of layers, and turns tokens into text one step at a time.",
    "def add(a, b):\n    return a + b\n\nprint(add(2, 3))\n",
    "for i in range(10):\n    if i % 2 == 0:\n        print(i)\n",
    "The numbers 0 1 2 3 4 5 6 7 8 9 10 11 12 42 100 256 1024 2048 are written in digits.",
    "On Monday the market opened early; on Tuesday it rained; on Wednesday the train was late.",
    "Hello world! How are you today? I am fine, thank you. What is your name?",
    "user: What is the capital of France?\nassistant: The capital of France is Paris.",
    "Water boils at 100 degrees Celsius at sea level and freezes at 0 degrees.",
    "She opened the window, looked at the garden, and smiled at the birds on the fence.",
    "The lighthouse keeper wrote the weather into his logbook every evening before dinner.",
]


def train_tokenizer() -> Tokenizer:
    """Train the BPE deterministically on TRAINING_TEXT (repeated so merges are well defined)."""
    tok = Tokenizer(models.BPE(unk_token=None, byte_fallback=False))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        min_frequency=2,
        special_tokens=SPECIALS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(TRAINING_TEXT * 3, trainer=trainer)
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A", pair="<s> $A <s> $B", special_tokens=[("<s>", 1)]
    )
    assert [tok.token_to_id(s) for s in SPECIALS] == list(range(len(SPECIALS)))
    return tok
