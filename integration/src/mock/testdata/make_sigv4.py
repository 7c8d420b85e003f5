"""SigV4-signed Bedrock requests for integration/src/mock/bedrock.rs's tests, signed by botocore.

Each case is an InvokeModel / InvokeModelWithResponseStream request as boto3's bedrock-runtime
client sends it (the model id's `:` percent-encoded in the path), signed with botocore's SigV4Auth
for the mock's test credentials at a fixed time. The Rust mock must accept every one and refuse
each with one thing changed. Regenerate with

    /tmp/botovenv/bin/python integration/src/mock/testdata/make_sigv4.py \
        > integration/src/mock/testdata/sigv4.json
"""
import datetime
import json
import sys
from unittest import mock

import botocore
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

ACCESS_KEY = "AKIDMOCKBEDROCK00001"
SECRET_KEY = "mock/bedrock/secret/key/0123456789abcdefgh"
TOKEN = "mock-session-token"
WHEN = datetime.datetime(2026, 12, 6, 23, 15, 0)

cases = []
for name, path, creds, region in [
    ("invoke", "/model/us.anthropic.claude-sonnet-4-20250514-v1%3A0/invoke",
     Credentials(ACCESS_KEY, SECRET_KEY), "us-east-1"),
    ("stream_with_token", "/model/anthropic.claude-3-5-haiku-20241022-v1%3A0/invoke-with-response-stream",
     Credentials(ACCESS_KEY, SECRET_KEY, TOKEN), "us-east-1"),
]:
    body = json.dumps({"anthropic_version": "bedrock-2023-05-31", "max_tokens": 16,
                       "messages": [{"role": "user", "content": "hi"}]}, separators=(",", ":"))
    host = f"bedrock-runtime.{region}.amazonaws.com"
    req = AWSRequest(method="POST", url=f"https://{host}{path}", data=body,
                     headers={"Content-Type": "application/json", "Accept": "application/json"})
    with mock.patch("botocore.auth.datetime") as dt:
        dt.datetime.utcnow.return_value = WHEN
        dt.datetime.now.return_value = WHEN
        dt.timezone = datetime.timezone
        SigV4Auth(creds, "bedrock", region).add_auth(req)
    headers = {k.lower(): v for k, v in req.headers.items()}
    headers["host"] = host
    cases.append({"name": name, "method": "POST", "path": path, "headers": headers, "body": body,
                  "now": WHEN.strftime("%Y%m%dT%H%M%SZ")})

json.dump({"generated_by": "integration/src/mock/testdata/make_sigv4.py, botocore " + botocore.__version__,
           "access_key": ACCESS_KEY, "secret_key": SECRET_KEY, "region": "us-east-1", "cases": cases},
          sys.stdout, indent=1)
sys.stdout.write("\n")
