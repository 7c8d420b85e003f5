use super::*;
use crate::api::Api;
use crate::providers::bedrock::eventstream::{event, exception};
use serde_json::{json, Value};

/// Standard base64 with padding (test tooling: the filter only decodes).
fn b64(bytes: &[u8]) -> String {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for c in bytes.chunks(3) {
        let n = c.iter().enumerate().fold(0u32, |n, (i, &b)| n | u32::from(b) << (16 - 8 * i));
        for i in 0..4 {
            if i <= c.len() {
                out.push(char::from(A[(n >> (18 - 6 * i) & 63) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// A Bedrock `chunk` frame carrying `event` (with Bedrock's padding member).
fn chunk(event_json: &Value) -> Vec<u8> {
    let payload = json!({"bytes": b64(event_json.to_string().as_bytes()), "p": "abcdefgh"});
    event("chunk", payload.to_string().as_bytes())
}

/// An Anthropic stream as Bedrock sends it (usage with cache reads and writes, the invocation
/// metrics on message_stop).
fn events() -> Vec<Value> {
    vec![
        json!({"type":"message_start","message":{"id":"msg_bdrk_01","type":"message","role":"assistant","model":"claude-sonnet-4-20250514","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":10,"cache_creation_input_tokens":100,"cache_read_input_tokens":1000,"output_tokens":1}}}),
        json!({"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}),
        json!({"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hello"}}),
        json!({"type":"content_block_stop","index":0}),
        json!({"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":7}}),
        json!({"type":"message_stop","amazon-bedrock-invocationMetrics":{"inputTokenCount":10,"outputTokenCount":7,"invocationLatency":500,"firstByteLatency":200,"cacheReadInputTokenCount":1000,"cacheWriteInputTokenCount":100}}),
    ]
}

fn sse_events(sse: &[u8]) -> Vec<(String, Value)> {
    String::from_utf8(sse.to_vec())
        .unwrap()
        .split_terminator("\n\n")
        .map(|e| {
            let (name, data) = e.strip_prefix("event: ").unwrap().split_once("\ndata: ").unwrap();
            (name.to_string(), serde_json::from_str(data).unwrap())
        })
        .collect()
}

fn convert_in(stream: &[u8], size: usize) -> (Vec<u8>, bool) {
    let mut c = Converter::new();
    let out: Vec<u8> = stream.chunks(size).flat_map(|piece| c.feed(piece)).collect();
    (out, c.ended())
}

#[test]
fn base64_decodes_what_it_should_and_refuses_the_rest() {
    for s in ["", "f", "fo", "foo", "foob", "fooba", "foobar", "\u{0}\u{ff}é"] {
        assert_eq!(
            crate::protocol::base64::decode_bytes(b64(s.as_bytes()).as_bytes()).as_deref(),
            Some(s.as_bytes()),
            "{s}"
        );
        // Unpadded too.
        let unpadded = b64(s.as_bytes()).trim_end_matches('=').to_string();
        assert_eq!(crate::protocol::base64::decode_bytes(unpadded.as_bytes()).as_deref(), Some(s.as_bytes()), "{s}");
    }
    assert_eq!(crate::protocol::base64::decode_bytes(b"Zm9vYmFy").unwrap(), b"foobar");
    for bad in [&b"Z"[..], b"Zm9v!mFy", b"Zm=v", b"====", b"Zm9=", b"Zh==", b"Zm9vY", b"Zm9v\n"] {
        assert_eq!(crate::protocol::base64::decode_bytes(bad), None, "{}", String::from_utf8_lossy(bad));
    }
}

#[test]
fn chunks_become_anthropics_stream_however_the_body_is_split() {
    let stream: Vec<u8> = events().iter().flat_map(chunk).collect();
    let (whole, ended) = convert_in(&stream, stream.len());
    assert!(!ended);
    let got = sse_events(&whole);
    let names: Vec<&str> = got.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names,
        [
            "message_start",
            "content_block_start",
            "content_block_delta",
            "content_block_stop",
            "message_delta",
            "message_stop"
        ]
    );
    // Every event byte for byte, but message_stop without Bedrock's metrics.
    for ((_, got), want) in got.iter().zip(events()).take(5) {
        assert_eq!(got, &want);
    }
    assert_eq!(got[5].1, json!({"type": "message_stop"}));
    for size in [1, 2, 3, 7, 64, 100] {
        assert_eq!(convert_in(&stream, size).0, whole, "chunks of {size}");
    }
}

#[test]
fn usage_with_cache_reads_and_writes_is_priced_and_openai_callers_get_their_shape() {
    use crate::answer::response::{Served, SseRewriter};
    use crate::translate::stream::StreamTranslator;
    let stream: Vec<u8> = events().iter().flat_map(chunk).collect();
    let (sse, _) = convert_in(&stream, 13);
    // An Anthropic caller: the stream the filter already rewrites, its usage priced.
    let served = Served {
        model: "anthropic/claude-sonnet-4".into(),
        slug: "amazon-bedrock".into(),
        pricing: crate::config::Pricing {
            prompt: 3.0,
            completion: 15.0,
            request: 0.0,
            image: 0.0,
            cached_prompt: Some(0.3),
        },
        api: Api::Anthropic,
    };
    let mut r = SseRewriter::new(served);
    let mut out: Vec<u8> = sse.chunks(9).flat_map(|c| r.feed(c, false)).collect();
    out.extend(r.feed(b"", true));
    let out = String::from_utf8(out).unwrap();
    let delta = out.split("\n\n").find(|e| e.contains("message_delta")).unwrap();
    let data: Value = serde_json::from_str(delta.split_once("data: ").unwrap().1).unwrap();
    let cost = data["usage"]["cost"].as_f64().unwrap_or_else(|| panic!("{out}"));
    // 110 prompt tokens at $3/M, 1000 cached at $0.30/M, 7 completion at $15/M.
    let want = (110.0 * 3.0 + 1000.0 * 0.3 + 7.0 * 15.0) / 1e6;
    assert!((cost - want).abs() < 1e-9, "{cost} vs {want}: {out}");
    // An OpenAI caller: the existing translation of an Anthropic stream.
    let mut t = StreamTranslator::new(Api::Anthropic, Api::OpenAi, 1, false);
    let out: Vec<u8> = sse.chunks(5).flat_map(|c| t.feed(c)).collect();
    let out = String::from_utf8(out).unwrap();
    assert!(t.ended(), "{out}");
    assert!(out.contains("\"content\":\"Hello\""), "{out}");
    assert!(out.contains("\"finish_reason\":\"stop\""), "{out}");
    assert!(out.ends_with("data: [DONE]\n\n"), "{out}");
}

#[test]
fn an_exception_in_the_stream_ends_it_with_anthropics_error_event() {
    let mut stream: Vec<u8> = events().iter().take(3).flat_map(chunk).collect();
    stream.extend(exception("throttlingException", br#"{"message":"Too many tokens, please wait."}"#));
    stream.extend(chunk(&events()[3]));
    for size in [1, 50, stream.len()] {
        let (out, ended) = convert_in(&stream, size);
        assert!(ended);
        let got = sse_events(&out);
        assert_eq!(got.len(), 4, "nothing after the exception");
        let (name, data) = &got[3];
        assert_eq!(name, "error");
        assert_eq!(
            data,
            &json!({"type":"error","error":{"type":"rate_limit_error","message":"throttlingException: Too many tokens, please wait."}})
        );
    }
    for (name, kind) in [
        ("modelStreamErrorException", "api_error"),
        ("internalServerException", "api_error"),
        ("serviceUnavailableException", "overloaded_error"),
        ("validationException", "invalid_request_error"),
        ("modelTimeoutException", "timeout_error"),
    ] {
        let (out, ended) = convert_in(&exception(name, br#"{"message":"m"}"#), 4);
        assert!(ended);
        assert_eq!(sse_events(&out)[0].1["error"]["type"], kind, "{name}");
    }
}

#[test]
fn a_bad_frame_or_chunk_ends_the_stream_with_an_api_error() {
    let good = chunk(&events()[0]);
    let mut corrupt = chunk(&events()[2]);
    let n = corrupt.len();
    corrupt[n - 8] ^= 1;
    let not_base64 = event("chunk", br#"{"bytes":"not base64!"}"#);
    let not_anthropic = event("chunk", format!(r#"{{"bytes":"{}"}}"#, b64(b"[1,2]")).as_bytes());
    let bad_type = event("chunk", format!(r#"{{"bytes":"{}"}}"#, b64(br#"{"type":"a\nb"}"#)).as_bytes());
    for bad in [corrupt, not_base64, not_anthropic, bad_type] {
        let mut stream = good.clone();
        stream.extend(&bad);
        stream.extend(&good);
        let (out, ended) = convert_in(&stream, 11);
        assert!(ended);
        let got = sse_events(&out);
        assert_eq!(got.len(), 2);
        assert_eq!(got[0].0, "message_start");
        assert_eq!((got[1].0.as_str(), got[1].1["error"]["type"].as_str()), ("error", Some("api_error")));
    }
    // Other event types and unknown messages are left out.
    let mut stream = event("metadata", b"{}");
    stream.extend(crate::providers::bedrock::eventstream::encode(&[], b"x"));
    stream.extend(&good);
    let (out, ended) = convert_in(&stream, 3);
    assert!(!ended);
    assert_eq!(sse_events(&out).len(), 1);
}
