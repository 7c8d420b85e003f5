//! A `vertex` provider through the two filters (mock host): each attempt's path, token and body
//! as Vertex AI takes them for Claude and Gemini, its answers passed on or translated, its own
//! (Google-shaped) errors on the Claude paths in Anthropic's shape and classified for failover.

use std::rc::Rc;

use serde_json::json;

use super::downstream::Stream;
use super::host::Action;
use super::kind_test_kit::{self as kit, attempt, json_of, sent_body};
use super::mock::MockHost;
use super::{Configured, Filter};
use crate::wiring::MODEL_FAILURE_HEADER;

/// Claude from Anthropic (cheaper: tried first) and Vertex; Gemini from Vertex only.
const CONFIG: &str = r#"{
  "providers": {
    "anthropic": {"cluster": "c_anthropic", "authority": "api.anthropic.com",
                  "credential": {"header": "x-api-key", "prefix": "", "value": "anthropic-secret"},
                  "apis": {"anthropic": {}}},
    "google-vertex": {"kind": "vertex", "cluster": "c_vertex", "authority": "us-east5-aiplatform.googleapis.com",
                      "kind_options": {"project": "proj-1", "location": "us-east5"},
                      "credential": {"value": "ya29.vertex-token"}, "apis": {"anthropic": {}, "google": {}}}
  },
  "models": {
    "anthropic/claude": {"endpoints": [
      {"provider": "anthropic", "upstream_model": "claude-sonnet-4-5", "pricing": {"prompt": 3, "completion": 15}},
      {"provider": "google-vertex", "upstream_model": "claude-sonnet-4-5@20250929",
       "pricing": {"prompt": 3.01, "completion": 15}, "apis": ["anthropic"]}
    ]},
    "google/gemini": {"endpoints": [
      {"provider": "google-vertex", "upstream_model": "gemini-2.5-pro", "pricing": {"prompt": 1.25, "completion": 10},
       "apis": ["google"]}
    ]}
  },
  "routing": {"default_policy": "price_weighted"}
}"#;

const CLAUDE: &str = "/v1/projects/proj-1/locations/us-east5/publishers/anthropic/models/claude-sonnet-4-5@20250929";
const GEMINI: &str = "/v1/projects/proj-1/locations/us-east5/publishers/google/models/gemini-2.5-pro";
const ONLY_VERTEX: &str = r#"{"only":["google-vertex"]}"#;

/// The attempt carries Vertex's token as a bearer and no one else's key.
fn configured() -> Rc<Configured> {
    kit::configured(CONFIG)
}

fn decide(host: &MockHost, config: &Rc<Configured>, path: &str, body: &str, provider: &str) -> Stream<MockHost> {
    kit::decide(host, config, path, body, provider, &[("x-goog-api-key", "caller-google-key")])
}

fn assert_vertex_token(host: &MockHost) {
    assert_eq!(host.request_header_value("authorization").as_deref(), Some("Bearer ya29.vertex-token"));
    assert_eq!(host.request_header_value("x-api-key"), None);
    assert_eq!(host.request_header_value("x-goog-api-key"), None);
    assert_eq!(host.request_header_value(":authority").as_deref(), Some("us-east5-aiplatform.googleapis.com"));
}

fn claude_stream() -> String {
    [
        ("message_start", json!({"type":"message_start","message":{"id":"msg_vrtx_1","type":"message","role":"assistant","model":"claude-sonnet-4-5-20250929","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":10,"output_tokens":1}}})),
        ("content_block_start", json!({"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}})),
        ("content_block_delta", json!({"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hello"}})),
        ("content_block_stop", json!({"type":"content_block_stop","index":0})),
        ("message_delta", json!({"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":2}})),
        ("message_stop", json!({"type":"message_stop"})),
    ]
    .iter()
    .map(|(e, d)| format!("event: {e}\ndata: {d}\n\n"))
    .collect()
}

#[test]
fn an_anthropic_caller_fails_over_to_claude_on_vertex_streamed() {
    let config = configured();
    let host = MockHost::new();
    let body =
        r#"{"model":"anthropic/claude","max_tokens":64,"stream":true,"messages":[{"role":"user","content":"hi"}]}"#;
    let mut stream = decide(&host, &config, "/v1/messages", body, r#"{"sort":"price"}"#);
    let mut first = attempt(&host, &config, 1, "c_anthropic");
    host.with_response_headers(&[(":status", "529"), ("content-type", "application/json")]);
    assert_eq!(first.on_response_headers(false), Action::Continue);
    first.on_done();

    let mut second = attempt(&host, &config, 2, "c_vertex");
    assert_eq!(host.request_header_value(":path"), Some(format!("{CLAUDE}:streamRawPredict")));
    assert_vertex_token(&host);
    assert_eq!(
        sent_body(&host),
        json!({"anthropic_version":"vertex-2023-10-16","max_tokens":64,"stream":true,"messages":[{"role":"user","content":"hi"}]})
    );
    host.with_response_headers(&[(":status", "200"), ("content-type", "text/event-stream")]);
    assert_eq!(second.on_response_headers(false), Action::Continue);
    assert_eq!(stream.on_response_headers(false), Action::Continue);
    let out = kit::feed_answer(&host, &mut second, &mut stream, claude_stream().as_bytes(), 29);
    assert!(out.starts_with("event: message_start\ndata: "), "{out}");
    assert!(out.contains("\"text\":\"Hello\"") && out.contains("event: message_stop"), "{out}");
    assert!(out.contains("\"cost\":"), "the usage is priced: {out}");
}

#[test]
fn an_openai_caller_reaches_gemini_on_vertex_translated_and_streamed() {
    let config = configured();
    let host = MockHost::new();
    let body = r#"{"model":"google/gemini","stream":true,"messages":[{"role":"system","content":"be brief"},{"role":"user","content":"hi"}]}"#;
    let mut stream = decide(&host, &config, "/v1/chat/completions", body, ONLY_VERTEX);
    let mut a = attempt(&host, &config, 1, "c_vertex");
    assert_eq!(host.request_header_value(":path"), Some(format!("{GEMINI}:streamGenerateContent?alt=sse")));
    assert_vertex_token(&host);
    let sent = sent_body(&host);
    // Vertex needs every turn's role.
    let contents = sent["contents"].as_array().unwrap();
    assert!(!contents.is_empty() && contents.iter().all(|c| c["role"] == "user" || c["role"] == "model"), "{sent}");
    assert!(sent.get("model").is_none(), "{sent}");
    host.with_response_headers(&[(":status", "200"), ("content-type", "text/event-stream")]);
    assert_eq!(a.on_response_headers(false), Action::Continue);
    stream.on_response_headers(false);
    let events = [
        json!({"candidates":[{"content":{"role":"model","parts":[{"text":"Hel"}]}}],"usageMetadata":{"promptTokenCount":5,"candidatesTokenCount":1,"totalTokenCount":6},"modelVersion":"gemini-2.5-pro"}),
        json!({"candidates":[{"content":{"role":"model","parts":[{"text":"lo"}]},"finishReason":"STOP"}],"usageMetadata":{"promptTokenCount":5,"candidatesTokenCount":2,"totalTokenCount":7},"modelVersion":"gemini-2.5-pro"}),
    ];
    let sse: String = events.iter().map(|e| format!("data: {e}\r\n\r\n")).collect();
    let out = kit::feed_answer(&host, &mut a, &mut stream, sse.as_bytes(), 13);
    assert!(out.contains("\"content\":\"Hel\"") && out.contains("\"content\":\"lo\""), "{out}");
    assert!(out.ends_with("data: [DONE]\n\n"), "{out}");
}

#[test]
fn a_google_caller_reaches_gemini_on_vertex_with_its_own_framing() {
    let config = configured();
    for (path, want) in [
        ("/v1beta/models/google/gemini:streamGenerateContent?alt=sse", ":streamGenerateContent?alt=sse"),
        ("/v1beta/models/google/gemini:generateContent", ":generateContent"),
    ] {
        let host = MockHost::new();
        let body = r#"{"contents":[{"role":"user","parts":[{"text":"hi"}]}]}"#;
        let _stream = decide(&host, &config, path, body, ONLY_VERTEX);
        let _a = attempt(&host, &config, 1, "c_vertex");
        assert_eq!(host.request_header_value(":path"), Some(format!("{GEMINI}{want}")), "{path}");
        assert_vertex_token(&host);
        assert_eq!(sent_body(&host), json_of(body.as_bytes()));
    }
}

#[test]
fn vertexs_errors_on_claude_paths_are_anthropics_and_a_refused_token_fails_over() {
    let config = configured();
    // Vertex's quota error (Google's shape): a 429 the caller gets in Anthropic's shape.
    let host = MockHost::new();
    let body = r#"{"model":"anthropic/claude","max_tokens":64,"messages":[{"role":"user","content":"hi"}]}"#;
    let mut stream = decide(&host, &config, "/v1/messages", body, ONLY_VERTEX);
    let mut a = attempt(&host, &config, 1, "c_vertex");
    assert_eq!(host.request_header_value(":path"), Some(format!("{CLAUDE}:rawPredict")));
    host.with_response_headers(&[(":status", "429"), ("content-type", "application/json"), ("content-length", "90")]);
    assert_eq!(a.on_response_headers(false), Action::Continue);
    assert_eq!(host.response_header_value(":status").as_deref(), Some("429"));
    assert_eq!(host.response_header_value("content-length"), None);
    stream.on_response_headers(false);
    let google = br#"{"error":{"code":429,"message":"Quota exceeded for aiplatform.googleapis.com/online_prediction_requests_per_base_model.","status":"RESOURCE_EXHAUSTED"}}"#;
    let out = kit::feed_answer(&host, &mut a, &mut stream, google, 17);
    let v = json_of(out.as_bytes());
    assert_eq!(v["type"], "error", "{v}");
    assert_eq!(v["error"]["type"], "rate_limit_error", "{v}");
    assert_eq!(v["error"]["metadata"]["attempts"][0]["status"], 429, "{v}");
    // Vertex named no delay: the endpoint cools down for the kind's own.
    let bytes = host.state().shared.get("sy/h/anthropic/claude|google-vertex").map(|(b, _)| b.clone()).expect("stats");
    let stats = crate::routing::stats::EndpointStats::decode(&bytes);
    let now = host.state().now_ms;
    let delay = u64::from(crate::providers::vertex::RATE_LIMIT_DELAY_S) * 1000;
    assert!(stats.view(now + delay - 1, 30_000).cooling_down);
    assert!(!stats.view(now + delay, 30_000).cooling_down);

    // An unknown model (the caller's answer): Vertex's message in Anthropic's shape.
    let host = MockHost::new();
    let mut stream = decide(&host, &config, "/v1/messages", body, ONLY_VERTEX);
    let mut a = attempt(&host, &config, 1, "c_vertex");
    host.with_response_headers(&[(":status", "404"), ("content-type", "application/json")]);
    assert_eq!(a.on_response_headers(false), Action::Continue);
    stream.on_response_headers(false);
    let google = br#"{"error":{"code":404,"message":"Publisher Model `claude-sonnet-4-5@20250929` was not found or your project does not have access to it.","status":"NOT_FOUND"}}"#;
    let out = kit::feed_answer(&host, &mut a, &mut stream, google, 23);
    let v = json_of(out.as_bytes());
    assert_eq!(v["type"], "error", "{v}");
    assert_eq!(v["error"]["type"], "not_found_error", "{v}");
    assert!(v["error"]["message"].as_str().unwrap_or("").contains("NOT_FOUND: Publisher Model"), "{v}");

    // A token Vertex refuses with Anthropic still planned: failed over like a refused key.
    let host = MockHost::new();
    let _stream = decide(&host, &config, "/v1/messages", body, r#"{"order":["google-vertex","anthropic"]}"#);
    let mut a = attempt(&host, &config, 1, "c_vertex");
    host.with_response_headers(&[(":status", "401"), ("content-type", "application/json")]);
    assert_eq!(a.on_response_headers(false), Action::Continue);
    assert_eq!(host.response_header_value(":status").as_deref(), Some("503"));
    assert_eq!(host.response_header_value(MODEL_FAILURE_HEADER).as_deref(), Some("401"));
}

/// The Vertex kind with its token from the metadata server (`credential.google_metadata`): once
/// a worker's fetch stored it, each attempt to Vertex carries it as a bearer.
#[test]
fn claude_on_vertex_carries_the_token_the_metadata_server_issued() {
    let with_metadata = CONFIG.replace(
        r#""credential": {"value": "ya29.vertex-token"}"#,
        r#""credential": {"google_metadata": {"cluster": "gcp_metadata"}}"#,
    );
    let config = kit::configured(&with_metadata);
    let host = MockHost::new();
    let mut fetcher = super::tokens::TokenFetcher::default();
    fetcher.tick(&host, &config.catalog, 1_000); // creates the record
    fetcher.tick(&host, &config.catalog, 1_100); // leases it and fetches
    let answer = br#"{"access_token":"ya29.from-metadata","expires_in":3600,"token_type":"Bearer"}"#;
    assert!(fetcher.answered(&host, 1, 200, answer, 1_200));
    host.state().now_ms = 1_300;
    let body = r#"{"model":"anthropic/claude","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}"#;
    let _stream = decide(&host, &config, "/v1/messages", body, ONLY_VERTEX);
    let _a = attempt(&host, &config, 1, "c_vertex");
    assert_eq!(host.request_header_value(":path"), Some(format!("{CLAUDE}:rawPredict")));
    assert_eq!(host.request_header_value("authorization").as_deref(), Some("Bearer ya29.from-metadata"));
    assert_eq!(host.request_header_value("x-api-key"), None);
}
