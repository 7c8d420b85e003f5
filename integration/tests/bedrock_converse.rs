//! Bedrock's non-Anthropic models (`kind: bedrock`, a model id that is not `anthropic.`) through
//! Converse and ConverseStream in real Envoy, against the mock's Bedrock: SigV4 recomputed, every
//! Converse body checked against botocore's request shapes (`mock/converse.rs`), streams as AWS
//! event streams with valid CRCs. alpha is an OpenAI-API provider of the same model, beta Bedrock
//! signed by Envoy for us-east-1. Runs on the Wasm build, and on the native build with
//! `SWITCHYARD_BUILD=native` (`make integration` does both).

mod common;

use common::{Stack, AWS_ENV};
use serde_json::{json, Value};
use switchyard_integration::mock::bedrock::ACCESS_KEY;
use switchyard_integration::mock::converse::TEXT;
use switchyard_integration::mock::{received_in_order, Received};

const LLAMA: &str = "us.meta.llama3-3-70b-instruct-v1:0";
const LLAMA_PATH: &str = "/model/us.meta.llama3-3-70b-instruct-v1%3A0";
const HOST: &str = "bedrock-runtime.us-east-1.amazonaws.com";

fn catalog() -> Value {
    json!({
        "providers": {
            "alpha": {"cluster": "c_alpha", "authority": "api.deepinfra.com", "apis": {"openai": {}},
                      "credential": {"value": "key-alpha"}},
            "beta": {"cluster": "c_beta", "authority": HOST, "kind": "bedrock", "apis": {"anthropic": {}}}
        },
        "models": {
            "cv/plain": {"endpoints": [{"provider": "beta", "upstream_model": LLAMA, "region": "us-east-1",
                "pricing": {"prompt": 0.72, "completion": 0.72}}]},
            // alpha is cheaper: tried first (sorted by price). One model per failover, so one
            // failure's statistics do not reorder the next.
            "cv/fo": failover_model(),
            "cv/fo-stream": failover_model()
        },
        "routing": {"default_policy": "price_weighted"}
    })
}

fn failover_model() -> Value {
    json!({"endpoints": [
        {"provider": "alpha", "upstream_model": "meta-llama/Llama-3.3-70B-Instruct", "pricing": {"prompt": 0.23, "completion": 0.40}},
        {"provider": "beta", "upstream_model": LLAMA, "region": "us-east-1", "pricing": {"prompt": 0.72, "completion": 0.72}}]})
}

fn stack() -> &'static Stack {
    static STACK: std::sync::OnceLock<Stack> = std::sync::OnceLock::new();
    STACK.get_or_init(|| {
        common::launch_with_env("bedrock-converse", catalog(), |cfg| cfg.per_try_idle_timeout_ms = 2_000, AWS_ENV)
    })
}

fn attempts(id: &str) -> Vec<(String, Received)> {
    received_in_order(&stack().providers, id)
}

/// The attempt reached Converse as AWS wants it: its path, signed by Envoy, a Converse body (the
/// mock refused it otherwise), and no key of anyone's.
fn assert_converse_attempt(r: &Received, stream: bool) -> Value {
    assert_eq!(r.path, format!("{LLAMA_PATH}/{}", if stream { "converse-stream" } else { "converse" }));
    let auth = r.header("authorization").unwrap_or_default();
    assert!(auth.starts_with(&format!("AWS4-HMAC-SHA256 Credential={ACCESS_KEY}/")), "{auth}");
    assert!(r.headers.iter().all(|(_, v)| !v.contains("caller-key") && !v.contains("key-alpha")));
    let body = r.json();
    assert!(body.get("messages").is_some() && body.get("model").is_none() && body.get("stream").is_none(), "{body}");
    body
}

fn sse_data(text: &str) -> Vec<Value> {
    text.replace("\r\n", "\n")
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .map(|d| serde_json::from_str(d).unwrap_or_else(|_| Value::String(d.to_string())))
        .collect()
}

fn weather_tool_openai() -> Value {
    json!([{"type": "function", "function": {"name": "get_weather", "description": "Weather by city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}])
}

#[tokio::test]
async fn an_openai_caller_reaches_llama_on_converse_plain_and_streamed() {
    let body = json!({"model": "cv/plain", "max_tokens": 32, "temperature": 0.3,
        "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}]});
    let r = stack().openai("cv-plain", &[], body).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let v = r.json();
    assert_eq!(v["choices"][0]["message"]["content"], TEXT, "{v}");
    assert_eq!(v["choices"][0]["finish_reason"], "stop", "{v}");
    assert_eq!((v["provider"].as_str(), v["model"].as_str()), (Some("beta"), Some("cv/plain")), "{v}");
    assert_eq!((v["usage"]["prompt_tokens"].as_u64(), v["usage"]["completion_tokens"].as_u64()), (Some(12), Some(3)));
    assert!(v["usage"]["cost"].as_f64().is_some_and(|c| c > 0.0), "{v}");
    let got = attempts("cv-plain");
    assert_eq!(got.len(), 1);
    let sent = assert_converse_attempt(&got[0].1, false);
    assert_eq!(sent["system"], json!([{"text": "Be brief."}]), "{sent}");
    assert_eq!(sent["inferenceConfig"], json!({"maxTokens": 32, "temperature": 0.3}), "{sent}");
    // Streamed: ConverseStream's event stream reaches the caller as OpenAI chunks with usage.
    let body = json!({"model": "cv/plain", "stream": true, "messages": [{"role": "user", "content": "hi"}]});
    let r = stack().openai("cv-stream", &[], body).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let text = r.text();
    let chunks = sse_data(&text);
    let said: String = chunks.iter().filter_map(|c| c["choices"][0]["delta"]["content"].as_str()).collect();
    assert_eq!(said, TEXT, "{text}");
    let usage = chunks.iter().find(|c| c["usage"].is_object()).map(|c| c["usage"].clone()).unwrap_or_default();
    assert_eq!(usage["prompt_tokens"], 12, "{text}");
    assert!(usage["cost"].as_f64().is_some_and(|c| c > 0.0), "{text}");
    assert_eq!(chunks.last(), Some(&Value::String("[DONE]".into())), "{text}");
    assert_converse_attempt(&attempts("cv-stream")[0].1, true);
}

#[tokio::test]
async fn a_tool_call_from_converse_reaches_openai_and_anthropic_callers() {
    let body = json!({"model": "cv/plain", "messages": [{"role": "user", "content": "Weather in Paris?"}],
        "tools": weather_tool_openai(), "tool_choice": "required"});
    let r = stack().openai("cv-tool", &[], body).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let v = r.json();
    let call = &v["choices"][0]["message"]["tool_calls"][0];
    assert_eq!(call["function"]["name"], "get_weather", "{v}");
    assert_eq!(
        serde_json::from_str::<Value>(call["function"]["arguments"].as_str().unwrap_or("")).ok(),
        Some(json!({"city": "Paris"}))
    );
    assert_eq!(v["choices"][0]["finish_reason"], "tool_calls", "{v}");
    let sent = assert_converse_attempt(&attempts("cv-tool")[0].1, false);
    assert_eq!(sent["toolConfig"]["toolChoice"], json!({"any": {}}), "{sent}");
    // The call answered: the tool's result goes back as a toolResult, and the model speaks.
    let id = call["id"].as_str().unwrap_or_default();
    let body = json!({"model": "cv/plain", "tools": weather_tool_openai(), "messages": [
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": null, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": id, "content": "18C"}]});
    let r = stack().openai("cv-tool-result", &[], body).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["choices"][0]["message"]["content"], TEXT);
    let sent = assert_converse_attempt(&attempts("cv-tool-result")[0].1, false);
    assert_eq!(sent["messages"][2]["content"][0]["toolResult"]["toolUseId"], id, "{sent}");
    // An Anthropic caller, streamed: tool_use with its input_json_delta pieces.
    let body = json!({"model": "cv/plain", "max_tokens": 64, "stream": true,
        "messages": [{"role": "user", "content": "Weather in Paris?"}],
        "tools": [{"name": "get_weather", "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}]});
    let r = stack().anthropic("cv-tool-stream", &[], body).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let text = r.text();
    let events = sse_data(&text);
    assert!(
        events.iter().any(|e| e["content_block"]["type"] == "tool_use" && e["content_block"]["name"] == "get_weather"),
        "{text}"
    );
    let args: String = events.iter().filter_map(|e| e["delta"]["partial_json"].as_str()).collect();
    assert_eq!(serde_json::from_str::<Value>(&args).ok(), Some(json!({"city": "Paris"})), "{text}");
    assert!(events.iter().any(|e| e["delta"]["stop_reason"] == "tool_use"), "{text}");
    assert!(text.contains("event: message_stop"), "{text}");
    assert_converse_attempt(&attempts("cv-tool-stream")[0].1, true);
}

#[tokio::test]
async fn a_failing_provider_fails_over_to_converse_plain_and_streamed() {
    for (model, stream) in [("cv/fo", false), ("cv/fo-stream", true)] {
        let id = format!("cv-fo-{stream}");
        let body = json!({"model": model, "max_tokens": 32, "stream": stream, "messages": [{"role": "user", "content": "hi"}],
            "provider": {"sort": "price"}});
        let r = stack().anthropic(&id, &[("x-mock-behavior", "alpha=503")], body).await;
        assert_eq!(r.status, 200, "{}", r.text());
        assert_eq!(r.header("x-switchyard-provider"), Some("beta"));
        assert_eq!(r.header("x-switchyard-attempt-log"), Some("alpha:503,beta:200"));
        let got = attempts(&id);
        let who: Vec<&str> = got.iter().map(|(p, _)| p.as_str()).collect();
        assert_eq!(who, ["alpha", "beta"]);
        assert_eq!(got[0].1.path, "/v1/chat/completions");
        assert_converse_attempt(&got[1].1, stream);
        let text = r.text();
        if stream {
            let said: String = sse_data(&text).iter().filter_map(|e| e["delta"]["text"].as_str()).collect();
            assert_eq!(said, TEXT, "{text}");
            assert!(text.contains("\"cost\":"), "the usage is priced: {text}");
        } else {
            let v = r.json();
            assert_eq!(v["content"][0]["text"], TEXT, "{v}");
            assert!(v["usage"]["cost"].as_f64().is_some_and(|c| c > 0.0), "{v}");
        }
    }
}

#[tokio::test]
async fn converse_errors_are_classified_and_a_stream_exception_reaches_the_caller() {
    // Throttled by Bedrock: a 429 to the caller in its shape (only Bedrock serves cv/plain).
    let body = json!({"model": "cv/plain", "messages": [{"role": "user", "content": "hi"}]});
    let r = stack().openai("cv-429", &[("x-mock-behavior", "beta=429")], body).await;
    assert_eq!(r.status, 429, "{}", r.text());
    // An exception inside ConverseStream: an error event, and the stream ends.
    let body =
        json!({"model": "cv/plain", "max_tokens": 32, "stream": true, "messages": [{"role": "user", "content": "hi"}]});
    let r = stack().anthropic("cv-sserror", &[("x-mock-behavior", "beta=sserror1")], body).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let text = r.text();
    assert!(text.contains("event: error") && text.contains("rate_limit_error"), "{text}");
    assert!(text.contains("throttlingException"), "{text}");
}

#[tokio::test]
async fn a_dropped_field_is_named_in_the_warning() {
    let body = json!({"model": "cv/plain", "seed": 7, "messages": [{"role": "user", "content": "hi"}]});
    let r = stack().openai("cv-warn", &[], body).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let w = r.header("x-switchyard-warning").unwrap_or_default();
    assert!(w.contains("dropped seed (no counterpart in the bedrock_converse API)"), "{w}");
}
