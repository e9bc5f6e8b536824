"""Drives a running Kestrel server's OpenAI Responses API with the official `openai` client.

Usage: python3 test_responses_client.py BASE_URL   (e.g. http://127.0.0.1:8123/v1)
The server should read tool calls (`--tool-call-parser hermes`) for the `auto` check.
Exits non-zero on the first failed check.
"""

import json
import sys

import openai
from pydantic import BaseModel

WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "Current weather in a city",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string", "maxLength": 20}},
        "required": ["city"],
        "additionalProperties": False,
    },
    "strict": True,
}


class Person(BaseModel):
    name: str
    age: int


def check_create_and_stream(client: openai.OpenAI, model: str) -> None:
    done = client.responses.create(
        model=model, input="Say hello in one word.", instructions="Be brief.", max_output_tokens=40,
        temperature=0, metadata={"suite": "responses"},
    )
    assert done.object == "response" and done.id.startswith("resp_"), done
    assert done.status in ("completed", "incomplete"), done
    assert done.output_text, done
    assert done.metadata == {"suite": "responses"}, done.metadata
    assert done.usage.total_tokens == done.usage.input_tokens + done.usage.output_tokens, done.usage

    with client.responses.stream(
        model=model, input="Say hello in one word.", instructions="Be brief.", max_output_tokens=40, temperature=0,
        store=False,
    ) as stream:
        deltas = [e.delta for e in stream if e.type == "response.output_text.delta"]
        final = stream.get_final_response() if done.status == "completed" else None
    assert "".join(deltas) == done.output_text, (deltas, done.output_text)
    if final is not None:
        assert final.output_text == done.output_text, final
        assert final.usage.output_tokens == done.usage.output_tokens, final.usage


def check_tools(client: openai.OpenAI, model: str) -> None:
    forced = client.responses.create(
        model=model, input="What is the weather in Oslo?", tools=[WEATHER],
        tool_choice={"type": "function", "name": "get_weather"}, max_output_tokens=60, temperature=0,
    )
    calls = [i for i in forced.output if i.type == "function_call"]
    assert len(calls) == 1 and calls[0].name == "get_weather", forced.output
    args = json.loads(calls[0].arguments)
    assert isinstance(args["city"], str) and len(args["city"]) <= 20, args

    # The call's output continues the stored conversation.
    after = client.responses.create(
        model=model, previous_response_id=forced.id, tools=[WEATHER], max_output_tokens=24, temperature=0,
        input=[{"type": "function_call_output", "call_id": calls[0].call_id, "output": '{"temp": 21}'}],
    )
    assert after.previous_response_id == forced.id, after
    assert after.usage.input_tokens > forced.usage.input_tokens, after.usage

    # `auto` is answered with text or calls; either way the response parses.
    auto = client.responses.create(
        model=model, input="What is the weather in Rome?", tools=[WEATHER], tool_choice="auto",
        max_output_tokens=60, temperature=0, store=False,
    )
    assert auto.output and all(i.type in ("message", "function_call") for i in auto.output), auto.output

    # Streamed forced call: the accumulator assembles it.
    with client.responses.stream(
        model=model, input="Weather in Paris?", tools=[WEATHER], tool_choice="required",
        max_output_tokens=60, temperature=0, store=False,
    ) as stream:
        final = stream.get_final_response()
    streamed = [i for i in final.output if i.type == "function_call"]
    assert streamed and json.loads(streamed[0].arguments)["city"], final.output


def check_structured(client: openai.OpenAI, model: str) -> None:
    parsed = client.responses.parse(
        model=model, input="Invent a person.", text_format=Person, max_output_tokens=60, temperature=0,
        store=False,
    )
    person = parsed.output_parsed
    assert isinstance(person, Person) and person.name, parsed.output_text


def check_store_and_errors(client: openai.OpenAI, model: str) -> None:
    kept = client.responses.create(model=model, input="Hi!", max_output_tokens=8, temperature=0)
    got = client.responses.retrieve(kept.id)
    assert got.id == kept.id and got.output_text == kept.output_text, got

    follow = client.responses.create(
        model=model, input="And again?", previous_response_id=kept.id, max_output_tokens=8, temperature=0,
    )
    assert follow.usage.input_tokens_details.cached_tokens > 0, follow.usage

    client.responses.delete(kept.id)
    try:
        client.responses.retrieve(kept.id)
        raise AssertionError("a deleted response is gone")
    except openai.NotFoundError as e:
        assert kept.id in str(e), e
    try:
        client.responses.create(model=model, input="x", previous_response_id="resp_missing")
        raise AssertionError("an unknown previous_response_id is a 404")
    except openai.NotFoundError as e:
        assert e.body["param"] == "previous_response_id", e.body
    try:
        client.responses.create(
            model=model, input=[{"role": "user", "content": [{"type": "input_image", "image_url": "https://x/y.png"}]}],
        )
        raise AssertionError("an image part is a 400")
    except openai.BadRequestError as e:
        assert "input_image" in str(e), e


def main() -> None:
    client = openai.OpenAI(base_url=sys.argv[1], api_key="unused")
    model = client.models.list().data[0].id
    check_create_and_stream(client, model)
    check_tools(client, model)
    check_structured(client, model)
    check_store_and_errors(client, model)
    print("responses client checks passed")


if __name__ == "__main__":
    main()
