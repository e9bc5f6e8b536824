"""Drives a fleet of two models with the official `openai` and `anthropic` clients, beside a
`kestrel serve` of each model, as a user's deployment would: every answer from the gateway must
equal the answer of the serve of the model the request names.

Usage: python3 test_fleet_clients.py GATEWAY_URL SERVE_A_URL SERVE_B_URL   (each ending in /v1)
The gateway's workers serve model `a` (a model with a chat template) and `b` (one without);
each serve runs the same file under the same name. Exits non-zero on the first failed check.
"""

import sys

import anthropic
import openai

PROMPTS = ["The capital of France is", "Water boils when"]
MESSAGES = [{"role": "user", "content": "Say hello in one word."}]


def completions(client: openai.OpenAI, model: str) -> list:
    """Greedy texts of PROMPTS, each non-streamed and streamed."""
    out = []
    for prompt in PROMPTS:
        done = client.completions.create(model=model, prompt=prompt, max_tokens=8, temperature=0)
        assert done.model == model, (done.model, model)
        streamed = "".join(
            c.choices[0].text
            for c in client.completions.create(
                model=model, prompt=prompt, max_tokens=8, temperature=0, stream=True
            )
            if c.choices
        )
        out.append((done.choices[0].text, streamed))
    return out


def chat(client: openai.OpenAI, model: str):
    """The greedy reply to MESSAGES, or the status and message of the refusal."""
    try:
        reply = client.chat.completions.create(
            model=model, messages=MESSAGES, max_tokens=10, temperature=0
        )
        return ("ok", reply.choices[0].message.content)
    except openai.APIStatusError as e:
        return (e.status_code, e.message)


# The `anthropic` SDK no longer takes sampling parameters as arguments; the API still reads them.
GREEDY = {"temperature": 0}


def messages(client: anthropic.Anthropic, model: str):
    """The greedy Messages reply to MESSAGES (whole and streamed) and its prompt's token count,
    or the status and error type of the refusal."""
    try:
        done = client.messages.create(model=model, messages=MESSAGES, max_tokens=10, extra_body=GREEDY)
        with client.messages.stream(model=model, messages=MESSAGES, max_tokens=10, extra_body=GREEDY) as s:
            streamed = s.get_final_message()
        counted = client.messages.count_tokens(model=model, messages=MESSAGES).input_tokens
        prompt = done.usage.input_tokens + (done.usage.cache_read_input_tokens or 0)
        assert counted == prompt, (counted, done.usage)
        text = [b.text for b in done.content if b.type == "text"]
        assert [b.text for b in streamed.content if b.type == "text"] == text, (streamed, done)
        return ("ok", text, done.stop_reason, counted)
    except anthropic.APIStatusError as e:
        return (e.status_code, e.body["error"]["type"])


def anthropic_checks(urls: list) -> None:
    """The Messages routes answer through the gateway as on each serve."""
    gateway, serve_a, serve_b = (
        anthropic.Anthropic(base_url=u.removesuffix("/v1"), api_key="unused", max_retries=0) for u in urls
    )
    for model, serve in (("a", serve_a), ("b", serve_b)):
        got, expected = messages(gateway, model), messages(serve, model)
        assert got == expected, (model, got, expected)
        print(f"ok    messages for {model} answer as its serve: {got}")
    try:
        gateway.messages.create(model="c", messages=MESSAGES, max_tokens=2)
        raise AssertionError("an unknown model was answered")
    except anthropic.NotFoundError as e:
        assert e.body["type"] == "error" and e.body["error"]["type"] == "not_found_error", e.body
    print("ok    an unknown model is a 404 not_found_error on /v1/messages")


def responses(gateway: openai.OpenAI, serve: openai.OpenAI) -> None:
    """The Responses API through the gateway: the same greedy answer as the serve of model `a`,
    stored at the gateway (retrieved, continued, deleted through it)."""
    ask = dict(model="a", input="Say hello in one word.", max_output_tokens=10, temperature=0)
    done = gateway.responses.create(**ask)
    assert done.output_text == serve.responses.create(**ask, store=False).output_text, done
    assert gateway.responses.retrieve(done.id).output_text == done.output_text
    follow = gateway.responses.create(
        model="a", input="Once more.", previous_response_id=done.id, max_output_tokens=6, temperature=0
    )
    assert follow.usage.input_tokens > done.usage.input_tokens, follow.usage
    with gateway.responses.stream(**ask, store=False) as stream:
        streamed = "".join(e.delta for e in stream if e.type == "response.output_text.delta")
    assert streamed == done.output_text, (streamed, done.output_text)
    gateway.responses.delete(done.id)
    try:
        gateway.responses.retrieve(done.id)
        raise AssertionError("a deleted response was returned")
    except openai.NotFoundError:
        pass
    print(f"ok    responses through the gateway answer as the serve: {done.output_text!r}")


def main() -> None:
    gateway, serve_a, serve_b = (openai.OpenAI(base_url=u, api_key="unused") for u in sys.argv[1:4])
    listed = sorted(m.id for m in gateway.models.list().data)
    assert listed == ["a", "b"], listed

    for model, serve in (("a", serve_a), ("b", serve_b)):
        expected = completions(serve, model)
        assert all(t == s for t, s in expected), expected
        got = completions(gateway, model)
        assert got == expected, (model, got, expected)
        print(f"ok    completions for {model} equal its serve's: {[t for t, _ in got]}")
        assert chat(gateway, model) == chat(serve, model), (model, chat(gateway, model))
        print(f"ok    chat for {model} answers as its serve: {chat(gateway, model)}")

    responses(gateway, serve_a)

    try:
        gateway.completions.create(model="c", prompt="hi", max_tokens=2)
        raise AssertionError("an unknown model was answered")
    except openai.NotFoundError as e:
        assert e.code == "model_not_found", e
    print("ok    an unknown model is a 404 model_not_found")

    try:
        gateway.completions.create(model="a", prompt="hi", max_tokens=2, temperature=5)
        raise AssertionError("temperature 5 was accepted")
    except openai.BadRequestError as e:
        assert e.param == "temperature", e
    print("ok    a bad parameter is a 400 naming it")
    anthropic_checks(sys.argv[1:4])
    print("fleet clients: all checks passed")


if __name__ == "__main__":
    main()
