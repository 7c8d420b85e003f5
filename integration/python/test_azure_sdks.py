"""The official openai, anthropic and google-genai SDKs, pointed at the Envoy listener, reach GPT
served only by Azure OpenAI (kind azure), authenticated by a Microsoft Entra token the filter got
from a mock IMDS (`credential.azure_managed_identity`): plain, streamed and with a tool call. The
mock Azure resource takes no key and only a live token that IMDS issued, checks Azure's paths and
api-version, and answers as Azure does (the prompt filter chunk with empty `choices` first in every
stream, `content_filter_results` in every choice, a streamed tool call opening with its name and
ending `tool_calls`), so a call succeeds only if the token, the path and the stream were mapped.
Runs against `switchyard-demo --azure` (`conftest.py`)."""
import pytest
from google.genai import types

from conftest import anthropic_client, genai_client, openai_client

MODEL = "openai/gpt-4.1"
PROVIDER = "azure-openai"
WEATHER = {
    "name": "get_weather",
    "description": "The weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}
TOOL = {"x-mock-behavior": f"{PROVIDER}=tool"}
HELLO = [{"role": "user", "content": "hi"}]
ASK = [{"role": "user", "content": "weather in Paris?"}]


@pytest.fixture(scope="module")
def az_oa(azure_port):
    return openai_client(azure_port)


@pytest.fixture(scope="module")
def az_an(azure_port):
    return anthropic_client(azure_port)


@pytest.fixture(scope="module")
def az_gg(azure_port):
    return genai_client(azure_port)


def test_openai_sdk_plain(az_oa):
    raw = az_oa.chat.completions.with_raw_response.create(model=MODEL, max_tokens=32, messages=HELLO)
    assert raw.headers["x-switchyard-provider"] == PROVIDER
    r = raw.parse()
    assert r.model == MODEL
    assert r.choices[0].message.content == f"Hello from {PROVIDER}"
    assert r.usage.model_extra["cost"] > 0


def test_openai_sdk_streamed(az_oa):
    chunks = list(az_oa.chat.completions.create(
        model=MODEL, max_tokens=32, messages=HELLO, stream=True, stream_options={"include_usage": True},
    ))
    # Azure's prompt filter chunk (no choices, no usage) is not passed on: every chunk but the
    # usage chunk has a choice, as OpenAI's own stream.
    assert all(c.choices for c in chunks[:-1]), chunks[0]
    assert all("prompt_filter_results" not in (c.model_extra or {}) for c in chunks)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "tok0 tok1 tok2 tok3 tok4 ", text
    assert chunks[-1].usage is not None and chunks[-1].usage.model_extra["cost"] > 0


def test_openai_sdk_tool_call_plain_and_streamed(az_oa):
    tools = [{"type": "function", "function": WEATHER}]
    r = az_oa.chat.completions.create(model=MODEL, max_tokens=32, messages=ASK, tools=tools, extra_headers=TOOL)
    call = r.choices[0].message.tool_calls[0]
    assert (call.function.name, call.function.arguments) == ("get_weather", '{"city":"Paris"}')
    assert r.choices[0].finish_reason == "tool_calls"
    chunks = list(az_oa.chat.completions.create(
        model=MODEL, max_tokens=32, messages=ASK, tools=tools, extra_headers=TOOL, stream=True,
    ))
    calls = [t for c in chunks if c.choices for t in (c.choices[0].delta.tool_calls or [])]
    assert calls[0].function.name == "get_weather" and calls[0].id == "call_1"
    assert "".join(t.function.arguments or "" for t in calls) == '{"city":"Paris"}'
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "tool_calls"


def test_anthropic_sdk_plain_streamed_and_tool(az_an):
    m = az_an.messages.create(model=MODEL, max_tokens=32, messages=HELLO)
    assert m.content[0].text == f"Hello from {PROVIDER}"
    with az_an.messages.stream(model=MODEL, max_tokens=32, messages=HELLO) as s:
        text = "".join(s.text_stream)
        final = s.get_final_message()
    assert text == "tok0 tok1 tok2 tok3 tok4 ", text
    assert final.usage.output_tokens > 0
    # message_start named the answer's id, never the prompt filter chunk's empty one.
    assert final.id.startswith("msg_") and len(final.id) > 4, final.id
    tools = [{"name": WEATHER["name"], "description": WEATHER["description"], "input_schema": WEATHER["parameters"]}]
    m = az_an.messages.create(model=MODEL, max_tokens=32, messages=ASK, tools=tools, extra_headers=TOOL)
    use = next(b for b in m.content if b.type == "tool_use")
    assert (use.name, use.input) == ("get_weather", {"city": "Paris"})
    assert m.stop_reason == "tool_use"
    with az_an.messages.stream(model=MODEL, max_tokens=32, messages=ASK, tools=tools, extra_headers=TOOL) as s:
        final = s.get_final_message()
    use = next(b for b in final.content if b.type == "tool_use")
    assert (use.name, use.input) == ("get_weather", {"city": "Paris"})


def test_google_genai_sdk_plain_streamed_and_tool(az_gg):
    r = az_gg.models.generate_content(model=MODEL, contents="hi")
    assert r.text == f"Hello from {PROVIDER}"
    assert r.sdk_http_response.headers["x-switchyard-provider"] == PROVIDER
    text = "".join(c.text or "" for c in az_gg.models.generate_content_stream(model=MODEL, contents="hi"))
    assert text == "tok0 tok1 tok2 tok3 tok4 ", text
    config = types.GenerateContentConfig(
        tools=[types.Tool(function_declarations=[types.FunctionDeclaration(**WEATHER)])],
        automatic_function_calling=types.AutomaticFunctionCallingConfig(disable=True),
        http_options=types.HttpOptions(headers=TOOL),
    )
    r = az_gg.models.generate_content(model=MODEL, contents="weather in Paris?", config=config)
    call = r.function_calls[0]
    assert (call.name, call.args) == ("get_weather", {"city": "Paris"})
    streamed = list(az_gg.models.generate_content_stream(model=MODEL, contents="weather in Paris?", config=config))
    calls = [fc for c in streamed for fc in (c.function_calls or [])]
    assert [(fc.name, fc.args) for fc in calls] == [("get_weather", {"city": "Paris"})]
