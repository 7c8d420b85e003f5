"""The mock's Bedrock speaks what AWS speaks: boto3's own bedrock-runtime client, pointed at a mock
provider of the demo stack (every mock answers Bedrock's paths, `integration/src/mock/bedrock.rs`)
with the mock's test credentials, invokes and streams, and converses (Converse and ConverseStream,
`integration/src/mock/converse.rs`, with a tool call); a wrong secret or an unknown key is refused
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


def test_invoke_model_answers_a_tool_call_when_tools_are_offered(mock_provider):
    _, url = mock_provider
    tools = [{"name": "get_weather", "input_schema": {"type": "object", "properties": {"city": {"type": "string"}},
                                                      "required": ["city"]}}]
    body = json.dumps({"anthropic_version": "bedrock-2023-05-31", "max_tokens": 32, "tools": tools,
                       "messages": [{"role": "user", "content": "Weather in Paris?"}]})
    answer = json.loads(client(url).invoke_model(modelId=MODEL, body=body)["body"].read())
    assert answer["stop_reason"] == "tool_use"
    assert answer["content"][0] == {"type": "tool_use", "id": "toolu_bdrk_01mock", "name": "get_weather",
                                    "input": {"city": "Paris"}}
    r = client(url).invoke_model_with_response_stream(modelId=MODEL, body=body)
    events = [json.loads(e["chunk"]["bytes"]) for e in r["body"]]
    assert events[1]["content_block"]["type"] == "tool_use"
    assert json.loads(events[2]["delta"]["partial_json"]) == {"city": "Paris"}
    assert events[4]["delta"]["stop_reason"] == "tool_use"


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


# Converse and ConverseStream: Bedrock's API for every other model (integration/src/mock/converse.rs).
NOVA = "us.amazon.nova-pro-v1:0"
WEATHER = {"tools": [{"toolSpec": {"name": "get_weather", "description": "Weather by city", "inputSchema": {
    "json": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}}],
    "toolChoice": {"auto": {}}}


def test_converse(mock_provider):
    _, url = mock_provider
    r = client(url).converse(modelId=NOVA, messages=[{"role": "user", "content": [{"text": "hi"}]}],
                             system=[{"text": "Be brief."}],
                             inferenceConfig={"maxTokens": 32, "temperature": 0.5, "topP": 0.9, "stopSequences": ["END"]})
    assert r["output"]["message"]["content"] == [{"text": "Hello from Converse"}]
    assert r["stopReason"] == "end_turn"
    assert r["usage"] == {"inputTokens": 12, "outputTokens": 3, "totalTokens": 15}


def test_converse_with_a_tool_and_its_result(mock_provider):
    _, url = mock_provider
    c = client(url)
    question = {"role": "user", "content": [{"text": "Weather in Paris?"}]}
    r = c.converse(modelId=NOVA, messages=[question], toolConfig=WEATHER)
    assert r["stopReason"] == "tool_use"
    use = r["output"]["message"]["content"][0]["toolUse"]
    assert (use["name"], use["input"]) == ("get_weather", {"city": "Paris"})
    result = {"role": "user", "content": [{"toolResult": {"toolUseId": use["toolUseId"], "content": [{"text": "18C"}]}}]}
    r = c.converse(modelId=NOVA, messages=[question, r["output"]["message"], result], toolConfig=WEATHER)
    assert r["output"]["message"]["content"] == [{"text": "Hello from Converse"}]


def test_converse_stream(mock_provider):
    _, url = mock_provider
    r = client(url).converse_stream(modelId=NOVA, messages=[{"role": "user", "content": [{"text": "hi"}]}])
    events = list(r["stream"])
    assert [next(iter(e)) for e in events] == ["messageStart", "contentBlockDelta", "contentBlockDelta",
                                               "contentBlockDelta", "contentBlockStop", "messageStop", "metadata"]
    assert "".join(e["contentBlockDelta"]["delta"]["text"] for e in events if "contentBlockDelta" in e) == "Hello from Converse"
    assert events[-1]["metadata"]["usage"]["inputTokens"] == 12
    # A tool call, streamed: its start, then its input in pieces.
    r = client(url).converse_stream(modelId=NOVA, messages=[{"role": "user", "content": [{"text": "Weather?"}]}],
                                    toolConfig=WEATHER)
    events = list(r["stream"])
    start = next(e["contentBlockStart"]["start"]["toolUse"] for e in events if "contentBlockStart" in e)
    assert start["name"] == "get_weather"
    args = "".join(e["contentBlockDelta"]["delta"]["toolUse"]["input"] for e in events if "contentBlockDelta" in e)
    assert json.loads(args) == {"city": "Paris"}
    assert next(e for e in events if "messageStop" in e)["messageStop"]["stopReason"] == "tool_use"


def test_converse_refuses_what_aws_refuses(mock_provider):
    name, url = mock_provider
    c = client(url)
    # Tool blocks without a toolConfig, and a conversation that does not alternate: AWS's 400.
    use = {"role": "assistant", "content": [{"toolUse": {"toolUseId": "t", "name": "f", "input": {}}}]}
    for messages in ([{"role": "user", "content": [{"text": "a"}]}, use],
                     [{"role": "user", "content": [{"text": "a"}]}, {"role": "user", "content": [{"text": "b"}]}]):
        with pytest.raises(ClientError) as e:
            c.converse(modelId=NOVA, messages=messages)
        assert e.value.response["Error"]["Code"] == "ValidationException"
        assert e.value.response["ResponseMetadata"]["HTTPStatusCode"] == 400
    with pytest.raises(ClientError) as e:
        client(url, behavior=f"{name}=429").converse(modelId=NOVA, messages=[{"role": "user", "content": [{"text": "a"}]}])
    assert e.value.response["Error"]["Code"] == "ThrottlingException"
    r = client(url, behavior=f"{name}=sserror1").converse_stream(
        modelId=NOVA, messages=[{"role": "user", "content": [{"text": "a"}]}])
    with pytest.raises(EventStreamError) as e:
        for _ in r["stream"]:
            pass
    assert e.value.response["Error"]["Code"] == "throttlingException"
