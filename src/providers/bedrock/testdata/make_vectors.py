"""Event stream test vectors for src/providers/bedrock/eventstream_tests.rs.

Frames are built here with struct and zlib.crc32 (independently of the Rust encoder), and every
one is checked against botocore's reference decoder (botocore.eventstream.EventStreamBuffer):
good frames must decode to the headers and payload recorded, bad ones must raise the botocore
error recorded. Regenerate with

    python3 -m venv /tmp/botovenv && /tmp/botovenv/bin/pip install botocore==1.38.0
    /tmp/botovenv/bin/python src/providers/bedrock/testdata/make_vectors.py \
        > src/providers/bedrock/testdata/vectors.json
"""
import base64
import json
import struct
import sys
import zlib

import botocore
from botocore import eventstream as es

# (type code, python value) per header value kind; encoders mirror the AWS spec.
def enc_header(name, kind, value):
    n = name.encode()
    out = struct.pack(">B", len(n)) + n + struct.pack(">B", kind)
    if kind in (0, 1):
        return out
    if kind == 2:
        return out + struct.pack(">b", value)
    if kind == 3:
        return out + struct.pack(">h", value)
    if kind == 4:
        return out + struct.pack(">i", value)
    if kind in (5, 8):
        return out + struct.pack(">q", value)
    if kind == 6:
        return out + struct.pack(">H", len(value)) + value
    if kind == 7:
        b = value.encode()
        return out + struct.pack(">H", len(b)) + b
    if kind == 9:
        assert len(value) == 16
        return out + value
    raise ValueError(kind)


def frame(headers, payload):
    h = b"".join(enc_header(*x) for x in headers)
    total = 16 + len(h) + len(payload)
    prelude = struct.pack(">II", total, len(h))
    prelude += struct.pack(">I", zlib.crc32(prelude))
    body = prelude + h + payload
    return body + struct.pack(">I", zlib.crc32(body))


def json_value(kind, value):
    """A header value as the vectors file records it (bytes as hex)."""
    if kind in (6, 9):
        return value.hex()
    if kind == 0:
        return True
    if kind == 1:
        return False
    return value


def botocore_decode(data):
    buf = es.EventStreamBuffer()
    buf.add_data(data)
    return list(buf)


def anthropic_chunk(event, pad):
    body = json.dumps(event, separators=(",", ":")).encode()
    return json.dumps({"bytes": base64.b64encode(body).decode(), "p": "abcdefghijklmnopqrstuvwxyz"[:pad]},
                      separators=(",", ":")).encode()


def bedrock_event(payload):
    return [(":event-type", 7, "chunk"), (":content-type", 7, "application/json"), (":message-type", 7, "event")], payload


def bedrock_exception(kind, message):
    payload = json.dumps({"message": message}).encode()
    return [(":exception-type", 7, kind), (":content-type", 7, "application/json"),
            (":message-type", 7, "exception")], payload


GOOD = {
    "empty": ([], b""),
    "payload_only": ([], b'{"foo":"bar"}'),
    "all_header_types": ([
        ("true", 0, True), ("false", 1, False), ("byte", 2, -49), ("short", 3, -4097),
        ("int", 4, 40132), ("long", 5, -2 ** 40), ("bytes", 6, b"\x00\xffbytes"),
        ("string", 7, "h\u00e9llo"), ("timestamp", 8, 1700000000123),
        ("uuid", 9, bytes(range(16))),
    ], b"{}"),
    "chunk_message_start": bedrock_event(anthropic_chunk({
        "type": "message_start", "message": {
            "id": "msg_bdrk_01", "type": "message", "role": "assistant",
            "model": "claude-sonnet-4-20250514", "content": [], "stop_reason": None,
            "stop_sequence": None, "usage": {"input_tokens": 12, "cache_creation_input_tokens": 0,
                                             "cache_read_input_tokens": 0, "output_tokens": 1}}}, 3)),
    "chunk_text_delta": bedrock_event(anthropic_chunk({
        "type": "content_block_delta", "index": 0,
        "delta": {"type": "text_delta", "text": "Hello"}}, 11)),
    "throttling_exception": bedrock_exception(
        "throttlingException", "Too many requests, please wait before trying again."),
    "model_stream_error_exception": bedrock_exception(
        "modelStreamErrorException", "The model stream failed."),
}


def corrupt(data, at):
    b = bytearray(data)
    b[at] ^= 0x01
    return bytes(b)


def main():
    good = []
    stream = b""
    for name, (headers, payload) in GOOD.items():
        data = frame(headers, payload)
        [msg] = botocore_decode(data)
        assert msg.payload == payload, name
        decoded = dict(msg.headers)
        for hname, kind, value in headers:
            got = decoded[hname]
            want = value if kind not in (0, 1) else (kind == 0)
            assert got == want, (name, hname, got, want)
        good.append({
            "name": name,
            "frame": data.hex(),
            "headers": [[h, k, json_value(k, v)] for h, k, v in headers],
            "payload": payload.hex(),
        })
        stream += data
    # The whole sequence as one stream, decoded by botocore fed a byte at a time.
    buf = es.EventStreamBuffer()
    n = 0
    for i in range(len(stream)):
        buf.add_data(stream[i:i + 1])
        n += len(list(buf))
    assert n == len(GOOD)

    one = frame(*GOOD["chunk_text_delta"])
    bad = []
    cases = {
        # A bit flipped in the total length: the prelude CRC no longer matches.
        "prelude_crc": (corrupt(one, 3), es.ChecksumMismatch),
        # A bit flipped in the payload: the message CRC no longer matches.
        "message_crc": (corrupt(one, len(one) - 10), es.ChecksumMismatch),
        # A bit flipped in the message CRC itself.
        "message_crc_field": (corrupt(one, len(one) - 1), es.ChecksumMismatch),
    }
    # Headers length beyond botocore's 128 KiB limit, with a valid prelude CRC.
    prelude = struct.pack(">II", 200 * 1024, 150 * 1024)
    prelude += struct.pack(">I", zlib.crc32(prelude))
    cases["headers_too_long"] = (prelude, es.InvalidHeadersLength)
    for name, (data, exc) in cases.items():
        try:
            botocore_decode(data)
        except exc:
            pass
        else:
            raise AssertionError(f"botocore accepted {name}")
        bad.append({"name": name, "frame": data.hex(), "botocore_error": exc.__name__})
    json.dump({
        "generated_by": "src/providers/bedrock/testdata/make_vectors.py, botocore " + botocore.__version__,
        "good": good,
        "bad": bad,
    }, sys.stdout, indent=1)
    sys.stdout.write("\n")


main()
