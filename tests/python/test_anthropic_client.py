"""Drives a running `kestrel serve` (with the Hermes tool-call parser) with the official
`anthropic` client: messages.create, messages.stream (text_stream and get_final_message),
forced and auto tools, count_tokens and the error shapes.

Usage: python3 test_anthropic_client.py BASE_URL   (without /v1, e.g. http://127.0.0.1:8123)
Exits non-zero on the first failed check.
"""

import json
import sys
import urllib.request

import anthropic

# The SDK no longer takes sampling parameters as arguments; the API still reads them.
GREEDY = {"temperature": 0}

WEATHER = {
    "name": "get_weather",
    "description": "Current weather in a city",
    "input_schema": {
        "type": "object",
        "properties": {
            "city": {"type": "string", "maxLength": 20},
            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
        },
        "required": ["city"],
        "additionalProperties": False,
    },
}


def check_weather_input(block) -> None:
    """A tool_use block of WEATHER whose input satisfies its schema."""
    assert block.type == "tool_use", block
    assert block.id.startswith("toolu_"), block
    assert block.name == "get_weather", block
    assert isinstance(block.input["city"], str) and len(block.input["city"]) <= 20, block
    assert set(block.input) <= {"city", "unit"}, block
    assert block.input.get("unit", "celsius") in ("celsius", "fahrenheit"), block


def text_of(message) -> str:
    return "".join(b.text for b in message.content if b.type == "text")


def create_and_stream(client: anthropic.Anthropic, model: str) -> None:
    messages = [{"role": "user", "content": "Say hello in one word."}]
    done = client.messages.create(model=model, max_tokens=12, extra_body=GREEDY, messages=messages)
    assert done.type == "message" and done.role == "assistant", done
    assert done.id.startswith("msg_"), done
    assert done.model == model, done
    assert done.stop_reason in ("end_turn", "max_tokens"), done
    assert text_of(done), done
    assert done.usage.input_tokens > 0 and done.usage.output_tokens > 0, done.usage
    print(f"ok    messages.create: {text_of(done)!r}")

    with client.messages.stream(model=model, max_tokens=12, extra_body=GREEDY, messages=messages) as s:
        streamed = "".join(s.text_stream)
        final = s.get_final_message()
    assert streamed == text_of(done), (streamed, text_of(done))
    assert text_of(final) == text_of(done), final
    assert final.stop_reason == done.stop_reason, final
    assert final.usage.output_tokens == done.usage.output_tokens, final.usage
    print("ok    messages.stream: text_stream and the final message equal the created one")

    stopped = client.messages.create(
        model=model, max_tokens=3, extra_body=GREEDY,
        messages=[{"role": "user", "content": "Tell me a long story."}],
    )
    assert stopped.stop_reason == "max_tokens" and stopped.usage.output_tokens == 3, stopped
    print("ok    max_tokens is a stop reason")


def tools(client: anthropic.Anthropic, model: str) -> None:
    question = [{"role": "user", "content": "What is the weather in Paris?"}]
    forced = client.messages.create(
        model=model, max_tokens=80, extra_body=GREEDY, messages=question, tools=[WEATHER],
        tool_choice={"type": "tool", "name": "get_weather"},
    )
    assert forced.stop_reason == "tool_use", forced
    calls = [b for b in forced.content if b.type == "tool_use"]
    assert len(calls) == 1, forced
    check_weather_input(calls[0])
    print(f"ok    a forced tool's input satisfies its schema: {calls[0].input}")

    with client.messages.stream(
        model=model, max_tokens=80, extra_body=GREEDY, messages=question, tools=[WEATHER],
        tool_choice={"type": "any"},
    ) as s:
        final = s.get_final_message()
    assert final.stop_reason == "tool_use", final
    check_weather_input([b for b in final.content if b.type == "tool_use"][0])
    print("ok    a streamed `any` call reassembles to valid input")

    auto = client.messages.create(
        model=model, max_tokens=60, extra_body=GREEDY, messages=question, tools=[WEATHER],
    )
    assert auto.stop_reason in ("end_turn", "max_tokens", "tool_use"), auto
    for block in auto.content:
        if block.type == "tool_use":
            assert block.name == "get_weather" and isinstance(block.input, dict), block
    print(f"ok    auto tools: {auto.stop_reason}")

    call = calls[0]
    follow_up = question + [
        {"role": "assistant", "content": [{"type": "tool_use", "id": call.id, "name": call.name, "input": call.input}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call.id, "content": "Sunny, 21 degrees."}]},
    ]
    answer = client.messages.create(model=model, max_tokens=20, extra_body=GREEDY, messages=follow_up, tools=[WEATHER])
    assert answer.stop_reason in ("end_turn", "max_tokens", "tool_use"), answer
    print("ok    a tool_result turn is answered")

    counted = client.messages.count_tokens(model=model, messages=follow_up, tools=[WEATHER])
    answer_prompt = answer.usage.input_tokens + (answer.usage.cache_read_input_tokens or 0)
    assert counted.input_tokens == answer_prompt, (counted, answer.usage)
    bare = client.messages.count_tokens(model=model, messages=question)
    assert bare.input_tokens < counted.input_tokens, (bare, counted)
    print(f"ok    count_tokens: {counted.input_tokens} = input + cache reads of a create")


def errors(client: anthropic.Anthropic, model: str) -> None:
    try:
        client.messages.create(
            model=model, max_tokens=8,
            messages=[{"role": "user", "content": [
                {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}},
            ]}],
        )
        raise AssertionError("an image block was accepted")
    except anthropic.BadRequestError as e:
        assert e.body["type"] == "error", e.body
        assert e.body["error"]["type"] == "invalid_request_error", e.body
        assert "image" in e.body["error"]["message"], e.body
    print("ok    an image block is a 400 invalid_request_error naming it")

    try:
        client.messages.create(model="no-such-model", max_tokens=8, messages=[{"role": "user", "content": "hi"}])
        raise AssertionError("an unknown model was answered")
    except anthropic.NotFoundError as e:
        assert e.body["error"]["type"] == "not_found_error", e.body
    print("ok    an unknown model is a 404 not_found_error")

    try:
        client.messages.create(model=model, max_tokens=8, extra_body={"temperature": 7}, messages=[{"role": "user", "content": "hi"}])
        raise AssertionError("temperature 7 was accepted")
    except anthropic.BadRequestError as e:
        assert "temperature" in e.body["error"]["message"], e.body
    print("ok    a bad parameter is a 400 naming it")


def main() -> None:
    base_url = sys.argv[1]
    with urllib.request.urlopen(f"{base_url}/v1/models") as r:
        model = json.load(r)["data"][0]["id"]
    client = anthropic.Anthropic(base_url=base_url, api_key="unused", max_retries=0)
    create_and_stream(client, model)
    tools(client, model)
    errors(client, model)
    print("anthropic client: all checks passed")


if __name__ == "__main__":
    main()
