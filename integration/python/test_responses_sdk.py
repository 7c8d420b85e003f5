"""The Responses API (`/v1/responses`) on every API family with the official openai SDK:
`client.responses.create` and `client.responses.stream` on models served only by Anthropic
Messages (claude-haiku-4-5), only by Google generateContent (gemini-2.5-pro), only by OpenAI chat
completions (mistral-small-3.2 on fireworks, an OpenAI-compatible host that does not serve the
Responses API) and natively (qwen3-coder on deepinfra, which serves it): plain, streamed, a tool
call and its result over two turns, structured output, refusals. The mock providers refuse what
their real API refuses, so a translation mistake fails here. Runs against the demo stack."""
import json

import openai
import pytest

CLAUDE = "anthropic/claude-haiku-4-5"  # anthropic-direct, Messages only: $1 / $5
GEMINI = "google/gemini-2.5-pro"  # google-ai-studio, generateContent only: $1.25 / $10
MISTRAL = "mistralai/mistral-small-3.2"  # fireworks, chat completions only: $0.1 / $0.3
QWEN = "qwen/qwen3-coder"  # deepinfra serves the Responses API natively: $0.4 / $1.6
NATIVE = {"provider": {"only": ["deepinfra"]}}
FAMILIES = [
    (CLAUDE, "anthropic-direct", {}),
    (GEMINI, "google-ai-studio", {}),
    (MISTRAL, "fireworks", {}),
    (QWEN, "deepinfra", NATIVE),
]
PRICES = {"anthropic-direct": (1, 5), "google-ai-studio": (1.25, 10), "fireworks": (0.1, 0.3), "deepinfra": (0.4, 1.6)}
WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "The weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}


@pytest.mark.parametrize("model,provider,extra", FAMILIES)
def test_responses_create_plain(oa, model, provider, extra):
    raw = oa.responses.with_raw_response.create(
        model=model, instructions="Be brief.", input="Hello", max_output_tokens=64, extra_body=extra
    )
    r = raw.parse()
    assert raw.headers["x-switchyard-provider"] == provider
    assert r.object == "response" and r.status == "completed" and r.model == model
    assert r.output_text == f"Hello from {provider}"
    u = r.usage
    assert u.total_tokens == u.input_tokens + u.output_tokens
    prompt, completion = PRICES[provider]
    assert abs(u.model_extra["cost"] - (u.input_tokens * prompt + u.output_tokens * completion) / 1e6) < 1e-12


@pytest.mark.parametrize("model,provider,extra", FAMILIES)
def test_responses_stream(oa, model, provider, extra):
    with oa.responses.stream(model=model, input="Hello", extra_body=extra) as stream:
        events = list(stream)
        final = stream.get_final_response()
    kinds = [e.type for e in events]
    assert kinds[0] == "response.created" and kinds[-1] == "response.completed"
    assert [e.sequence_number for e in events] == list(range(len(events)))
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert text.startswith("tok0 tok1 ")
    assert final.output_text == text and final.status == "completed"
    assert final.usage.output_tokens > 0 and final.usage.input_tokens > 0


@pytest.mark.parametrize("model,provider,extra", FAMILIES)
def test_responses_tool_call_and_result_over_two_turns(oa, model, provider, extra):
    first = oa.responses.create(
        model=model,
        input="Weather in Paris?",
        tools=[WEATHER],
        tool_choice="required",
        extra_headers={"x-mock-behavior": f"{provider}=tool"},
        extra_body=extra,
    )
    call = next(i for i in first.output if i.type == "function_call")
    assert call.name == "get_weather" and json.loads(call.arguments) == {"city": "Paris"}
    second = oa.responses.create(
        model=model,
        tools=[WEATHER],
        input=[
            {"role": "user", "content": "Weather in Paris?"},
            {"type": "function_call", "call_id": call.call_id, "name": call.name, "arguments": call.arguments},
            {"type": "function_call_output", "call_id": call.call_id, "output": "sunny"},
        ],
        extra_body=extra,
    )
    assert second.output_text == f"Hello from {provider}"


@pytest.mark.parametrize("model,provider,extra", FAMILIES)
def test_responses_streamed_tool_call(oa, model, provider, extra):
    with oa.responses.stream(
        model=model,
        input="Weather in Paris?",
        tools=[WEATHER],
        extra_headers={"x-mock-behavior": f"{provider}=tool"},
        extra_body=extra,
    ) as stream:
        final = stream.get_final_response()
    call = next(i for i in final.output if i.type == "function_call")
    assert call.name == "get_weather" and json.loads(call.arguments) == {"city": "Paris"}


@pytest.mark.parametrize("model,provider,extra", FAMILIES)
def test_responses_structured_output(oa, model, provider, extra):
    schema = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
    r = oa.responses.create(
        model=model,
        input="A city",
        text={"format": {"type": "json_schema", "name": "city", "schema": schema, "strict": True}},
        extra_body=extra,
    )
    assert r.output_text == f"Hello from {provider}"


def test_responses_refusals_name_the_field(oa):
    with pytest.raises(openai.BadRequestError) as e:
        oa.responses.create(model=CLAUDE, input="x", previous_response_id="resp_1")
    assert e.value.body["param"] == "previous_response_id"
    with pytest.raises(openai.BadRequestError) as e:
        oa.responses.create(model=GEMINI, input="x", tools=[{"type": "web_search"}])
    assert e.value.body["param"] == "tools[0].type" and "web_search" in e.value.body["message"]
    with pytest.raises(openai.RateLimitError):
        oa.responses.create(model=CLAUDE, input="x", extra_headers={"x-mock-behavior": "anthropic-direct=429/1"})


def test_responses_hosted_tools_run_only_where_served_natively(oa):
    # deepinfra serves the Responses API: the hosted tool reaches it as sent.
    raw = oa.responses.with_raw_response.create(model=QWEN, input="x", tools=[{"type": "web_search"}], extra_body=NATIVE)
    assert raw.headers["x-switchyard-provider"] == "deepinfra"
    assert raw.parse().output_text == "Hello from deepinfra"
    # A chat completions host cannot run it: refused, naming the tool.
    with pytest.raises(openai.BadRequestError) as e:
        oa.responses.create(model=MISTRAL, input="x", tools=[{"type": "web_search"}])
    assert e.value.body["param"] == "tools[0].type"


THOUGHT = "Thinking within a budget of 8000 tokens."  # the mocks name the budget they received


@pytest.mark.parametrize("model,provider", [(CLAUDE, "anthropic-direct"), (GEMINI, "google-ai-studio")])
def test_responses_reasoning_effort_becomes_a_budget_and_comes_back_as_a_summary(oa, model, provider):
    # high: 0.8 of max_output_tokens, the budget the mock received and names in its thinking.
    raw = oa.responses.with_raw_response.create(
        model=model, input="Why?", max_output_tokens=10000, reasoning={"effort": "high", "summary": "auto"}
    )
    r = raw.parse()
    assert raw.headers["x-switchyard-provider"] == provider
    assert [i.type for i in r.output] == ["reasoning", "message"]
    item = r.output[0]
    assert item.id.startswith("rs_") and [s.text for s in item.summary] == [THOUGHT]
    assert r.output_text == f"Hello from {provider}"
    if provider == "google-ai-studio":
        assert r.usage.output_tokens_details.reasoning_tokens == 7


@pytest.mark.parametrize("model,provider", [(CLAUDE, "anthropic-direct"), (GEMINI, "google-ai-studio")])
def test_responses_stream_reasoning_summary_events(oa, model, provider):
    with oa.responses.stream(
        model=model, input="Why?", max_output_tokens=10000, reasoning={"effort": "high", "summary": "auto"}
    ) as stream:
        events = list(stream)
        final = stream.get_final_response()
    kinds = [e.type for e in events]
    assert [e.sequence_number for e in events] == list(range(len(events)))
    added = next(e for e in events if e.type == "response.output_item.added")
    assert added.item.type == "reasoning" and added.output_index == 0
    deltas = [e for e in events if e.type == "response.reasoning_summary_text.delta"]
    assert "".join(e.delta for e in deltas) == THOUGHT
    assert all(e.item_id == added.item.id and e.summary_index == 0 and e.output_index == 0 for e in deltas)
    done = next(e for e in events if e.type == "response.reasoning_summary_text.done")
    assert done.text == THOUGHT
    assert kinds.index("response.reasoning_summary_part.done") < kinds.index("response.output_text.delta")
    assert [i.type for i in final.output] == ["reasoning", "message"]
    assert final.output[0].summary[0].text == THOUGHT
    assert final.output_text.startswith("tok0 tok1 ")
