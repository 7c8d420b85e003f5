"""The mock's Bedrock speaks what AWS speaks: boto3's own bedrock-runtime client, pointed at a mock
provider of the demo stack (every mock answers Bedrock's paths, `integration/src/mock/bedrock.rs`)
with the mock's test credentials, invokes and streams; a wrong secret or an unknown key is refused
with AWS's exceptions, and the mock's throttling and in-stream exceptions reach boto3 as AWS's."""
import json

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError, EventStreamError


# integration/src/mock/bedrock.rs: ACCESS_KEY, SECRET_KEY.
ACCESS_KEY = "AKIDMOCKBEDROCK00001"
SECRET_KEY = "mock/bedrock/secret/key/0123456789abcdefgh"
MODEL = "us.anthropic.claude-sonnet-4-20250514-v1:0"
BODY = json.dumps({"anthropic_version": "bedrock-2023-05-31", "max_tokens": 32,
                   "messages": [{"role": "user", "content": "hi"}]})


def client(endpoint, key=ACCESS_KEY, secret=SECRET_KEY, behavior=None):
    c = boto3.client("bedrock-runtime", region_name="us-east-1", endpoint_url=endpoint,
                     aws_access_key_id=key, aws_secret_access_key=secret,
                     config=Config(retries={"max_attempts": 1, "mode": "standard"}))
    if behavior:
        def add(request, **_):
            request.headers["x-mock-behavior"] = behavior
        c.meta.events.register("before-sign.bedrock-runtime", add)
    return c


def test_invoke_model(mock_provider):
    _, url = mock_provider
    r = client(url).invoke_model(modelId=MODEL, body=BODY, contentType="application/json")
    answer = json.loads(r["body"].read())
    assert answer["content"][0]["text"] == "Hello from Bedrock"
    assert answer["usage"]["input_tokens"] == 12


def test_invoke_model_with_response_stream(mock_provider):
    _, url = mock_provider
    r = client(url).invoke_model_with_response_stream(modelId=MODEL, body=BODY, contentType="application/json")
    events = [json.loads(e["chunk"]["bytes"]) for e in r["body"]]
    assert [e["type"] for e in events] == ["message_start", "content_block_start", "content_block_delta",
                                           "content_block_stop", "message_delta", "message_stop"]
    assert events[2]["delta"]["text"] == "Hello from Bedrock"


@pytest.mark.parametrize("key,secret,code", [
    (ACCESS_KEY, "not-the-secret", "InvalidSignatureException"),
    ("AKIDSOMEONEELSE00000", SECRET_KEY, "UnrecognizedClientException"),
])
def test_bad_credentials_are_refused_as_aws_does(mock_provider, key, secret, code):
    _, url = mock_provider
    with pytest.raises(ClientError) as e:
        client(url, key, secret).invoke_model(modelId=MODEL, body=BODY)
    assert e.value.response["Error"]["Code"] == code
    assert e.value.response["ResponseMetadata"]["HTTPStatusCode"] == 403


def test_throttling_and_validation_are_awss_exceptions(mock_provider):
    name, url = mock_provider
    with pytest.raises(ClientError) as e:
        client(url, behavior=f"{name}=429").invoke_model(modelId=MODEL, body=BODY)
    assert e.value.response["Error"]["Code"] == "ThrottlingException"
    with pytest.raises(ClientError) as e:
        client(url).invoke_model(modelId=MODEL, body=json.dumps({"model": "x", "max_tokens": 1}))
    assert e.value.response["Error"]["Code"] == "ValidationException"


def test_an_exception_inside_the_stream(mock_provider):
    name, url = mock_provider
    r = client(url, behavior=f"{name}=sserror1").invoke_model_with_response_stream(modelId=MODEL, body=BODY)
    with pytest.raises(EventStreamError) as e:
        for _ in r["body"]:
            pass
    assert e.value.response["Error"]["Code"] == "throttlingException"
