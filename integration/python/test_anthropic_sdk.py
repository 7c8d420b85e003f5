"""The official `anthropic` Python SDK, pointed at the Envoy listener, works unchanged: routing
fields go in `extra_body`, as the SDK allows; the mock providers speak Anthropic's Messages API
and answer "Hello from <provider>", so the text as well as `x-switchyard-provider` name who
served. Runs against the demo stack (`conftest.py`)."""
import anthropic
import pytest

CLAUDE = "anthropic/claude-sonnet-4-6"  # served by anthropic-direct over the Messages API
QWEN = "qwen/qwen3-coder"  # deepinfra and together both serve it over the Messages API
HI = [{"role": "user", "content": "Hello"}]


@pytest.fixture(scope="module")
def client(demo_port):
    # The SDK's own retries off: failover is the filter's job, and a retry would hide it.
    return anthropic.Anthropic(
        base_url=f"http://127.0.0.1:{demo_port}", api_key="caller-key-never-forwarded", max_retries=0, timeout=20
    )


def test_plain_message_names_the_catalog_model_and_prices_usage(client):
    raw = client.messages.with_raw_response.create(model=CLAUDE, max_tokens=64, messages=HI)
    message = raw.parse()
    assert raw.headers["x-switchyard-provider"] == "anthropic-direct"
    assert raw.headers["x-switchyard-model"] == CLAUDE
    assert message.type == "message" and message.role == "assistant"
    assert message.content[0].type == "text"
    assert message.content[0].text == "Hello from anthropic-direct"
    # The catalog model id that served, not the provider's internal one.
    assert message.model == CLAUDE
    assert message.stop_reason == "end_turn"
    u = message.usage
    assert u.input_tokens > 0 and u.output_tokens == 4
    # usage.cost from anthropic-direct's catalog prices ($3 / $15 per million tokens).
    assert abs(u.model_extra["cost"] - (u.input_tokens * 3 + u.output_tokens * 15) / 1e6) < 1e-12


@pytest.mark.parametrize("provider", ["deepinfra", "together"])
def test_provider_order_in_extra_body_picks_the_provider(client, provider):
    raw = client.messages.with_raw_response.create(
        model=QWEN,
        max_tokens=64,
        messages=HI,
        extra_body={"provider": {"order": [provider], "allow_fallbacks": False}},
    )
    assert raw.headers["x-switchyard-provider"] == provider
    assert raw.parse().content[0].text == f"Hello from {provider}"


def test_provider_only_in_extra_body_excludes_the_others(client):
    for _ in range(4):
        raw = client.messages.with_raw_response.create(
            model=QWEN, max_tokens=64, messages=HI, extra_body={"provider": {"only": ["together"]}}
        )
        assert raw.headers["x-switchyard-provider"] == "together"


def test_streamed_message_is_the_sdks_event_sequence_with_usage(client):
    with client.messages.stream(
        model=QWEN, max_tokens=64, messages=HI, extra_body={"provider": {"only": ["deepinfra"]}}
    ) as stream:
        assert stream.response.headers["x-switchyard-provider"] == "deepinfra"
        kinds = [event.type for event in stream]
        final = stream.get_final_message()
    assert kinds[0] == "message_start" and kinds[-1] == "message_stop"
    assert "content_block_delta" in kinds and "message_delta" in kinds
    assert final.content[0].text == "tok0 tok1 tok2 tok3 tok4 "
    assert final.model == QWEN
    assert final.stop_reason == "end_turn"
    assert final.usage.output_tokens == 5 and final.usage.input_tokens > 0


def test_failover_to_the_next_provider_when_the_first_is_overloaded(client):
    # deepinfra answers 529 overloaded_error (x-mock-behavior); together serves.
    raw = client.messages.with_raw_response.create(
        model=QWEN,
        max_tokens=64,
        messages=HI,
        extra_body={"provider": {"order": ["deepinfra", "together"]}},
        extra_headers={"x-mock-behavior": "deepinfra=529"},
    )
    assert raw.headers["x-switchyard-provider"] == "together"
    assert raw.headers["x-switchyard-attempts"] == "2"
    assert raw.parse().content[0].text == "Hello from together"


def test_errors_surface_as_anthropic_exceptions(client):
    # Only one allowed provider, and it is rate limited: Anthropic's error shape and Retry-After.
    with pytest.raises(anthropic.RateLimitError) as e:
        client.messages.create(
            model=CLAUDE,
            max_tokens=64,
            messages=HI,
            extra_headers={"x-mock-behavior": "anthropic-direct=429/1"},
        )
    assert e.value.status_code == 429
    assert e.value.body["type"] == "error"
    assert e.value.body["error"]["type"] == "rate_limit_error"
    assert e.value.response.headers["retry-after"] == "1"
    # A routing field the filter refuses: 400 invalid_request_error.
    with pytest.raises(anthropic.BadRequestError) as e:
        client.messages.create(
            model=QWEN, max_tokens=64, messages=HI, extra_body={"provider": {"sort": "cheapest"}}
        )
    assert e.value.body["error"]["type"] == "invalid_request_error"


def test_models_list_and_retrieve_in_anthropics_shape(client):
    # The SDK sends anthropic-version: the listing comes in Anthropic's shape, every page of it.
    ids = [m.id for m in client.models.list()]
    assert CLAUDE in ids and QWEN in ids
    m = client.models.retrieve(CLAUDE)
    assert (m.type, m.id, m.display_name) == ("model", CLAUDE, CLAUDE)
    with pytest.raises(anthropic.NotFoundError) as e:
        client.models.retrieve("no/such-model")
    assert e.value.body["error"]["type"] == "not_found_error"


def test_count_tokens_is_the_filters_estimate(client):
    # No endpoint is asked: the bytes of `messages` (400 of text and the JSON around it) / 4.
    raw = client.messages.with_raw_response.count_tokens(model=CLAUDE, messages=[{"role": "user", "content": "x" * 400}])
    assert raw.headers["x-switchyard-estimate"] == "true"
    assert 100 < raw.parse().input_tokens < 115
