"""The demo stack (mock providers + Envoy with the filter) for the SDK tests: one per test module,
started by PID and stopped exactly (SIGTERM, then SIGKILL if it lingers)."""
import os
import signal
import subprocess
import time

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEMO = os.path.join(ROOT, "target", "debug", "switchyard-demo")


@pytest.fixture(scope="module")
def demo_port():
    """The Envoy listener port of a fresh demo stack (each module gets its own, so one module's
    faults, cool-downs and statistics never leak into another's)."""
    proc = subprocess.Popen([DEMO, "--port", "0", "--admin-port", "0"], stdout=subprocess.PIPE, text=True)
    try:
        deadline = time.time() + 60
        port = None
        while time.time() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            if line.startswith("READY "):
                port = int(line.split()[1])
                break
        assert port, "demo stack did not become ready"
        yield port
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
