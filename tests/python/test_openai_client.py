"""Drives a running `kestrel serve` with the official `openai` client.

Usage: python3 test_openai_client.py BASE_URL   (e.g. http://127.0.0.1:8123/v1)
Exits non-zero on the first failed check.
"""

import sys

import openai


def main() -> None:
    base_url = sys.argv[1]
    client = openai.OpenAI(base_url=base_url, api_key="unused")

    models = client.models.list()
    model = models.data[0].id
    assert model, "the server must list a model"

    # Completions: non-streamed and streamed greedy text must agree.
    done = client.completions.create(model=model, prompt="The capital of France is", max_tokens=8, temperature=0)
    text = done.choices[0].text
    assert text, "empty completion"
    assert done.usage.completion_tokens == 8 or done.choices[0].finish_reason == "stop", done
    assert done.usage.total_tokens == done.usage.prompt_tokens + done.usage.completion_tokens

    streamed = "".join(
        chunk.choices[0].text
        for chunk in client.completions.create(
            model=model, prompt="The capital of France is", max_tokens=8, temperature=0, stream=True
        )
        if chunk.choices
    )
    assert streamed == text, (streamed, text)

    # Chat: non-streamed and streamed, with a usage chunk.
    messages = [{"role": "user", "content": "Say hello in one word."}]
    chat = client.chat.completions.create(model=model, messages=messages, max_tokens=10, temperature=0)
    reply = chat.choices[0].message.content
    assert chat.choices[0].message.role == "assistant"
    assert reply, "empty chat reply"

    parts, usage = [], None
    for chunk in client.chat.completions.create(
        model=model, messages=messages, max_tokens=10, temperature=0, stream=True,
        stream_options={"include_usage": True},
    ):
        if chunk.choices:
            parts.append(chunk.choices[0].delta.content or "")
        if chunk.usage is not None:
            usage = chunk.usage
    assert "".join(parts) == reply, (parts, reply)
    assert usage is not None and usage.completion_tokens == chat.usage.completion_tokens, usage

    # A list of prompts with n = 2: choices prompt by prompt, each greedy pair identical.
    both = client.completions.create(
        model=model, prompt=["The capital of France is", "1, 2, 3,"], n=2, max_tokens=4, temperature=0
    )
    assert [c.index for c in both.choices] == [0, 1, 2, 3], both
    assert both.choices[0].text == both.choices[1].text == text[: len(both.choices[0].text)], both
    assert both.choices[2].text == both.choices[3].text, both
    assert both.system_fingerprint and both.system_fingerprint.startswith("fp_kestrel_"), both

    # n with stream: every choice index finishes exactly once.
    finished = {}
    for chunk in client.completions.create(
        model=model, prompt="Once upon a time", n=3, max_tokens=4, temperature=1, seed=5, stream=True
    ):
        for c in chunk.choices:
            if c.finish_reason:
                finished[c.index] = finished.get(c.index, 0) + 1
    assert finished == {0: 1, 1: 1, 2: 1}, finished

    # logit_bias forces a token; vLLM extensions and unknown fields pass through extra_body.
    forced = client.completions.create(
        model=model, prompt="1, 2, 3,", max_tokens=3, temperature=0, logit_bias={"11": 100},
        extra_body={"min_tokens": 1, "skip_special_tokens": True, "some_vendor_field": 1},
    )
    assert forced.choices[0].text == client.completions.create(
        model=model, prompt="1, 2, 3,", max_tokens=1, temperature=0, logit_bias={"11": 100}
    ).choices[0].text * 3, forced

    # Embeddings: unit vectors; the client's default (base64, decoded by the client) agrees with
    # encoding_format="float".
    emb = client.embeddings.create(model=model, input=["Hello world", "Another text"])
    assert [d.index for d in emb.data] == [0, 1], emb
    vec = emb.data[0].embedding
    assert abs(sum(x * x for x in vec) - 1.0) < 1e-4, sum(x * x for x in vec)
    assert emb.usage.prompt_tokens > 0, emb
    floats = client.embeddings.create(model=model, input="Hello world", encoding_format="float")
    assert max(abs(a - b) for a, b in zip(floats.data[0].embedding, vec)) < 1e-6

    # A bad parameter is a 400 that names it.
    try:
        client.completions.create(model=model, prompt="hi", max_tokens=4, temperature=5)
    except openai.BadRequestError as e:
        assert "temperature" in str(e), e
    else:
        raise AssertionError("temperature=5 must be rejected")

    print("openai client test passed:", repr(text), repr(reply))


if __name__ == "__main__":
    main()
