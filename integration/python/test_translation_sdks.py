"""Every caller reaches every model (docs/translation.md): the official openai, anthropic and
google-genai SDKs calling demo models served only by another API: claude-haiku-4-5 (Anthropic
Messages only), gemini-2.5-pro (Google generateContent only), mistral-small-3.2 (OpenAI chat
completions only). Plain answers, streams, a tool call and its result over two turns, a system
prompt, structured output, an error, and usage.cost at the serving endpoint's prices. The mock
providers refuse what their real API refuses, so a translation mistake fails here. Runs against
the demo stack (`conftest.py`)."""
import json

import anthropic
import openai
import pytest
from google.genai import errors, types

CLAUDE = "anthropic/claude-haiku-4-5"  # anthropic-direct, Messages API only: $1 / $5, cached $0.1
GEMINI = "google/gemini-2.5-pro"  # google-ai-studio, generateContent only: $1.25 / $10
MISTRAL = "mistralai/mistral-small-3.2"  # fireworks, OpenAI chat completions only: $0.1 / $0.3
WEATHER = {
    "name": "get_weather",
    "description": "The weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}


def close(a, b):
    return abs(a - b) < 1e-12


# ---------------------------------------------------------------------------------------------
# openai SDK -> Anthropic-only and Google-only models
# ---------------------------------------------------------------------------------------------


def test_openai_sdk_plain_answer_with_system_prompt_from_anthropic(oa):
    raw = oa.chat.completions.with_raw_response.create(
        model=CLAUDE,
        max_tokens=64,
        temperature=0.2,
        messages=[{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hello"}],
        extra_headers={"x-mock-behavior": "anthropic-direct=cached5"},
    )
    c = raw.parse()
    assert raw.headers["x-switchyard-provider"] == "anthropic-direct"
    assert c.object == "chat.completion" and c.model == CLAUDE
    assert c.choices[0].message.content == "Hello from anthropic-direct"
    assert c.choices[0].finish_reason == "stop"
    u = c.usage
    assert u.prompt_tokens_details.cached_tokens == 5
    expected = ((u.prompt_tokens - 5) * 1 + 5 * 0.1 + u.completion_tokens * 5) / 1e6
    assert close(u.model_extra["cost"], expected)


def test_openai_sdk_stream_from_google(oa):
    stream = oa.chat.completions.create(
        model=GEMINI,
        messages=[{"role": "user", "content": "Hello"}],
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    text = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
    assert text.startswith("tok0 tok1 ")
    assert [ch.choices[0].finish_reason for ch in chunks if ch.choices and ch.choices[0].finish_reason] == ["stop"]
    u = chunks[-1].usage
    assert close(u.model_extra["cost"], (u.prompt_tokens * 1.25 + u.completion_tokens * 10) / 1e6)
    assert all(ch.model == GEMINI for ch in chunks)


def test_openai_sdk_tool_call_and_result_over_two_turns_from_anthropic(oa):
    tools = [{"type": "function", "function": WEATHER}]
    first = oa.chat.completions.create(
        model=CLAUDE,
        messages=[{"role": "user", "content": "Weather in Paris?"}],
        tools=tools,
        tool_choice="required",
        extra_headers={"x-mock-behavior": "anthropic-direct=tool"},
    )
    call = first.choices[0].message.tool_calls[0]
    assert first.choices[0].finish_reason == "tool_calls"
    assert call.function.name == "get_weather" and json.loads(call.function.arguments) == {"city": "Paris"}
    second = oa.chat.completions.create(
        model=CLAUDE,
        messages=[
            {"role": "user", "content": "Weather in Paris?"},
            first.choices[0].message.model_dump(exclude_none=True),
            {"role": "tool", "tool_call_id": call.id, "content": "sunny"},
        ],
        tools=tools,
    )
    assert second.choices[0].message.content == "Hello from anthropic-direct"


def test_openai_sdk_structured_output_and_errors_from_anthropic(oa):
    schema = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
    c = oa.chat.completions.create(
        model=CLAUDE,
        messages=[{"role": "user", "content": "A city"}],
        response_format={"type": "json_schema", "json_schema": {"name": "city", "schema": schema}},
    )
    assert c.choices[0].message.content == "Hello from anthropic-direct"
    # json_object has no Anthropic counterpart: refused, naming the field.
    with pytest.raises(openai.BadRequestError) as e:
        oa.chat.completions.create(
            model=CLAUDE, messages=[{"role": "user", "content": "x"}], response_format={"type": "json_object"}
        )
    assert e.value.body["param"] == "response_format"
    # The provider's error, in OpenAI's shape.
    with pytest.raises(openai.RateLimitError):
        oa.chat.completions.create(
            model=CLAUDE,
            messages=[{"role": "user", "content": "x"}],
            extra_headers={"x-mock-behavior": "anthropic-direct=429/1"},
        )


# ---------------------------------------------------------------------------------------------
# anthropic SDK -> Google-only and OpenAI-only models
# ---------------------------------------------------------------------------------------------


def test_anthropic_sdk_plain_answer_with_system_prompt_from_google(an):
    raw = an.messages.with_raw_response.create(
        model=GEMINI, max_tokens=64, system="Be brief.", messages=[{"role": "user", "content": "Hello"}]
    )
    m = raw.parse()
    assert raw.headers["x-switchyard-provider"] == "google-ai-studio"
    assert m.type == "message" and m.model == GEMINI and m.stop_reason == "end_turn"
    assert m.content[0].text == "Hello from google-ai-studio"
    u = m.usage
    assert close(u.model_extra["cost"], (u.input_tokens * 1.25 + u.output_tokens * 10) / 1e6)


def test_anthropic_sdk_stream_from_openai(an):
    with an.messages.stream(model=MISTRAL, max_tokens=64, messages=[{"role": "user", "content": "Hello"}]) as s:
        text = "".join(s.text_stream)
        final = s.get_final_message()
    assert text.startswith("tok0 tok1 ")
    assert final.stop_reason == "end_turn" and final.model == MISTRAL
    assert final.usage.output_tokens > 0 and final.usage.input_tokens > 0


def test_anthropic_sdk_tool_use_and_result_over_two_turns_from_openai(an):
    tools = [{"name": WEATHER["name"], "description": WEATHER["description"], "input_schema": WEATHER["parameters"]}]
    first = an.messages.create(
        model=MISTRAL,
        max_tokens=64,
        messages=[{"role": "user", "content": "Weather in Paris?"}],
        tools=tools,
        tool_choice={"type": "any"},
        extra_headers={"x-mock-behavior": "fireworks=tool"},
    )
    use = next(b for b in first.content if b.type == "tool_use")
    assert first.stop_reason == "tool_use" and use.name == "get_weather" and use.input == {"city": "Paris"}
    second = an.messages.create(
        model=MISTRAL,
        max_tokens=64,
        tools=tools,
        messages=[
            {"role": "user", "content": "Weather in Paris?"},
            {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in first.content]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id, "content": "sunny"}]},
        ],
    )
    assert second.content[0].text == "Hello from fireworks"


def test_anthropic_sdk_errors_from_google(an):
    with pytest.raises(anthropic.RateLimitError) as e:
        an.messages.create(
            model=GEMINI,
            max_tokens=8,
            messages=[{"role": "user", "content": "x"}],
            extra_headers={"x-mock-behavior": "google-ai-studio=429/1"},
        )
    assert e.value.body["type"] == "error"
    with pytest.raises(anthropic.BadRequestError) as e:
        an.messages.create(
            model=GEMINI, max_tokens=8, messages=[{"role": "user", "content": "x"}], extra_body={"mcp_servers": []}
        )
    assert e.value.body["error"]["param"] == "mcp_servers"


# ---------------------------------------------------------------------------------------------
# google-genai SDK -> Anthropic-only and OpenAI-only models
# ---------------------------------------------------------------------------------------------


def test_genai_plain_answer_with_system_instruction_from_anthropic(gg):
    r = gg.models.generate_content(
        model=CLAUDE,
        contents="Hello",
        config=types.GenerateContentConfig(system_instruction="Be brief.", max_output_tokens=64),
    )
    assert r.sdk_http_response.headers["x-switchyard-provider"] == "anthropic-direct"
    assert r.text == "Hello from anthropic-direct"
    assert r.candidates[0].finish_reason == types.FinishReason.STOP
    assert r.model_version == CLAUDE
    assert r.usage_metadata.prompt_token_count > 0


def test_genai_stream_from_openai(gg):
    chunks = list(gg.models.generate_content_stream(model=MISTRAL, contents="Hello"))
    assert "".join(c.text or "" for c in chunks).startswith("tok0 tok1 ")
    assert chunks[-1].candidates[0].finish_reason == types.FinishReason.STOP
    u = chunks[-1].usage_metadata
    assert u.candidates_token_count > 0 and u.total_token_count == u.prompt_token_count + u.candidates_token_count


def test_genai_function_call_and_response_over_two_turns_from_anthropic(gg):
    tool = types.Tool(function_declarations=[types.FunctionDeclaration(**WEATHER)])
    cfg = types.GenerateContentConfig(
        tools=[tool],
        automatic_function_calling=types.AutomaticFunctionCallingConfig(disable=True),
        http_options=types.HttpOptions(headers={"x-mock-behavior": "anthropic-direct=tool"}),
    )
    first = gg.models.generate_content(model=CLAUDE, contents="Weather in Paris?", config=cfg)
    call = first.function_calls[0]
    assert call.name == "get_weather" and call.args == {"city": "Paris"}
    history = [
        types.Content(role="user", parts=[types.Part(text="Weather in Paris?")]),
        first.candidates[0].content,
        types.Content(
            role="user",
            parts=[types.Part.from_function_response(name="get_weather", response={"result": "sunny"})],
        ),
    ]
    second = gg.models.generate_content(
        model=CLAUDE,
        contents=history,
        config=types.GenerateContentConfig(
            tools=[tool], automatic_function_calling=types.AutomaticFunctionCallingConfig(disable=True)
        ),
    )
    assert second.text == "Hello from anthropic-direct"


def test_genai_structured_output_and_errors_from_openai(gg):
    r = gg.models.generate_content(
        model=MISTRAL,
        contents="A city",
        config=types.GenerateContentConfig(
            response_mime_type="application/json",
            response_schema={"type": "OBJECT", "properties": {"city": {"type": "STRING"}}},
        ),
    )
    assert r.text == "Hello from fireworks"
    with pytest.raises(errors.ClientError) as e:
        gg.models.generate_content(
            model=MISTRAL,
            contents="x",
            config=types.GenerateContentConfig(http_options=types.HttpOptions(headers={"x-mock-behavior": "fireworks=429/1"})),
        )
    assert e.value.code == 429 and e.value.status == "RESOURCE_EXHAUSTED"


# ---------------------------------------------------------------------------------------------
# Reasoning: an effort as a budget, the thinking back in the caller's shape
# ---------------------------------------------------------------------------------------------

THOUGHT = "Thinking within a budget of 8000 tokens."  # the mocks name the budget they received


def test_openai_sdk_reasoning_effort_on_claude_comes_back_as_message_reasoning(oa):
    r = oa.chat.completions.create(
        model=CLAUDE, messages=[{"role": "user", "content": "Why?"}], max_tokens=10000, reasoning_effort="high"
    )
    assert r.choices[0].message.model_extra["reasoning"] == THOUGHT
    assert r.choices[0].message.content == "Hello from anthropic-direct"
    stream = oa.chat.completions.create(
        model=GEMINI, messages=[{"role": "user", "content": "Why?"}], max_tokens=10000, reasoning_effort="high", stream=True
    )
    chunks = [c for c in stream if c.choices]
    assert "".join((c.choices[0].delta.model_extra or {}).get("reasoning") or "" for c in chunks) == THOUGHT
    assert "".join(c.choices[0].delta.content or "" for c in chunks).startswith("tok0 ")


def test_genai_thinking_from_claude_comes_back_as_thought_parts(gg):
    r = gg.models.generate_content(
        model=CLAUDE,
        contents="Why?",
        config=types.GenerateContentConfig(
            max_output_tokens=10000, thinking_config=types.ThinkingConfig(thinking_budget=8000, include_thoughts=True)
        ),
    )
    parts = r.candidates[0].content.parts
    assert [(p.thought, p.text) for p in parts] == [(True, THOUGHT), (None, "Hello from anthropic-direct")]
    assert r.text == "Hello from anthropic-direct"


def test_anthropic_sdk_gets_no_thinking_block_from_gemini(an):
    # Gemini thinks (the budget reaches it), but an unsigned thinking block would be refused when
    # Claude Code sends it back to a Claude endpoint: only the text comes back.
    r = an.messages.create(
        model=GEMINI,
        max_tokens=10000,
        messages=[{"role": "user", "content": "Why?"}],
        thinking={"type": "enabled", "budget_tokens": 8000},
    )
    assert [b.type for b in r.content] == ["text"]
    assert r.content[0].text == "Hello from google-ai-studio"
