"""The demo stack (mock providers + Envoy with the filter) for the SDK tests: one per test module,
started by PID and stopped exactly (SIGTERM, then SIGKILL if it lingers)."""
import os
import signal
import subprocess
import time

import anthropic
import openai
import pytest
from google import genai
from google.genai import types

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEMO = os.path.join(ROOT, "target", "debug", "switchyard-demo")


def _demo(found, extra=()):
    """Starts a fresh demo stack (`extra`: more arguments, `--azure` for the Azure stack) and
    yields `found(line)` of the first line of its output for which it is not None; stops exactly
    that process afterwards."""
    proc = subprocess.Popen([DEMO, "--port", "0", "--admin-port", "0", *extra], stdout=subprocess.PIPE, text=True)
    try:
        deadline = time.time() + 60
        value = None
        while time.time() < deadline and value is None:
            line = proc.stdout.readline()
            if not line:
                break
            value = found(line)
        assert value is not None, "demo stack did not become ready"
        yield value
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _ready_port(line):
    return int(line.split()[1]) if line.startswith("READY ") else None


@pytest.fixture(scope="module")
def demo_port():
    """The Envoy listener port of a fresh demo stack (each module gets its own, so one module's
    faults, cool-downs and statistics never leak into another's)."""
    yield from _demo(_ready_port)


@pytest.fixture(scope="module")
def azure_port():
    """The Envoy listener port of a fresh Azure stack (`switchyard-demo --azure`): GPT served
    only by a mock Azure OpenAI resource that takes only the mock IMDS's Entra tokens."""
    yield from _demo(_ready_port, ["--azure"])


@pytest.fixture(scope="module")
def mock_provider():
    """(name, endpoint URL) of one mock provider of a fresh demo stack."""

    def listed(line):
        words = line.split()
        return (words[2], f"http://{words[3]}") if line.strip().startswith("mock provider ") else None

    yield from _demo(listed)


# The official SDKs pointed at the demo's listener, each with a caller key that is never
# forwarded, no retries, and a bound on every call.
CALLER_KEY = "caller-key-never-forwarded"


def openai_client(port):
    return openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key=CALLER_KEY, max_retries=0, timeout=20)


def anthropic_client(port):
    return anthropic.Anthropic(base_url=f"http://127.0.0.1:{port}", api_key=CALLER_KEY, max_retries=0, timeout=20)


@pytest.fixture(scope="module")
def oa(demo_port):
    return openai_client(demo_port)


@pytest.fixture(scope="module")
def an(demo_port):
    return anthropic_client(demo_port)


def genai_client(port, headers=None):
    """google-genai's client at the demo's listener (`headers`: sent with every call)."""
    return genai.Client(
        api_key=CALLER_KEY,
        http_options=types.HttpOptions(
            base_url=f"http://127.0.0.1:{port}", api_version="v1beta", timeout=20_000, headers=headers,
            retry_options=types.HttpRetryOptions(attempts=1),
        ),
    )


@pytest.fixture(scope="module")
def gg(demo_port):
    return genai_client(demo_port)
