"""The official `google-genai` Python SDK, pointed at the Envoy listener, works unchanged: the
model is the catalog id in the path, routing fields go in the `x-switchyard-routing` header
(`http_options.headers`) or the body (`http_options.extra_body`), as the SDK allows; the mock
providers speak Google's Gemini API and answer "Hello from <provider>", so the text as well as
`x-switchyard-provider` name who served. Runs against the demo stack (`conftest.py`)."""
import json

import pytest
from google import genai
from google.genai import errors, types

GEMMA = "google/gemma-3-27b-it"  # deepinfra and together both serve it over the Gemini API


def routing(fields):
    return {"x-switchyard-routing": json.dumps(fields)}


def make_client(demo_port, api_version):
    # The SDK's own retries off (one attempt): failover is the filter's job.
    return genai.Client(
        api_key="caller-key-never-forwarded",
        http_options=types.HttpOptions(
            base_url=f"http://127.0.0.1:{demo_port}",
            api_version=api_version,
            timeout=20_000,
            retry_options=types.HttpRetryOptions(attempts=1),
        ),
    )


@pytest.fixture(scope="module")
def client(demo_port):
    return make_client(demo_port, "v1beta")


def config(headers=None, extra_body=None):
    return types.GenerateContentConfig(http_options=types.HttpOptions(headers=headers, extra_body=extra_body))


@pytest.mark.parametrize("provider", ["deepinfra", "together"])
def test_provider_order_in_the_routing_header_picks_the_provider(client, provider):
    r = client.models.generate_content(
        model=GEMMA,
        contents="Hello",
        config=config(headers=routing({"provider": {"order": [provider], "allow_fallbacks": False}})),
    )
    assert r.sdk_http_response.headers["x-switchyard-provider"] == provider
    assert r.sdk_http_response.headers["x-switchyard-model"] == GEMMA
    assert r.text == f"Hello from {provider}"
    assert r.candidates[0].finish_reason == types.FinishReason.STOP
    u = r.usage_metadata
    assert u.candidates_token_count == 4 and u.total_token_count == u.prompt_token_count + 4


def test_provider_only_in_the_body_excludes_the_others(client):
    for _ in range(4):
        r = client.models.generate_content(
            model=GEMMA, contents="Hello", config=config(extra_body={"provider": {"only": ["deepinfra"]}})
        )
        assert r.sdk_http_response.headers["x-switchyard-provider"] == "deepinfra"
        assert r.text == "Hello from deepinfra"


def test_streamed_chunks_carry_text_and_usage(client):
    chunks = list(
        client.models.generate_content_stream(
            model=GEMMA, contents="Hello", config=config(headers=routing({"provider": {"only": ["together"]}}))
        )
    )
    assert chunks[0].sdk_http_response.headers["x-switchyard-provider"] == "together"
    assert "".join(c.text or "" for c in chunks) == "tok0 tok1 tok2 tok3 tok4 "
    assert chunks[-1].candidates[0].finish_reason == types.FinishReason.STOP
    u = chunks[-1].usage_metadata
    assert u.candidates_token_count == 5 and u.total_token_count == u.prompt_token_count + 5


def test_failover_to_the_next_provider_when_the_first_is_unavailable(client):
    # deepinfra answers 503 UNAVAILABLE (x-mock-behavior); together serves.
    headers = routing({"provider": {"order": ["deepinfra", "together"]}})
    headers["x-mock-behavior"] = "deepinfra=503"
    r = client.models.generate_content(model=GEMMA, contents="Hello", config=config(headers=headers))
    assert r.sdk_http_response.headers["x-switchyard-provider"] == "together"
    assert r.sdk_http_response.headers["x-switchyard-attempts"] == "2"
    assert r.text == "Hello from together"


def test_errors_surface_as_google_exceptions(client):
    # Only one allowed provider, and it is rate limited: Google's error shape.
    headers = routing({"provider": {"only": ["together"]}})
    headers["x-mock-behavior"] = "together=429/1"
    with pytest.raises(errors.ClientError) as e:
        client.models.generate_content(model=GEMMA, contents="Hello", config=config(headers=headers))
    assert e.value.code == 429
    assert e.value.status == "RESOURCE_EXHAUSTED"
    # A model the catalog does not have: 400 INVALID_ARGUMENT naming it (as on the OpenAI paths).
    with pytest.raises(errors.ClientError) as e:
        client.models.generate_content(model="nope/nope", contents="Hello")
    assert e.value.code == 400
    assert e.value.status == "INVALID_ARGUMENT"
    assert "nope/nope" in e.value.message


def test_the_sdks_default_api_version_is_routed_too(demo_port):
    # google-genai 3.x calls /v1/models/{model}:generateContent by default (api_version v1).
    c = make_client(demo_port, None)  # held: the SDK closes a client it collects mid-request
    r = c.models.generate_content(model=GEMMA, contents="Hello")
    assert r.text.startswith("Hello from ")
    assert r.sdk_http_response.headers["x-switchyard-model"] == GEMMA
