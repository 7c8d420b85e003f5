"""The official `openai` Python SDK, pointed at the Envoy listener, works unchanged.

Runs against the demo stack (mock providers + Envoy with the filter, `conftest.py`).
"""
import openai
import pytest


@pytest.fixture(scope="module")
def base_url(demo_port):
    return f"http://127.0.0.1:{demo_port}/v1"


def client(base_url):
    return openai.OpenAI(base_url=base_url, api_key="caller-key-never-forwarded", max_retries=0, timeout=20)


def test_plain_chat_completion_with_provider_in_extra_body(base_url):
    raw = client(base_url).chat.completions.with_raw_response.create(
        model="meta-llama/llama-4-maverick",
        messages=[{"role": "user", "content": "Hello"}],
        extra_body={"provider": {"order": ["fireworks"], "allow_fallbacks": False}},
    )
    completion = raw.parse()
    assert raw.headers["x-switchyard-provider"] == "fireworks"
    assert raw.headers["x-switchyard-model"] == "meta-llama/llama-4-maverick"
    assert completion.choices[0].message.content == "Hello from fireworks"
    # The catalog model id that served, not the provider's internal id (OpenRouter's behaviour).
    assert completion.model == "meta-llama/llama-4-maverick"
    assert completion.model_extra["provider"] == "fireworks"
    assert completion.usage.total_tokens > 0
    # usage.cost from fireworks' catalog prices ($0.22 / $0.88 per million tokens).
    u = completion.usage
    expected = u.prompt_tokens * 0.22 / 1e6 + u.completion_tokens * 0.88 / 1e6
    assert abs(u.model_extra["cost"] - expected) < 1e-12
    # The SDK accepts gzip: the rewritten answer reached it compressed by Envoy.
    assert raw.headers.get("content-encoding") == "gzip"


def test_models_list_and_retrieve(base_url):
    c = client(base_url)
    ids = [m.id for m in c.models.list()]
    assert "meta-llama/llama-4-maverick" in ids and "anthropic/claude-sonnet-4-6" in ids
    m = c.models.retrieve("meta-llama/llama-4-maverick")
    assert m.id == "meta-llama/llama-4-maverick" and m.object == "model"
    assert m.model_extra["pricing"]["prompt"] == "0.00000022"
    with pytest.raises(openai.NotFoundError):
        c.models.retrieve("nope/nope")


def test_streamed_chunks_name_the_catalog_model_and_usage_has_cost(base_url):
    stream = client(base_url).chat.completions.create(
        model="meta-llama/llama-4-maverick",
        messages=[{"role": "user", "content": "Stream please"}],
        stream=True,
        stream_options={"include_usage": True},
        extra_body={"provider": {"order": ["together"], "allow_fallbacks": False}},
    )
    chunks = list(stream)
    assert chunks and all(c.model == "meta-llama/llama-4-maverick" for c in chunks)
    usage = [c.usage for c in chunks if c.usage is not None]
    assert len(usage) == 1
    u = usage[0]
    assert abs(u.model_extra["cost"] - (u.prompt_tokens * 0.27 + u.completion_tokens * 0.85) / 1e6) < 1e-12


def test_a_stream_that_did_not_ask_for_usage_ends_with_it_and_the_sdk_takes_it(base_url):
    # As on OpenRouter: the usage chunk (no choices) ends every stream, asked or not, and the SDK
    # parses it like the one it asked for.
    stream = client(base_url).chat.completions.create(
        model="meta-llama/llama-4-maverick",
        messages=[{"role": "user", "content": "Stream please"}],
        stream=True,
        extra_body={"provider": {"order": ["together"], "allow_fallbacks": False}},
    )
    chunks = list(stream)
    assert chunks[-1].choices == [] and all(c.choices for c in chunks[:-1])
    assert [c.usage is not None for c in chunks].count(True) == 1
    u = chunks[-1].usage
    assert abs(u.model_extra["cost"] - (u.prompt_tokens * 0.27 + u.completion_tokens * 0.85) / 1e6) < 1e-12


def test_streaming_chat_completion(base_url):
    stream = client(base_url).chat.completions.create(
        model="meta-llama/llama-4-maverick",
        messages=[{"role": "user", "content": "Stream please"}],
        stream=True,
        extra_body={"provider": {"sort": "price", "ignore": ["fireworks"]}},
    )
    pieces = [c.choices[0].delta.content for c in stream if c.choices and c.choices[0].delta.content]
    assert "".join(pieces) == "tok0 tok1 tok2 tok3 tok4 "


def test_errors_surface_as_openai_exceptions(base_url):
    with pytest.raises(openai.BadRequestError) as e:
        client(base_url).chat.completions.create(
            model="meta-llama/llama-4-maverick",
            messages=[{"role": "user", "content": "x"}],
            extra_body={"provider": {"sort": "cheapest"}},
        )
    assert e.value.body["param"] == "provider.sort"
    with pytest.raises(openai.NotFoundError) as e:
        client(base_url).chat.completions.create(
            model="meta-llama/llama-4-maverick",
            messages=[{"role": "user", "content": "x"}],
            extra_body={"provider": {"zdr": True, "only": ["together"]}},
        )
    assert e.value.body["code"] == "no_endpoints"
    assert e.value.body["metadata"]["constraint"] == "zdr"


def test_auto_router_picks_the_model_and_names_it(base_url):
    # model="openrouter/auto": small talk goes to the demo's best chat model within the default
    # (medium) tier; the response headers name the chosen model and the strategy.
    raw = client(base_url).chat.completions.with_raw_response.create(
        model="openrouter/auto",
        messages=[{"role": "user", "content": "Hi! How was your weekend?"}],
    )
    completion = raw.parse()
    assert raw.headers["x-switchyard-model"] == "meta-llama/llama-4-maverick"
    assert raw.headers["x-switchyard-strategy"] == "auto:chat"
    assert completion.model == "meta-llama/llama-4-maverick"
    assert completion.choices[0].message.content.startswith("Hello from ")
    # A code prompt with the auto-router plugin (via extra_body, as for OpenRouter): the high
    # tier admits Claude Sonnet, the demo's second-best code model after Opus (xhigh).
    raw = client(base_url).chat.completions.with_raw_response.create(
        model="openrouter/auto",
        messages=[{"role": "user", "content": "Refactor this Python function:\n```python\ndef f(x):\n    return x+1\n```"}],
        extra_body={"plugins": [{"id": "auto-router", "cost_tier": "high", "allowed_models": ["anthropic/*", "qwen/*"]}]},
    )
    assert raw.headers["x-switchyard-model"] == "anthropic/claude-sonnet-4-6"
    assert raw.headers["x-switchyard-provider"] == "anthropic-direct"
    assert raw.headers["x-switchyard-strategy"] == "auto:code"
    completion = raw.parse()
    assert completion.choices[0].message.content == "Hello from anthropic-direct"
    assert completion.model == "anthropic/claude-sonnet-4-6"


def test_auto_router_restrictions_surface_as_openai_exceptions(base_url):
    with pytest.raises(openai.NotFoundError) as e:
        client(base_url).chat.completions.create(
            model="auto",
            messages=[{"role": "user", "content": "Hello"}],
            extra_body={"plugins": [{"id": "auto-router", "allowed_models": ["x-ai/*"]}]},
        )
    assert e.value.body["code"] == "no_endpoints"
    assert e.value.body["metadata"]["constraint"] == "allowed_models"
