"""The official openai, anthropic and google-genai SDKs, pointed at the Envoy listener, reach Claude
and Gemini served only by Google Vertex AI (the demo's `google-vertex`, kind vertex): plain,
streamed and with a tool call. The mock's Vertex refuses what Vertex refuses (its token, project
and location, Claude's body without `model` and with `anthropic_version: vertex-2023-10-16`, every
Gemini turn with a role), so a mapping mistake fails here. Runs against the demo stack
(`conftest.py`)."""
import pytest
from google.genai import types

CLAUDE = "anthropic/claude-sonnet-4.5"  # google-vertex only (claude-sonnet-4-5@20250929): $3 / $15
GEMINI = "google/gemini-2.5-flash-lite"  # google-vertex only: $0.1 / $0.4
WEATHER = {
    "name": "get_weather",
    "description": "The weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}
TOOL = {"x-mock-behavior": "google-vertex=tool"}


@pytest.mark.parametrize("model", [CLAUDE, GEMINI])
def test_openai_sdk_plain_streamed_and_tool(oa, model):
    raw = oa.chat.completions.with_raw_response.create(
        model=model, max_tokens=32, messages=[{"role": "user", "content": "hi"}]
    )
    assert raw.headers["x-switchyard-provider"] == "google-vertex"
    r = raw.parse()
    assert r.choices[0].message.content == "Hello from google-vertex"
    assert r.usage.model_extra["cost"] > 0
    chunks = list(oa.chat.completions.create(
        model=model, max_tokens=32, messages=[{"role": "user", "content": "hi"}], stream=True,
        stream_options={"include_usage": True},
    ))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text.startswith("tok0 tok1"), text
    assert chunks[-1].usage is not None and chunks[-1].usage.model_extra["cost"] > 0
    r = oa.chat.completions.create(
        model=model, max_tokens=32, messages=[{"role": "user", "content": "weather in Paris?"}],
        tools=[{"type": "function", "function": WEATHER}], extra_headers=TOOL,
    )
    call = r.choices[0].message.tool_calls[0]
    assert (call.function.name, call.function.arguments) == ("get_weather", '{"city":"Paris"}')


@pytest.mark.parametrize("model", [CLAUDE, GEMINI])
def test_anthropic_sdk_plain_streamed_and_tool(an, model):
    m = an.messages.create(model=model, max_tokens=32, messages=[{"role": "user", "content": "hi"}])
    assert m.content[0].text == "Hello from google-vertex"
    with an.messages.stream(model=model, max_tokens=32, messages=[{"role": "user", "content": "hi"}]) as s:
        text = "".join(s.text_stream)
        final = s.get_final_message()
    assert text.startswith("tok0 tok1"), text
    assert final.usage.output_tokens > 0
    m = an.messages.create(
        model=model, max_tokens=32, messages=[{"role": "user", "content": "weather in Paris?"}],
        tools=[{"name": WEATHER["name"], "description": WEATHER["description"], "input_schema": WEATHER["parameters"]}],
        extra_headers=TOOL,
    )
    use = next(b for b in m.content if b.type == "tool_use")
    assert (use.name, use.input) == ("get_weather", {"city": "Paris"})


@pytest.mark.parametrize("model", [CLAUDE, GEMINI])
def test_google_genai_sdk_plain_streamed_and_tool(gg, model):
    r = gg.models.generate_content(model=model, contents="hi")
    assert r.text == "Hello from google-vertex"
    assert r.sdk_http_response.headers["x-switchyard-provider"] == "google-vertex"
    text = "".join(c.text or "" for c in gg.models.generate_content_stream(model=model, contents="hi"))
    assert text.startswith("tok0 tok1"), text
    r = gg.models.generate_content(
        model=model, contents="weather in Paris?",
        config=types.GenerateContentConfig(
            tools=[types.Tool(function_declarations=[types.FunctionDeclaration(**WEATHER)])],
            automatic_function_calling=types.AutomaticFunctionCallingConfig(disable=True),
            http_options=types.HttpOptions(headers=TOOL),
        ),
    )
    call = r.function_calls[0]
    assert (call.name, call.args) == ("get_weather", {"city": "Paris"})
