"""The official openai, anthropic and google-genai SDKs, pointed at the Envoy listener, reach Claude
on Amazon Bedrock (the demo's `amazon-bedrock`, kind bedrock): plain and streamed. Envoy signs each
attempt with SigV4 and the mock Bedrock recomputes the signature (a wrong one is AWS's 403), takes
only Bedrock's body (`anthropic_version: bedrock-2023-05-31`, no `model`, no `stream`) and answers
streams as `application/vnd.amazon.eventstream` frames, which the filter decodes into each SDK's
own stream. Runs against the demo stack (`conftest.py`)."""
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
