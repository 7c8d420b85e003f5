"""The official openai, anthropic and google-genai SDKs, pointed at the Envoy listener, reach Claude
on Amazon Bedrock (the demo's `amazon-bedrock`, kind bedrock): plain and streamed. Envoy signs each
attempt with SigV4 and the mock Bedrock recomputes the signature (a wrong one is AWS's 403), takes
only Bedrock's body (`anthropic_version: bedrock-2023-05-31`, no `model`, no `stream`) and answers
streams as `application/vnd.amazon.eventstream` frames, which the filter decodes into each SDK's
own stream. Amazon Nova Pro (`amazon/nova-pro-v1`) goes through Converse and ConverseStream
instead: the mock checks each body against botocore's shapes, and a request offering tools gets a
tool call. Runs against the demo stack (`conftest.py`)."""
import json

import pytest

from conftest import genai_client

CLAUDE = "anthropic/claude-sonnet-4-5"  # anthropic-direct, amazon-bedrock, google-vertex
BEDROCK_ONLY = {"x-switchyard-routing": json.dumps({"provider": {"only": ["amazon-bedrock"]}})}
TEXT = "Hello from Bedrock"


@pytest.fixture(scope="module")
def gg(demo_port):
    return genai_client(demo_port, headers=BEDROCK_ONLY)


def test_openai_sdk_plain_and_streamed(oa):
    raw = oa.chat.completions.with_raw_response.create(
        model=CLAUDE, max_tokens=32, messages=[{"role": "user", "content": "hi"}], extra_headers=BEDROCK_ONLY
    )
    assert raw.headers["x-switchyard-provider"] == "amazon-bedrock"
    r = raw.parse()
    assert r.choices[0].message.content == TEXT
    assert r.usage.model_extra["cost"] > 0
    chunks = list(oa.chat.completions.create(
        model=CLAUDE, max_tokens=32, messages=[{"role": "user", "content": "hi"}], stream=True,
        stream_options={"include_usage": True}, extra_headers=BEDROCK_ONLY,
    ))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == TEXT
    assert chunks[-1].usage is not None and chunks[-1].usage.model_extra["cost"] > 0


def test_anthropic_sdk_plain_and_streamed(an):
    raw = an.messages.with_raw_response.create(
        model=CLAUDE, max_tokens=32, messages=[{"role": "user", "content": "hi"}], extra_headers=BEDROCK_ONLY
    )
    assert raw.headers["x-switchyard-provider"] == "amazon-bedrock"
    m = raw.parse()
    assert m.content[0].text == TEXT
    with an.messages.stream(
        model=CLAUDE, max_tokens=32, messages=[{"role": "user", "content": "hi"}], extra_headers=BEDROCK_ONLY
    ) as s:
        text = "".join(s.text_stream)
        final = s.get_final_message()
    assert text == TEXT
    assert final.usage.output_tokens > 0


def test_google_genai_sdk_plain_and_streamed(gg):
    r = gg.models.generate_content(model=CLAUDE, contents="hi")
    assert r.sdk_http_response.headers["x-switchyard-provider"] == "amazon-bedrock"
    assert r.text == TEXT
    text = "".join(c.text or "" for c in gg.models.generate_content_stream(model=CLAUDE, contents="hi"))
    assert text == TEXT


# Amazon Nova Pro: Bedrock's Converse and ConverseStream (not InvokeModel), behind the same three SDKs.
NOVA = "amazon/nova-pro-v1"
CONVERSE_TEXT = "Hello from Converse"
WEATHER_OPENAI = [{"type": "function", "function": {"name": "get_weather", "description": "Weather by city",
                   "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]


def test_openai_sdk_reaches_converse_plain_streamed_and_tool_call(oa):
    raw = oa.chat.completions.with_raw_response.create(model=NOVA, messages=[{"role": "user", "content": "hi"}])
    assert raw.headers["x-switchyard-provider"] == "amazon-bedrock"
    r = raw.parse()
    assert r.choices[0].message.content == CONVERSE_TEXT
    assert r.usage.prompt_tokens == 12 and r.usage.model_extra["cost"] > 0
    chunks = list(oa.chat.completions.create(model=NOVA, messages=[{"role": "user", "content": "hi"}], stream=True))
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == CONVERSE_TEXT
    assert chunks[-1].usage is not None and chunks[-1].usage.model_extra["cost"] > 0
    r = oa.chat.completions.create(model=NOVA, messages=[{"role": "user", "content": "Weather in Paris?"}],
                                   tools=WEATHER_OPENAI)
    call = r.choices[0].message.tool_calls[0]
    assert r.choices[0].finish_reason == "tool_calls"
    assert (call.function.name, json.loads(call.function.arguments)) == ("get_weather", {"city": "Paris"})
    # The result sent back: the model answers in text.
    r = oa.chat.completions.create(model=NOVA, tools=WEATHER_OPENAI, messages=[
        {"role": "user", "content": "Weather in Paris?"}, r.choices[0].message.model_dump(exclude_none=True),
        {"role": "tool", "tool_call_id": call.id, "content": "18C"}])
    assert r.choices[0].message.content == CONVERSE_TEXT


def test_anthropic_sdk_reaches_converse_plain_streamed_and_tool_call(an):
    m = an.messages.create(model=NOVA, max_tokens=32, messages=[{"role": "user", "content": "hi"}])
    assert m.content[0].text == CONVERSE_TEXT
    with an.messages.stream(model=NOVA, max_tokens=32, messages=[{"role": "user", "content": "hi"}]) as s:
        text = "".join(s.text_stream)
        final = s.get_final_message()
    assert text == CONVERSE_TEXT
    assert (final.usage.input_tokens, final.usage.output_tokens) == (12, 3)
    tools = [{"name": "get_weather", "input_schema": WEATHER_OPENAI[0]["function"]["parameters"]}]
    with an.messages.stream(model=NOVA, max_tokens=64, tools=tools,
                            messages=[{"role": "user", "content": "Weather in Paris?"}]) as s:
        final = s.get_final_message()
    assert final.stop_reason == "tool_use"
    use = next(b for b in final.content if b.type == "tool_use")
    assert (use.name, use.input) == ("get_weather", {"city": "Paris"})


def test_google_genai_sdk_reaches_converse_plain_streamed_and_tool_call(demo_port):
    from google.genai import types
    gg = genai_client(demo_port)
    r = gg.models.generate_content(model=NOVA, contents="hi")
    assert r.sdk_http_response.headers["x-switchyard-provider"] == "amazon-bedrock"
    assert r.text == CONVERSE_TEXT
    assert r.usage_metadata.prompt_token_count == 12
    chunks = list(gg.models.generate_content_stream(model=NOVA, contents="hi"))
    assert "".join(c.text or "" for c in chunks) == CONVERSE_TEXT
    assert chunks[-1].usage_metadata.candidates_token_count == 3
    weather = types.Tool(function_declarations=[types.FunctionDeclaration(
        name="get_weather", description="Weather by city",
        parameters={"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]})])
    r = gg.models.generate_content(model=NOVA, contents="Weather in Paris?", config=types.GenerateContentConfig(
        tools=[weather], automatic_function_calling=types.AutomaticFunctionCallingConfig(disable=True)))
    call = r.function_calls[0]
    assert (call.name, call.args) == ("get_weather", {"city": "Paris"})
