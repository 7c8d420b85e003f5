//! A `bedrock` provider's non-Anthropic model through the two filters (mock host): each
//! attempt sent to Converse / ConverseStream with the Converse body the decision filter stored,
//! its answer and event stream turned into Anthropic's, then into the caller's API.

use std::rc::Rc;

use serde_json::{json, Value};

use super::host::Action;
use super::kind_test_kit::{self as kit, attempt, json_of, sent_body};
use super::mock::MockHost;
use super::{Configured, Filter};
use crate::providers::bedrock::eventstream::event;

/// Llama 3.3 70B from DeepInfra (cheaper: tried first) and from Bedrock (a cross-region profile).
const CONFIG: &str = r#"{
  "providers": {
    "deepinfra": {"cluster": "c_deepinfra", "authority": "api.deepinfra.com",
                  "credential": {"value": "deepinfra-secret"}, "apis": {"openai": {}}},
    "amazon-bedrock": {"kind": "bedrock", "cluster": "c_bedrock",
                       "authority": "bedrock-runtime.us-east-1.amazonaws.com", "apis": {"anthropic": {}}}
  },
  "models": {"meta-llama/llama-3.3-70b-instruct": {"endpoints": [
    {"provider": "deepinfra", "upstream_model": "meta-llama/Llama-3.3-70B-Instruct", "pricing": {"prompt": 0.23, "completion": 0.40}},
    {"provider": "amazon-bedrock", "upstream_model": "us.meta.llama3-3-70b-instruct-v1:0",
     "pricing": {"prompt": 0.72, "completion": 0.72, "cached_prompt": 0.36}}
  ]}},
  "routing": {"default_policy": "price_weighted"}
}"#;

const ONLY_BEDROCK: &str = r#"{"only":["amazon-bedrock"]}"#;
const LLAMA_PATH: &str = "/model/us.meta.llama3-3-70b-instruct-v1%3A0";

fn configured() -> Rc<Configured> {
    kit::configured(CONFIG)
}

fn converse_answer(tool: bool) -> Value {
    let content = if tool {
        json!([{"toolUse": {"toolUseId": "tooluse_1", "name": "get_weather", "input": {"city": "Paris"}}}])
    } else {
        json!([{"text": "Hello from Converse"}])
    };
    json!({"output": {"message": {"role": "assistant", "content": content}},
           "stopReason": if tool { "tool_use" } else { "end_turn" },
           "usage": {"inputTokens": 1000, "outputTokens": 500, "totalTokens": 3500, "cacheReadInputTokens": 2000},
           "metrics": {"latencyMs": 100}})
}

fn converse_stream() -> Vec<u8> {
    [
        ("messageStart", json!({"role": "assistant"})),
        ("contentBlockDelta", json!({"contentBlockIndex": 0, "delta": {"text": "Hello"}})),
        ("contentBlockStop", json!({"contentBlockIndex": 0})),
        ("messageStop", json!({"stopReason": "end_turn"})),
        ("metadata", json!({"usage": {"inputTokens": 1000, "outputTokens": 500, "totalTokens": 1500}, "metrics": {"latencyMs": 9}})),
    ]
    .iter()
    .flat_map(|(n, p)| event(n, p.to_string().as_bytes()))
    .collect()
}

#[test]
fn an_openai_caller_reaches_llama_on_bedrock_converse_plain() {
    let config = configured();
    let host = MockHost::new();
    let body = r#"{"model":"meta-llama/llama-3.3-70b-instruct","max_tokens":64,"seed":3,"messages":[{"role":"user","content":"hi"}]}"#;
    let mut stream = kit::decide(&host, &config, "/v1/chat/completions", body, ONLY_BEDROCK, &[]);
    let mut a = attempt(&host, &config, 1, "c_bedrock");
    assert_eq!(host.request_header_value(":path"), Some(format!("{LLAMA_PATH}/converse")));
    assert_eq!(host.request_header_value("authorization"), None, "Envoy signs the attempt");
    assert_eq!(
        sent_body(&host),
        json!({"messages": [{"role": "user", "content": [{"text": "hi"}]}], "inferenceConfig": {"maxTokens": 64}})
    );
    let body = converse_answer(false).to_string();
    host.with_response_headers(&[
        (":status", "200"),
        ("content-type", "application/json"),
        ("content-length", &body.len().to_string()),
        ("x-amzn-requestid", "5e1b7c1a"),
    ]);
    assert_eq!(a.on_response_headers(false), Action::Continue);
    assert_eq!(host.response_header_value("content-length"), None, "the answer is rewritten");
    stream.on_response_headers(false);
    let warning = host.response_header_value("x-switchyard-warning").unwrap_or_default();
    assert!(warning.contains("dropped seed (no counterpart in the bedrock_converse API)"), "{warning}");
    assert!(!warning.contains("anthropic API"), "the Anthropic body was not sent: {warning}");
    let out = kit::feed_answer(&host, &mut a, &mut stream, body.as_bytes(), 17);
    let v = json_of(out.as_bytes());
    assert_eq!(v["choices"][0]["message"]["content"], "Hello from Converse", "{v}");
    assert_eq!(v["choices"][0]["finish_reason"], "stop", "{v}");
    assert_eq!(v["provider"], "amazon-bedrock", "{v}");
    assert_eq!(v["model"], "meta-llama/llama-3.3-70b-instruct", "{v}");
    assert_eq!(v["usage"]["prompt_tokens"], 3000, "{v}");
    // 1000 prompt at 0.72, 2000 cached at 0.36, 500 completion at 0.72 (USD per million).
    let cost = v["usage"]["cost"].as_f64().unwrap();
    assert!((cost - (1000.0 * 0.72 + 2000.0 * 0.36 + 500.0 * 0.72) / 1e6).abs() < 1e-9, "{v}");
}

#[test]
fn an_anthropic_caller_fails_over_to_converse_with_a_tool_call() {
    let config = configured();
    let host = MockHost::new();
    let body = r#"{"model":"meta-llama/llama-3.3-70b-instruct","max_tokens":64,"messages":[{"role":"user","content":"Weather in Paris?"}],
        "tools":[{"name":"get_weather","input_schema":{"type":"object","properties":{"city":{"type":"string"}}}}]}"#;
    let mut stream = kit::decide(&host, &config, "/v1/messages", body, r#"{"sort":"price"}"#, &[]);
    let mut first = attempt(&host, &config, 1, "c_deepinfra");
    assert_eq!(host.request_header_value(":path").as_deref(), Some("/v1/chat/completions"));
    host.with_response_headers(&[(":status", "429"), ("content-type", "application/json")]);
    assert_eq!(first.on_response_headers(false), Action::Continue);
    first.on_done();
    let mut second = attempt(&host, &config, 2, "c_bedrock");
    assert_eq!(host.request_header_value(":path"), Some(format!("{LLAMA_PATH}/converse")));
    assert_eq!(host.request_header_value("authorization"), None, "deepinfra's key is not sent to Bedrock");
    let sent = sent_body(&host);
    assert_eq!(sent["toolConfig"]["tools"][0]["toolSpec"]["name"], "get_weather", "{sent}");
    let body = converse_answer(true).to_string();
    host.with_response_headers(&[(":status", "200"), ("content-type", "application/json")]);
    assert_eq!(second.on_response_headers(false), Action::Continue);
    stream.on_response_headers(false);
    assert_eq!(
        host.response_header_value("x-switchyard-attempt-log").as_deref(),
        Some("deepinfra:429,amazon-bedrock:200")
    );
    let out = kit::feed_answer(&host, &mut second, &mut stream, body.as_bytes(), body.len());
    let v = json_of(out.as_bytes());
    assert_eq!(v["stop_reason"], "tool_use", "{v}");
    assert_eq!(
        v["content"][0],
        json!({"type": "tool_use", "id": "tooluse_1", "name": "get_weather", "input": {"city": "Paris"}})
    );
    assert_eq!(v["usage"]["cache_read_input_tokens"], 2000, "{v}");
    assert!(v["usage"]["cost"].as_f64().is_some_and(|c| c > 0.0), "{v}");
}

#[test]
fn a_google_caller_streams_from_converse_stream_with_its_usage() {
    let config = configured();
    let host = MockHost::new();
    let body = r#"{"contents":[{"role":"user","parts":[{"text":"hi"}]}]}"#;
    let path = "/v1beta/models/meta-llama/llama-3.3-70b-instruct:streamGenerateContent?alt=sse";
    let mut stream = kit::decide(&host, &config, path, body, ONLY_BEDROCK, &[]);
    let mut a = attempt(&host, &config, 1, "c_bedrock");
    assert_eq!(host.request_header_value(":path"), Some(format!("{LLAMA_PATH}/converse-stream")));
    assert_eq!(sent_body(&host), json!({"messages": [{"role": "user", "content": [{"text": "hi"}]}]}));
    host.with_response_headers(&[(":status", "200"), ("content-type", "application/vnd.amazon.eventstream")]);
    assert_eq!(a.on_response_headers(false), Action::Continue);
    assert_eq!(host.response_header_value("content-type").as_deref(), Some("text/event-stream"));
    stream.on_response_headers(false);
    let out = kit::feed_answer(&host, &mut a, &mut stream, &converse_stream(), 13);
    assert!(out.contains(r#""text":"Hello""#), "{out}");
    assert!(out.contains(r#""promptTokenCount":1000"#), "{out}");
    assert!(out.contains(r#""candidatesTokenCount":500"#), "{out}");
    assert!(host.state().refused_writes.is_empty(), "{:?}", host.state().refused_writes);
}

#[test]
fn a_request_converse_cannot_take_leaves_bedrock_out_of_the_plan() {
    let config = configured();
    let host = MockHost::new();
    // An image by URL: Converse takes bytes only. DeepInfra serves it; Bedrock is left out.
    let body = r#"{"model":"meta-llama/llama-3.3-70b-instruct","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"https://example.com/a.png"}}]}]}"#;
    let _stream =
        kit::decide(&host, &config, "/v1/chat/completions", body, r#"{"order":["amazon-bedrock","deepinfra"]}"#, &[]);
    let _a = attempt(&host, &config, 1, "c_deepinfra");
    assert!(host.prop(&["switchyard_body_converse"]).is_none());
}
