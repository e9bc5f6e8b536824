"""Agent-framework clients against a running `kestrel serve` (started with a tool-call parser).

Usage: python3 test_agent_clients.py BASE_URL   (e.g. http://127.0.0.1:8123, no /v1)
Checks, each against the server's real output:
  * openai: chat.completions.parse with a pydantic model; tools with tool_choice="required";
    streamed tool-call deltas that reassemble into the non-streamed call.
  * LangChain (langchain-openai): ChatOpenAI.with_structured_output(Model) and
    .bind_tools([...]) with a forced tool.
  * huggingface_hub.InferenceClient: text_generation with a JSON grammar (TGI's POST /),
    streamed text_generation, and chat_completion.
Exits non-zero on the first failed check.
"""

import json
import sys
import urllib.request

import openai
import pydantic
from huggingface_hub import InferenceClient
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI


class City(pydantic.BaseModel):
    name: str
    population: int


WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The current weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "maxLength": 24}},
            "required": ["city"],
            "additionalProperties": False,
        },
    },
}


@tool
def get_weather(city: str) -> str:
    """The current weather in a city."""
    return f"sunny in {city}"


def check_openai(base: str) -> None:
    client = openai.OpenAI(base_url=f"{base}/v1", api_key="unused")
    model = client.models.list().data[0].id
    messages = [{"role": "user", "content": "Name a large city and its population."}]

    parsed = client.chat.completions.parse(
        model=model, messages=messages, response_format=City, max_tokens=60, temperature=0
    )
    city = parsed.choices[0].message.parsed
    assert isinstance(city, City) and isinstance(city.population, int), parsed
    print(f"openai parse: {city!r}")

    ask = [{"role": "user", "content": "What is the weather in Paris?"}]
    forced = client.chat.completions.create(
        model=model, messages=ask, tools=[WEATHER], tool_choice="required", max_tokens=40,
        temperature=0,
    )
    choice = forced.choices[0]
    assert choice.finish_reason == "tool_calls", choice
    calls = choice.message.tool_calls
    assert calls and calls[0].function.name == "get_weather", choice
    args = json.loads(calls[0].function.arguments)
    assert set(args) == {"city"} and isinstance(args["city"], str), args
    assert calls[0].id, calls
    print(f"openai required tool call: {calls[0].function.name}({args})")

    named = {"type": "function", "function": {"name": "get_weather"}}
    whole = client.chat.completions.create(
        model=model, messages=ask, tools=[WEATHER], tool_choice=named, max_tokens=40,
        temperature=0,
    )
    name, arguments, reason = "", "", None
    for chunk in client.chat.completions.create(
        model=model, messages=ask, tools=[WEATHER], tool_choice=named, max_tokens=40,
        temperature=0, stream=True,
    ):
        if not chunk.choices:
            continue
        delta = chunk.choices[0].delta
        for d in delta.tool_calls or []:
            assert d.index == 0, d
            if d.function is not None:
                name += d.function.name or ""
                arguments += d.function.arguments or ""
        reason = chunk.choices[0].finish_reason or reason
    want = whole.choices[0].message.tool_calls[0].function
    assert name == want.name == "get_weather", (name, want)
    assert json.loads(arguments) == json.loads(want.arguments), (arguments, want.arguments)
    assert reason == "tool_calls", reason
    print(f"openai streamed tool call: {name}({arguments})")


def check_langchain(base: str) -> None:
    model = openai.OpenAI(base_url=f"{base}/v1", api_key="unused").models.list().data[0].id
    llm = ChatOpenAI(base_url=f"{base}/v1", api_key="unused", model=model, temperature=0,
                     max_tokens=60)

    city = llm.with_structured_output(City).invoke("Name a large city and its population.")
    assert isinstance(city, City), city
    print(f"langchain with_structured_output: {city!r}")

    msg = llm.bind_tools([get_weather], tool_choice="get_weather").invoke(
        "What is the weather in Paris?"
    )
    assert msg.tool_calls, msg
    call = msg.tool_calls[0]
    assert call["name"] == "get_weather" and isinstance(call["args"].get("city"), str), call
    print(f"langchain bind_tools: {call['name']}({call['args']})")


def check_huggingface_hub(base: str) -> None:
    client = InferenceClient(base)
    schema = {
        "type": "object",
        "properties": {"answer": {"type": "string", "maxLength": 20}},
        "required": ["answer"],
        "additionalProperties": False,
    }
    out = client.text_generation(
        "Answer in JSON: what is the capital of France?", max_new_tokens=30,
        grammar={"type": "json", "value": schema}, details=True,
    )
    value = json.loads(out.generated_text)
    assert set(value) == {"answer"} and isinstance(value["answer"], str), out
    assert out.details.generated_tokens > 0, out
    print(f"huggingface_hub text_generation with grammar: {out.generated_text}")

    whole = client.text_generation("The capital of France is", max_new_tokens=8)
    streamed = "".join(client.text_generation("The capital of France is", max_new_tokens=8,
                                              stream=True))
    assert streamed == whole, (streamed, whole)

    # Given only a URL, the client names the model "dummy", which (as with vLLM) is a 404:
    # name the served model, as with any OpenAI-compatible server.
    with urllib.request.urlopen(f"{base}/info", timeout=10) as r:
        model = json.load(r)["model_id"]
    chat = client.chat_completion(
        messages=[{"role": "user", "content": "Say hello."}], max_tokens=10, temperature=0,
        model=model,
    )
    assert chat.choices[0].message.content, chat
    print(f"huggingface_hub chat_completion: {chat.choices[0].message.content!r}")

    # The client turns a json_schema response_format into TGI's {"type": "json_object",
    # "value": schema}.
    shaped = client.chat_completion(
        messages=[{"role": "user", "content": "Answer in JSON: the capital of France?"}],
        max_tokens=30, temperature=0, model=model,
        response_format={"type": "json_schema", "json_schema": {"name": "a", "schema": schema}},
    )
    value = json.loads(shaped.choices[0].message.content)
    assert set(value) == {"answer"}, shaped
    print(f"huggingface_hub chat_completion with a schema: {value}")


def main() -> None:
    base = sys.argv[1].rstrip("/")
    check_openai(base)
    check_langchain(base)
    check_huggingface_hub(base)
    print("agent clients: all checks passed")


if __name__ == "__main__":
    main()
