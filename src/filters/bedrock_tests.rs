//! A `bedrock` provider through the two filters (mock host): each attempt's path and body as
//! Bedrock takes them, its event stream turned into Anthropic's SSE stream, its errors in
//! Anthropic's shape and classified for failover.

use std::rc::Rc;

use serde_json::{json, Value};

use super::downstream::Stream;
use super::host::Action;
use super::kind_test_kit::{self as kit, attempt, json_of, sent_body};
use super::mock::MockHost;
use super::{Configured, Filter};
use crate::providers::bedrock::eventstream::{event, exception};
use crate::wiring::MODEL_FAILURE_HEADER;

/// One Claude model from Anthropic (cheaper: tried first) and from Bedrock.
const CONFIG: &str = r#"{
  "providers": {
    "anthropic": {"cluster": "c_anthropic", "authority": "api.anthropic.com",
                  "credential": {"header": "x-api-key", "prefix": "", "value": "anthropic-secret"},
                  "apis": {"anthropic": {}}},
    "amazon-bedrock": {"kind": "bedrock", "cluster": "c_bedrock",
                       "authority": "bedrock-runtime.us-east-1.amazonaws.com", "apis": {"anthropic": {}}}
  },
  "models": {"anthropic/claude": {"endpoints": [
    {"provider": "anthropic", "upstream_model": "claude-sonnet-4-20250514", "pricing": {"prompt": 3, "completion": 15}},
    {"provider": "amazon-bedrock", "upstream_model": "us.anthropic.claude-sonnet-4-20250514-v1:0",
     "pricing": {"prompt": 3.01, "completion": 15}}
  ]}},
  "routing": {"default_policy": "price_weighted"}
}"#;

const ONLY_BEDROCK: &str = r#"{"only":["amazon-bedrock"]}"#;

const BEDROCK_ID_PATH: &str = "/model/us.anthropic.claude-sonnet-4-20250514-v1%3A0";

fn configured() -> Rc<Configured> {
    kit::configured(CONFIG)
}

fn decide(host: &MockHost, config: &Rc<Configured>, path: &str, body: &str, provider: &str) -> Stream<MockHost> {
    kit::decide(host, config, path, body, provider, &[])
}

fn b64(bytes: &[u8]) -> String {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for c in bytes.chunks(3) {
        let n = c.iter().enumerate().fold(0u32, |n, (i, &b)| n | u32::from(b) << (16 - 8 * i));
        for i in 0..4 {
            out.push(if i <= c.len() { char::from(A[(n >> (18 - 6 * i) & 63) as usize]) } else { '=' });
        }
    }
    out
}

fn chunk(e: Value) -> Vec<u8> {
    event("chunk", json!({"bytes": b64(e.to_string().as_bytes()), "p": "abc"}).to_string().as_bytes())
}

fn bedrock_stream() -> Vec<u8> {
    [
        json!({"type":"message_start","message":{"id":"msg_bdrk_1","type":"message","role":"assistant","model":"claude-sonnet-4-20250514","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":10,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":1}}}),
        json!({"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}),
        json!({"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hello"}}),
        json!({"type":"content_block_stop","index":0}),
        json!({"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":2}}),
        json!({"type":"message_stop","amazon-bedrock-invocationMetrics":{"inputTokenCount":10,"outputTokenCount":2}}),
    ]
    .into_iter()
    .flat_map(chunk)
    .collect()
}

#[test]
fn an_anthropic_caller_fails_over_to_bedrock_mid_plan_streamed() {
    let config = configured();
    let host = MockHost::new();
    let body =
        r#"{"model":"anthropic/claude","max_tokens":64,"stream":true,"messages":[{"role":"user","content":"hi"}]}"#;
    let mut stream = decide(&host, &config, "/v1/messages", body, r#"{"sort":"price"}"#);
    let mut first = attempt(&host, &config, 1, "c_anthropic");
    assert_eq!(host.request_header_value(":path").as_deref(), Some("/v1/messages"));
    host.with_response_headers(&[(":status", "529"), ("content-type", "application/json")]);
    assert_eq!(first.on_response_headers(false), Action::Continue);
    first.on_done();

    let mut second = attempt(&host, &config, 2, "c_bedrock");
    let path = format!("{BEDROCK_ID_PATH}/invoke-with-response-stream");
    assert_eq!(host.request_header_value(":path"), Some(path));
    assert_eq!(host.request_header_value(":authority").as_deref(), Some("bedrock-runtime.us-east-1.amazonaws.com"));
    assert_eq!(host.request_header_value("x-api-key"), None, "anthropic's key is not sent to Bedrock");
    assert_eq!(host.request_header_value("authorization"), None, "Envoy signs the attempt");
    assert_eq!(
        sent_body(&host),
        json!({"anthropic_version":"bedrock-2023-05-31","max_tokens":64,"messages":[{"role":"user","content":"hi"}]})
    );
    host.with_response_headers(&[(":status", "200"), ("content-type", "application/vnd.amazon.eventstream")]);
    assert_eq!(second.on_response_headers(false), Action::Continue);
    assert_eq!(host.response_header_value("content-type").as_deref(), Some("text/event-stream"));
    assert_eq!(stream.on_response_headers(false), Action::Continue);
    let out = kit::feed_answer(&host, &mut second, &mut stream, &bedrock_stream(), 37);
    assert!(out.starts_with("event: message_start\ndata: "), "{out}");
    assert!(out.contains("\"text\":\"Hello\""), "{out}");
    assert!(out.contains("event: message_stop"), "{out}");
    assert!(!out.contains("invocationMetrics"), "{out}");
    assert!(out.contains("\"cost\":"), "the usage is priced: {out}");
    assert!(host.state().refused_writes.is_empty(), "{:?}", host.state().refused_writes);
}

#[test]
fn an_openai_caller_reaches_claude_on_bedrock_plain_and_streamed() {
    let config = configured();
    for stream_asked in [false, true] {
        let host = MockHost::new();
        let body = format!(
            r#"{{"model":"anthropic/claude","max_tokens":64,"stream":{stream_asked},"messages":[{{"role":"user","content":"hi"}}]}}"#
        );
        let mut stream = decide(&host, &config, "/v1/chat/completions", &body, ONLY_BEDROCK);
        let mut a = attempt(&host, &config, 1, "c_bedrock");
        let want = format!("{BEDROCK_ID_PATH}/{}", if stream_asked { "invoke-with-response-stream" } else { "invoke" });
        assert_eq!(host.request_header_value(":path"), Some(want));
        let sent = sent_body(&host);
        assert_eq!(sent["anthropic_version"], "bedrock-2023-05-31");
        assert!(sent.get("model").is_none() && sent.get("stream").is_none(), "{sent}");
        assert_eq!(sent["messages"][0]["content"][0]["text"], "hi", "{sent}");
        if stream_asked {
            host.with_response_headers(&[(":status", "200"), ("content-type", "application/vnd.amazon.eventstream")]);
            assert_eq!(a.on_response_headers(false), Action::Continue);
            stream.on_response_headers(false);
            let out = kit::feed_answer(&host, &mut a, &mut stream, &bedrock_stream(), 11);
            assert!(out.contains("\"content\":\"Hello\""), "{out}");
            assert!(out.ends_with("data: [DONE]\n\n"), "{out}");
        } else {
            let answer = r#"{"id":"msg_bdrk_1","type":"message","role":"assistant","model":"claude-sonnet-4-20250514","content":[{"type":"text","text":"Hello"}],"stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":10,"output_tokens":2,"cache_read_input_tokens":0,"cache_creation_input_tokens":0}}"#;
            host.with_response_headers(&[
                (":status", "200"),
                ("content-type", "application/json"),
                ("content-length", &answer.len().to_string()),
            ]);
            assert_eq!(a.on_response_headers(false), Action::Continue);
            assert_eq!(host.response_header_value("content-type").as_deref(), Some("application/json"));
            stream.on_response_headers(false);
            let out = kit::feed_answer(&host, &mut a, &mut stream, answer.as_bytes(), answer.len());
            let v = json_of(out.as_bytes());
            assert_eq!(v["choices"][0]["message"]["content"], "Hello", "{v}");
            assert_eq!(v["provider"], "amazon-bedrock", "{v}");
        }
    }
}

#[test]
fn bedrock_errors_are_classified_for_failover_and_answered_in_anthropics_shape() {
    let config = configured();
    // A model failure (424) is a 5xx to the router: retried, and the caller's error names it.
    let host = MockHost::new();
    let body = r#"{"model":"anthropic/claude","max_tokens":64,"messages":[]}"#;
    let mut stream = decide(&host, &config, "/v1/messages", body, ONLY_BEDROCK);
    let mut a = attempt(&host, &config, 1, "c_bedrock");
    host.with_response_headers(&[
        (":status", "424"),
        ("content-type", "application/json"),
        ("content-length", "31"),
        ("x-amzn-errortype", "ModelErrorException:http://internal.amazon.com/coral/com.amazon.bedrock/"),
    ]);
    assert_eq!(a.on_response_headers(false), Action::Continue);
    assert_eq!(host.response_header_value(":status").as_deref(), Some("502"));
    assert_eq!(host.response_header_value("content-length"), None);
    stream.on_response_headers(false);
    let out = kit::feed_answer(&host, &mut a, &mut stream, br#"{"message":"The model failed."}"#, 7);
    let v = json_of(out.as_bytes());
    assert_eq!(v["error"]["metadata"]["attempts"][0]["status"], 502, "{v}");

    // The caller's request refused (400, not retried): Bedrock's body in Anthropic's shape.
    let host = MockHost::new();
    let mut stream = decide(&host, &config, "/v1/messages", body, ONLY_BEDROCK);
    let mut a = attempt(&host, &config, 1, "c_bedrock");
    host.with_response_headers(&[
        (":status", "400"),
        ("content-type", "application/json"),
        ("x-amzn-errortype", "ValidationException:http://internal.amazon.com/coral/com.amazon.bedrock/"),
    ]);
    assert_eq!(a.on_response_headers(false), Action::Continue);
    assert_eq!(host.response_header_value(":status").as_deref(), Some("400"));
    stream.on_response_headers(false);
    let out =
        kit::feed_answer(&host, &mut a, &mut stream, br#"{"message":"messages: at least one message is required"}"#, 9);
    let v = json_of(out.as_bytes());
    assert_eq!(v["type"], "error", "{v}");
    assert_eq!(v["error"]["type"], "invalid_request_error", "{v}");
    assert_eq!(v["error"]["message"], "ValidationException: messages: at least one message is required", "{v}");

    // A refused signature with Anthropic still planned: failed over like a refused key.
    let host = MockHost::new();
    let body = r#"{"model":"anthropic/claude","max_tokens":64,"messages":[]}"#;
    let _stream = decide(&host, &config, "/v1/messages", body, r#"{"order":["amazon-bedrock","anthropic"]}"#);
    let mut a = attempt(&host, &config, 1, "c_bedrock");
    host.with_response_headers(&[(":status", "403"), ("x-amzn-errortype", "InvalidSignatureException")]);
    assert_eq!(a.on_response_headers(false), Action::Continue);
    assert_eq!(host.response_header_value(":status").as_deref(), Some("503"));
    assert_eq!(host.response_header_value(MODEL_FAILURE_HEADER).as_deref(), Some("403"));
}

#[test]
fn an_exception_in_bedrocks_stream_reaches_the_caller_as_an_error_event() {
    let config = configured();
    let host = MockHost::new();
    let body = r#"{"model":"anthropic/claude","max_tokens":64,"stream":true,"messages":[]}"#;
    let mut stream = decide(&host, &config, "/v1/messages", body, ONLY_BEDROCK);
    let mut a = attempt(&host, &config, 1, "c_bedrock");
    // The first attempt too: the decision filter wrote the model, the attempt replaces it.
    assert_eq!(sent_body(&host), json!({"anthropic_version":"bedrock-2023-05-31","max_tokens":64,"messages":[]}));
    host.with_response_headers(&[(":status", "200"), ("content-type", "application/vnd.amazon.eventstream")]);
    assert_eq!(a.on_response_headers(false), Action::Continue);
    stream.on_response_headers(false);
    // Three chunk events, then a throttling exception mid-stream.
    let mut d = crate::providers::bedrock::eventstream::Decoder::new();
    let mut events = Vec::new();
    d.feed(&bedrock_stream(), &mut events).unwrap();
    let cut: Vec<u8> = events.iter().take(3).flat_map(|m| event("chunk", &m.payload)).collect();
    let mut body = cut;
    body.extend(exception("throttlingException", br#"{"message":"Too many tokens."}"#));
    let out = kit::feed_answer(&host, &mut a, &mut stream, &body, 16);
    assert!(out.contains("event: error"), "{out}");
    assert!(out.contains("rate_limit_error"), "{out}");
}
