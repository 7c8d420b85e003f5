use super::*;
use crate::api::Api;
use crate::providers::bedrock::eventstream::{event, exception};
use crate::translate::stream::StreamTranslator;
use serde_json::{json, Value};

/// A ConverseStream answer as Bedrock sends it: reasoning, text, a tool call, the stop, then the
/// metadata with cache reads and writes (payload shapes of botocore's `ConverseStreamOutput`).
fn frames() -> Vec<u8> {
    let events = [
        ("messageStart", json!({"role": "assistant"})),
        ("contentBlockDelta", json!({"contentBlockIndex": 0, "delta": {"reasoningContent": {"text": "Think"}}})),
        ("contentBlockDelta", json!({"contentBlockIndex": 0, "delta": {"reasoningContent": {"signature": "c2ln"}}})),
        ("contentBlockStop", json!({"contentBlockIndex": 0})),
        ("contentBlockDelta", json!({"contentBlockIndex": 1, "delta": {"text": "Hello"}})),
        ("contentBlockDelta", json!({"contentBlockIndex": 1, "delta": {"text": " there"}})),
        ("contentBlockStop", json!({"contentBlockIndex": 1})),
        (
            "contentBlockStart",
            json!({"contentBlockIndex": 2, "start": {"toolUse": {"toolUseId": "tooluse_1", "name": "get_weather"}}}),
        ),
        ("contentBlockDelta", json!({"contentBlockIndex": 2, "delta": {"toolUse": {"input": "{\"city\":"}}})),
        ("contentBlockDelta", json!({"contentBlockIndex": 2, "delta": {"toolUse": {"input": "\"Paris\"}"}}})),
        ("contentBlockStop", json!({"contentBlockIndex": 2})),
        ("messageStop", json!({"stopReason": "tool_use"})),
        (
            "metadata",
            json!({"usage": {"inputTokens": 10, "outputTokens": 7, "totalTokens": 1117,
            "cacheReadInputTokens": 1000, "cacheWriteInputTokens": 100}, "metrics": {"latencyMs": 300}}),
        ),
    ];
    events.iter().flat_map(|(name, payload)| event(name, payload.to_string().as_bytes())).collect()
}

/// The SSE events of `sse`: (event name, data JSON).
fn parse_sse(sse: &[u8]) -> Vec<(String, Value)> {
    let text = String::from_utf8(sse.to_vec()).unwrap();
    text.split("\n\n")
        .filter(|e| !e.trim().is_empty())
        .map(|e| {
            let name = e.lines().find_map(|l| l.strip_prefix("event: ")).unwrap_or("").to_string();
            let data = e.lines().find_map(|l| l.strip_prefix("data: ")).unwrap();
            (name, serde_json::from_str(data).unwrap_or(Value::String(data.to_string())))
        })
        .collect()
}

fn expected() -> Vec<(String, Value)> {
    let e = |name: &str, v: Value| (name.to_string(), v);
    vec![
        e(
            "message_start",
            json!({"type": "message_start", "message": {"id": "msg_req1", "type": "message",
            "role": "assistant", "model": "us.meta.llama3-3-70b-instruct-v1:0", "content": [], "stop_reason": null,
            "stop_sequence": null, "usage": {"input_tokens": 0, "output_tokens": 0}}}),
        ),
        e(
            "content_block_start",
            json!({"type": "content_block_start", "index": 0, "content_block": {"type": "thinking", "thinking": ""}}),
        ),
        e(
            "content_block_delta",
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta", "thinking": "Think"}}),
        ),
        e(
            "content_block_delta",
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "signature_delta", "signature": "c2ln"}}),
        ),
        e("content_block_stop", json!({"type": "content_block_stop", "index": 0})),
        e(
            "content_block_start",
            json!({"type": "content_block_start", "index": 1, "content_block": {"type": "text", "text": ""}}),
        ),
        e(
            "content_block_delta",
            json!({"type": "content_block_delta", "index": 1, "delta": {"type": "text_delta", "text": "Hello"}}),
        ),
        e(
            "content_block_delta",
            json!({"type": "content_block_delta", "index": 1, "delta": {"type": "text_delta", "text": " there"}}),
        ),
        e("content_block_stop", json!({"type": "content_block_stop", "index": 1})),
        e(
            "content_block_start",
            json!({"type": "content_block_start", "index": 2, "content_block": {"type": "tool_use", "id": "tooluse_1", "name": "get_weather", "input": {}}}),
        ),
        e(
            "content_block_delta",
            json!({"type": "content_block_delta", "index": 2, "delta": {"type": "input_json_delta", "partial_json": "{\"city\":"}}),
        ),
        e(
            "content_block_delta",
            json!({"type": "content_block_delta", "index": 2, "delta": {"type": "input_json_delta", "partial_json": "\"Paris\"}"}}),
        ),
        e("content_block_stop", json!({"type": "content_block_stop", "index": 2})),
        e(
            "message_delta",
            json!({"type": "message_delta", "delta": {"stop_reason": "tool_use", "stop_sequence": null},
            "usage": {"input_tokens": 10, "output_tokens": 7, "cache_creation_input_tokens": 100, "cache_read_input_tokens": 1000}}),
        ),
        e("message_stop", json!({"type": "message_stop"})),
    ]
}

fn converter() -> Converter {
    Converter::new("us.meta.llama3-3-70b-instruct-v1:0", "req1")
}

#[test]
fn a_converse_stream_fed_whole_is_anthropics_stream() {
    let mut c = converter();
    let out = c.feed(&frames());
    assert_eq!(parse_sse(&out), expected());
    assert!(c.ended());
    // Nothing after message_stop is read.
    assert!(c.feed(&event("metadata", b"{}")).is_empty());
}

#[test]
fn a_converse_stream_fed_byte_by_byte_gives_the_same_events_as_each_frame_completes() {
    let bytes = frames();
    let mut c = converter();
    let mut out = Vec::new();
    let mut produced_at = Vec::new();
    for (i, b) in bytes.iter().enumerate() {
        let piece = c.feed(std::slice::from_ref(b));
        if !piece.is_empty() {
            produced_at.push(i);
        }
        out.extend(piece);
    }
    assert_eq!(parse_sse(&out), expected());
    // Decoded as it arrives: the first event is out long before the last byte.
    assert!(produced_at.first().is_some_and(|&i| i < bytes.len() / 4), "{produced_at:?}");
    // Split in uneven pieces: the same.
    for size in [7, 50, 333] {
        let mut c = converter();
        let out: Vec<u8> = bytes.chunks(size).flat_map(|p| c.feed(p)).collect();
        assert_eq!(parse_sse(&out), expected(), "pieces of {size}");
    }
}

#[test]
fn the_converted_stream_reaches_every_callers_api_with_its_usage_and_tool_call() {
    let sse = converter().feed(&frames());
    // OpenAI: the text, the call with its arguments, finish tool_calls, the usage chunk.
    let out = StreamTranslator::new(Api::Anthropic, Api::OpenAi, 1, false).feed(&sse);
    let text = String::from_utf8(out).unwrap();
    let chunks: Vec<Value> = text
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .filter(|d| *d != "[DONE]")
        .map(|d| serde_json::from_str(d).unwrap())
        .collect();
    let content: String =
        chunks.iter().filter_map(|c| c.pointer("/choices/0/delta/content").and_then(Value::as_str)).collect();
    assert_eq!(content, "Hello there");
    let args: String = chunks
        .iter()
        .filter_map(|c| c.pointer("/choices/0/delta/tool_calls/0/function/arguments").and_then(Value::as_str))
        .collect();
    assert_eq!(args, r#"{"city":"Paris"}"#);
    assert!(chunks
        .iter()
        .any(|c| c.pointer("/choices/0/delta/tool_calls/0/function/name") == Some(&json!("get_weather"))));
    assert!(chunks.iter().any(|c| c.pointer("/choices/0/finish_reason") == Some(&json!("tool_calls"))));
    let usage = chunks.iter().find_map(|c| c.get("usage").filter(|u| !u.is_null())).expect("a usage chunk");
    assert_eq!((usage["prompt_tokens"].as_u64(), usage["completion_tokens"].as_u64()), (Some(1110), Some(7)));
    assert_eq!(usage.pointer("/prompt_tokens_details/cached_tokens").and_then(Value::as_u64), Some(1000));
    assert!(text.trim_end().ends_with("data: [DONE]"), "{text}");
    // Google: usageMetadata with the prompt's full count.
    let out = StreamTranslator::new(Api::Anthropic, Api::Google, 1, false).feed(&sse);
    let text = String::from_utf8(out).unwrap();
    assert!(text.contains(r#""promptTokenCount":1110"#), "{text}");
    assert!(text.contains(r#""functionCall""#) && text.contains("Paris"), "{text}");
    // Responses: the completed response carries the usage.
    let out = StreamTranslator::new(Api::Anthropic, Api::Responses, 1, false).feed(&sse);
    let text = String::from_utf8(out).unwrap();
    assert!(text.contains("response.completed") && text.contains(r#""input_tokens":1110"#), "{text}");
}

#[test]
fn exceptions_and_bad_frames_end_the_stream_with_an_error_event() {
    let start = event("messageStart", br#"{"role":"assistant"}"#);
    let delta = event("contentBlockDelta", br#"{"contentBlockIndex":0,"delta":{"text":"Hi"}}"#);
    let cases = [
        ("throttlingException", "rate_limit_error"),
        ("serviceUnavailableException", "overloaded_error"),
        ("modelStreamErrorException", "api_error"),
        ("internalServerException", "api_error"),
        ("validationException", "invalid_request_error"),
    ];
    for (name, kind) in cases {
        let mut bytes = [start.clone(), delta.clone()].concat();
        bytes.extend(exception(name, br#"{"message":"Too many tokens"}"#));
        bytes.extend(event("contentBlockDelta", br#"{"contentBlockIndex":0,"delta":{"text":"late"}}"#));
        let mut c = converter();
        let events = parse_sse(&c.feed(&bytes));
        let (last_name, last) = events.last().unwrap();
        assert_eq!(last_name, "error", "{name}");
        assert_eq!(last["error"]["type"], kind, "{name}");
        assert_eq!(last["error"]["message"], format!("{name}: Too many tokens"));
        assert!(!events.iter().any(|(_, v)| v.to_string().contains("late")), "{name}");
        assert!(c.ended());
    }
    // A frame with a bad CRC.
    let mut bytes = [start.clone(), delta.clone()].concat();
    if let Some(b) = bytes.last_mut() {
        *b ^= 0xff;
    }
    let events = parse_sse(&converter().feed(&bytes));
    assert_eq!(events.last().unwrap().1["error"]["type"], "api_error");
    // An event that is not its shape.
    let events =
        parse_sse(&converter().feed(&[start, event("contentBlockDelta", br#"{"delta":{"text":"x"}}"#)].concat()));
    assert_eq!(events.last().unwrap().0, "error");
    // Unknown events are left out; a stop reason held until the metadata.
    let bytes = [
        event("somethingNew", b"{}"),
        event("messageStop", br#"{"stopReason":"guardrail_intervened"}"#),
        event("metadata", br#"{"usage":{"inputTokens":1,"outputTokens":2,"totalTokens":3},"metrics":{"latencyMs":1}}"#),
    ]
    .concat();
    let events = parse_sse(&converter().feed(&bytes));
    assert_eq!(
        events.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>(),
        ["message_start", "message_delta", "message_stop"]
    );
    assert_eq!(events[1].1["delta"]["stop_reason"], "refusal");
}
