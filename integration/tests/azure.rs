//! Azure OpenAI (`kind: azure`, `docs/azure.md`) in real Envoy, against the mock's Azure, which
//! is as strict as Azure (`mock/azure.rs`: only its `api-key`, `api-version` on the deployments
//! paths, the prompt filter chunk first in every stream, content-filter refusals on request).
//! alpha is OpenAI itself, beta an Azure resource (deployments paths), gamma an Azure resource
//! reached with a key it refuses, delta an Azure resource on the v1 API.

mod common;

use common::{launch, Stack};
use serde_json::{json, Value};
use switchyard_integration::mock::{received_in_order, Behavior, Received, AZURE_KEY};

const API_VERSION: &str = "2024-10-21";

fn catalog() -> Value {
    let mut c = json!({
        "providers": {
            "alpha": {"cluster": "c_alpha", "authority": "alpha.example", "credential": {"value": "key-alpha"}},
            "beta": {"cluster": "c_beta", "authority": "beta.openai.azure.com", "kind": "azure",
                     "kind_options": {"api_version": API_VERSION}, "credential": {"value": AZURE_KEY}},
            "gamma": {"cluster": "c_gamma", "authority": "gamma.openai.azure.com", "kind": "azure",
                      "credential": {"value": "an-expired-azure-key"}},
            "delta": {"cluster": "c_delta", "authority": "delta.openai.azure.com", "kind": "azure",
                      "kind_options": {"path": "v1"}, "credential": {"value": AZURE_KEY}}
        },
        "models": {},
        "routing": {"default_policy": "price_weighted"}
    });
    // One model per test (live statistics stay apart); the cheaper endpoint is tried first.
    let models: [(&str, &[(&str, f64)]); 9] = [
        ("az/gpt", &[("beta", 2.0)]),
        ("az/gpt-stream", &[("beta", 2.0)]),
        ("az/gpt-tools", &[("beta", 2.0)]),
        ("az/anthropic", &[("beta", 2.0)]),
        ("az/v1", &[("delta", 2.0)]),
        ("az/fo", &[("alpha", 1.0), ("beta", 2.0)]),
        ("az/fo-stream", &[("alpha", 1.0), ("beta", 2.0)]),
        ("az/bad-key", &[("gamma", 1.0), ("beta", 2.0)]),
        ("az/filter", &[("beta", 1.0), ("alpha", 2.0)]),
    ];
    for (model, endpoints) in models {
        let eps: Vec<Value> = endpoints
            .iter()
            .map(|(p, price)| {
                json!({"provider": p, "upstream_model": format!("{p}-{}", model.replace('/', "-")),
                       "pricing": {"prompt": price, "completion": price * 4.0}, "region": "swedencentral"})
            })
            .collect();
        c["models"][model] = json!({"endpoints": eps});
    }
    c
}

fn stack() -> &'static Stack {
    static STACK: std::sync::OnceLock<Stack> = std::sync::OnceLock::new();
    STACK.get_or_init(|| {
        let s = launch("azure", catalog(), |cfg| cfg.per_try_idle_timeout_ms = 2_000);
        // beta, gamma and delta are Azure resources (the v1 path is Azure's too).
        for p in ["beta", "gamma", "delta"] {
            s.provider(p).set_behavior(Behavior { azure: true, ..Behavior::default() });
        }
        s
    })
}

fn msg() -> Value {
    json!([{"role": "user", "content": "hello"}])
}

/// (provider, request) of this test's attempts, in arrival order.
fn attempts(id: &str) -> Vec<(String, Received)> {
    received_in_order(&stack().providers, id)
}

/// The attempt reached the Azure deployment as Azure wants it: the deployments path with the
/// api-version, the bare key in `api-key` and nothing else secret.
fn assert_azure_attempt(r: &Received, deployment: &str) {
    assert_eq!(r.path, format!("/openai/deployments/{deployment}/chat/completions?api-version={API_VERSION}"));
    assert_eq!(r.header("api-key"), Some(AZURE_KEY));
    assert_eq!(r.header("authorization"), None, "no Authorization reaches Azure");
    assert_eq!(r.header("x-api-key"), None);
    assert!(r.headers.iter().all(|(_, v)| !v.contains("caller-key") && !v.contains("key-alpha")), "{:?}", r.headers);
    assert_eq!(r.json()["model"], deployment);
}

/// `data:` payloads of an SSE body (`[DONE]` as a string).
fn data(text: &str) -> Vec<Value> {
    text.replace("\r\n", "\n")
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .map(|d| serde_json::from_str(d).unwrap_or_else(|_| Value::String(d.to_string())))
        .collect()
}

#[tokio::test]
async fn an_openai_caller_reaches_gpt_on_an_azure_deployment() {
    let r = stack()
        .openai("az-plain", &[], json!({"model": "az/gpt", "messages": msg(), "provider": {"sort": "price"}}))
        .await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.header("x-switchyard-provider"), Some("beta"));
    let v = r.json();
    assert_eq!((v["model"].as_str(), v["provider"].as_str()), (Some("az/gpt"), Some("beta")));
    assert!(v["usage"]["cost"].as_f64().is_some_and(|c| c > 0.0), "{v}");
    let got = attempts("az-plain");
    assert_eq!(got.len(), 1);
    assert_azure_attempt(&got[0].1, "beta-az-gpt");
    // The v1 API: no api-version, the deployment as the body's model.
    let r = stack().openai("az-v1", &[], json!({"model": "az/v1", "messages": msg()})).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let got = attempts("az-v1");
    assert_eq!((got[0].1.path.as_str(), got[0].1.header("api-key")), ("/openai/v1/chat/completions", Some(AZURE_KEY)));
    assert_eq!(got[0].1.json()["model"], "delta-az-v1");
}

#[tokio::test]
async fn a_stream_from_azure_reaches_the_caller_without_its_prompt_filter_chunk() {
    let body = json!({"model": "az/gpt-stream", "messages": msg(), "stream": true});
    let r = stack().openai("az-stream", &[("x-mock-behavior", "beta=chunks3")], body).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let text = r.text();
    assert!(!text.contains("prompt_filter_results"), "{text}");
    let chunks = data(&text);
    assert_eq!(chunks.last(), Some(&Value::String("[DONE]".into())), "{text}");
    let objects: Vec<&Value> = chunks.iter().filter(|c| c.is_object()).collect();
    // Every chunk but the usage chunk has a choice; the usage chunk is priced.
    let (usage, content): (Vec<&Value>, Vec<&Value>) = objects.iter().partition(|c| c["usage"].is_object());
    assert!(content.iter().all(|c| c["choices"][0].is_object() && c["model"] == "az/gpt-stream"), "{text}");
    assert_eq!(usage.len(), 1, "{text}");
    assert!(usage[0]["usage"]["cost"].as_f64().is_some_and(|c| c > 0.0), "{text}");
    let said: String = content.iter().filter_map(|c| c["choices"][0]["delta"]["content"].as_str()).collect();
    assert_eq!(said, "tok0 tok1 tok2 ");
    assert_azure_attempt(&attempts("az-stream")[0].1, "beta-az-gpt-stream");
    assert_eq!(attempts("az-stream")[0].1.json()["stream_options"]["include_usage"], true);
}

#[tokio::test]
async fn a_tool_call_on_azure_plain_and_streamed() {
    let tools = json!([{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]);
    let body = json!({"model": "az/gpt-tools", "messages": msg(), "tools": tools});
    let r = stack().openai("az-tool", &[("x-mock-behavior", "beta=tool")], body.clone()).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let call = &r.json()["choices"][0]["message"]["tool_calls"][0];
    assert_eq!(
        (call["function"]["name"].as_str(), call["function"]["arguments"].as_str()),
        (Some("get_weather"), Some(r#"{"city":"Paris"}"#))
    );
    let mut streamed = body;
    streamed["stream"] = json!(true);
    let r = stack().openai("az-tool-s", &[("x-mock-behavior", "beta=tool")], streamed).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let args: String = data(&r.text())
        .iter()
        .filter_map(|c| c["choices"][0]["delta"]["tool_calls"][0]["function"]["arguments"].as_str().map(str::to_string))
        .collect();
    assert_eq!(args, r#"{"city":"Paris"}"#, "{}", r.text());
    assert_azure_attempt(&attempts("az-tool-s")[0].1, "beta-az-gpt-tools");
}

#[tokio::test]
async fn an_anthropic_caller_reaches_gpt_on_azure_translated() {
    let body = json!({"model": "az/anthropic", "max_tokens": 64, "messages": msg()});
    let r = stack().anthropic("az-an", &[], body.clone()).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let v = r.json();
    assert_eq!((v["type"].as_str(), v["role"].as_str()), (Some("message"), Some("assistant")), "{v}");
    assert_eq!(v["content"][0]["text"], "Hello from beta");
    let got = attempts("az-an");
    assert_azure_attempt(&got[0].1, "beta-az-anthropic");
    assert_eq!(got[0].1.header("anthropic-version"), None);
    // Streamed: message_start carries the answer's id, never the prompt filter chunk's empty one.
    let mut streamed = body.clone();
    streamed["stream"] = json!(true);
    let r = stack().anthropic("az-an-s", &[], streamed).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let events = data(&r.text());
    let start = events.iter().find(|e| e["type"] == "message_start").expect("message_start");
    assert!(start["message"]["id"].as_str().is_some_and(|id| id.len() > 4), "{start}");
    assert_eq!(events.last().map(|e| e["type"].clone()), Some(json!("message_stop")), "{}", r.text());
    let said: String = events.iter().filter_map(|e| e["delta"]["text"].as_str()).collect();
    assert_eq!(said, "tok0 tok1 tok2 ");
    // A tool call, translated.
    let mut tools = body;
    tools["tools"] = json!([{"name": "get_weather", "input_schema": {"type": "object"}}]);
    let r = stack().anthropic("az-an-t", &[("x-mock-behavior", "beta=tool")], tools).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let block = &r.json()["content"][0];
    assert_eq!(
        (block["type"].as_str(), block["name"].as_str()),
        (Some("tool_use"), Some("get_weather")),
        "{}",
        r.text()
    );
    assert_eq!(block["input"], json!({"city": "Paris"}));
}

#[tokio::test]
async fn gpt_fails_over_from_openai_to_azure_plain_and_streamed() {
    let body = json!({"model": "az/fo", "messages": msg(), "provider": {"sort": "price"}});
    let r = stack().openai("az-fo", &[("x-mock-behavior", "alpha=503")], body).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!((r.header("x-switchyard-provider"), r.header("x-switchyard-attempts")), (Some("beta"), Some("2")));
    let got = attempts("az-fo");
    assert_eq!(got.iter().map(|(p, _)| p.as_str()).collect::<Vec<_>>(), ["alpha", "beta"]);
    assert_eq!(got[0].1.header("authorization"), Some("Bearer key-alpha"));
    assert_eq!(got[0].1.header("api-key"), None, "Azure's key never reaches OpenAI");
    assert_azure_attempt(&got[1].1, "beta-az-fo");
    let body = json!({"model": "az/fo-stream", "messages": msg(), "stream": true, "provider": {"sort": "price"}});
    let r = stack().openai("az-fo-s", &[("x-mock-behavior", "alpha=429/3")], body).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.header("x-switchyard-provider"), Some("beta"));
    assert!(!r.text().contains("prompt_filter_results"), "{}", r.text());
    assert_eq!(data(&r.text()).last(), Some(&Value::String("[DONE]".into())));
    assert_azure_attempt(&attempts("az-fo-s")[1].1, "beta-az-fo-stream");
}

#[tokio::test]
async fn a_key_azure_refuses_fails_over_to_the_next_deployment() {
    let body = json!({"model": "az/bad-key", "messages": msg(), "provider": {"sort": "price"}});
    let r = stack().openai("az-key", &[], body).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!((r.header("x-switchyard-provider"), r.header("x-switchyard-attempts")), (Some("beta"), Some("2")));
    let got = attempts("az-key");
    assert_eq!(got.iter().map(|(p, _)| p.as_str()).collect::<Vec<_>>(), ["gamma", "beta"]);
    assert_eq!(got[0].1.header("api-key"), Some("an-expired-azure-key"));
    assert_azure_attempt(&got[1].1, "beta-az-bad-key");
    let log = r.header("x-switchyard-attempt-log").unwrap_or_default();
    assert!(log.contains("gamma") && log.contains("401"), "{log}");
}

#[tokio::test]
async fn a_content_filter_refusal_is_the_answer_in_the_callers_shape() {
    // The prompt refused: Azure's 400, passed on, never failed over to alpha.
    let body = json!({"model": "az/filter", "messages": msg(), "provider": {"sort": "price"}});
    let r = stack().openai("az-cf", &[("x-mock-behavior", "beta=filter")], body.clone()).await;
    assert_eq!(r.status, 400, "{}", r.text());
    assert_eq!(r.json()["error"]["code"], "content_filter");
    assert_eq!(attempts("az-cf").iter().map(|(p, _)| p.as_str()).collect::<Vec<_>>(), ["beta"]);
    let an = json!({"model": "az/filter", "max_tokens": 16, "messages": msg(), "provider": {"sort": "price"}});
    let r = stack().anthropic("az-cf-an", &[("x-mock-behavior", "beta=filter")], an.clone()).await;
    assert_eq!(r.status, 400, "{}", r.text());
    assert_eq!(r.json()["type"], "error", "{}", r.text());
    assert!(
        r.json()["error"]["message"].as_str().is_some_and(|m| m.contains("content management policy")),
        "{}",
        r.text()
    );
    // The answer cut by the output filter: finish_reason content_filter, Anthropic's refusal.
    let mut streamed = body;
    streamed["stream"] = json!(true);
    let r = stack().openai("az-cf-s", &[("x-mock-behavior", "beta=filterout")], streamed).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let finishes: Vec<Value> = data(&r.text()).iter().map(|c| c["choices"][0]["finish_reason"].clone()).collect();
    assert!(finishes.contains(&json!("content_filter")), "{}", r.text());
    let mut an_streamed = an;
    an_streamed["stream"] = json!(true);
    let r = stack().anthropic("az-cf-an-s", &[("x-mock-behavior", "beta=filterout")], an_streamed).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(r.text().contains(r#""stop_reason":"refusal""#), "{}", r.text());
    assert_eq!(attempts("az-cf-an-s").len(), 1);
}
