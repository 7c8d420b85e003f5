"""The mock's Vertex AI speaks what Vertex speaks: google-genai with `vertexai=True` and anthropic's
`AnthropicVertex`, pointed straight at a mock provider of the demo stack (every mock answers
Vertex's paths, `integration/src/mock/vertex.rs`) with the mock's access token, generate and
stream; a token the mock does not accept is refused as Vertex refuses it (401 UNAUTHENTICATED),
and its quota error reaches the SDKs as Vertex's 429 RESOURCE_EXHAUSTED."""

import anthropic
import pytest
from anthropic import AnthropicVertex
from google import genai
from google.genai import errors, types
from google.oauth2.credentials import Credentials


# integration/src/mock/vertex.rs: TOKEN, PROJECT.
TOKEN = "ya29.mock-vertex-access-token-0001"
PROJECT = "switchyard-llm"
LOCATION = "us-east5"


def gemini(endpoint, token=TOKEN, headers=None):
    return genai.Client(
        vertexai=True, project=PROJECT, location=LOCATION, credentials=Credentials(token=token),
        http_options=types.HttpOptions(base_url=endpoint, api_version="v1", headers=headers, timeout=20_000,
                                       retry_options=types.HttpRetryOptions(attempts=1)),
    )


def claude(endpoint, token=TOKEN, headers=None):
    return AnthropicVertex(region=LOCATION, project_id=PROJECT, access_token=token, base_url=f"{endpoint}/v1",
                           max_retries=0, timeout=20, default_headers=headers)


def test_google_genai_on_vertex_generates_and_streams(mock_provider):
    name, endpoint = mock_provider
    c = gemini(endpoint)
    r = c.models.generate_content(model="gemini-2.5-flash", contents="hi")
    assert r.text == f"Hello from {name}"
    assert r.usage_metadata.candidates_token_count == 4
    text = "".join(ch.text or "" for ch in c.models.generate_content_stream(model="gemini-2.5-flash", contents="hi"))
    assert text.startswith("tok0 tok1"), text


def test_anthropic_vertex_creates_and_streams(mock_provider):
    name, endpoint = mock_provider
    c = claude(endpoint)
    m = c.messages.create(model="claude-sonnet-4-5@20250929", max_tokens=32, messages=[{"role": "user", "content": "hi"}])
    assert m.content[0].text == f"Hello from {name}"
    with c.messages.stream(model="claude-sonnet-4-5@20250929", max_tokens=32,
                           messages=[{"role": "user", "content": "hi"}]) as s:
        text = "".join(s.text_stream)
    assert text.startswith("tok0 tok1"), text


def test_a_token_vertex_does_not_accept_is_refused_as_vertex_does(mock_provider):
    _, endpoint = mock_provider
    c = gemini(endpoint, token="ya29.expired")  # kept: a client left unreferenced is closed
    with pytest.raises(errors.ClientError) as e:
        c.models.generate_content(model="gemini-2.5-flash", contents="hi")
    assert (e.value.code, e.value.status) == (401, "UNAUTHENTICATED")
    with pytest.raises(anthropic.AuthenticationError) as e:
        claude(endpoint, token="ya29.expired").messages.create(
            model="claude-sonnet-4-5@20250929", max_tokens=32, messages=[{"role": "user", "content": "hi"}])
    assert e.value.status_code == 401


def test_vertex_quota_errors_reach_the_sdks_as_vertexs(mock_provider):
    name, endpoint = mock_provider
    behavior = {"x-mock-behavior": f"{name}=429"}
    c = gemini(endpoint, headers=behavior)
    with pytest.raises(errors.ClientError) as e:
        c.models.generate_content(model="gemini-2.5-flash", contents="hi")
    assert (e.value.code, e.value.status) == (429, "RESOURCE_EXHAUSTED")
    with pytest.raises(anthropic.RateLimitError) as e:
        claude(endpoint, headers=behavior).messages.create(
            model="claude-sonnet-4-5@20250929", max_tokens=32, messages=[{"role": "user", "content": "hi"}])
    assert e.value.body["error"]["status"] == "RESOURCE_EXHAUSTED"
