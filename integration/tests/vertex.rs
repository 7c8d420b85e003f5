//! Claude and Gemini on Google Vertex AI (`kind: vertex`, `docs/vertex.md`) in real Envoy, against
//! the mock's Vertex, which is as strict as Vertex (`mock/vertex.rs`: only its accepted access
//! tokens as `authorization: Bearer`, its project and the host's location, Claude's body with
//! `anthropic_version: vertex-2023-10-16` and no `model`, every Gemini turn with a role, Vertex's
//! Google-shaped errors). alpha is Anthropic itself, beta Vertex in us-east5 (Claude), gamma
//! Vertex reached with a token it no longer accepts, delta Vertex's global endpoint (Gemini).
//! Runs on the Wasm build, and on the native build with `SWITCHYARD_BUILD=native`.

mod common;

use common::{launch, Stack};
use serde_json::{json, Value};
use switchyard_integration::client::Reply;
use switchyard_integration::mock::vertex::{PROJECT, TOKEN};
use switchyard_integration::mock::{received_in_order, Received};

const CLAUDE_ID: &str = "claude-sonnet-4-5@20250929";
const EXPIRED: &str = "ya29.an-expired-vertex-token";

fn catalog() -> Value {
    let vertex = |cluster: &str, location: &str, host: &str, token: &str| {
        json!({"cluster": cluster, "authority": host, "kind": "vertex",
               "kind_options": {"project": PROJECT, "location": location},
               "credential": {"value": token}, "apis": {"anthropic": {}, "google": {}}})
    };
    let mut c = json!({
        "providers": {
            "alpha": {"cluster": "c_alpha", "authority": "api.anthropic.com", "apis": {"anthropic": {}},
                      "credential": {"header": "x-api-key", "prefix": "", "value": "key-alpha"}},
            "beta": vertex("c_beta", "us-east5", "us-east5-aiplatform.googleapis.com", TOKEN),
            "gamma": vertex("c_gamma", "us-east5", "us-east5-aiplatform.googleapis.com", EXPIRED),
            "delta": vertex("c_delta", "global", "aiplatform.googleapis.com", TOKEN)
        },
        "models": {},
        "routing": {"default_policy": "price_weighted"}
    });
    // One model per test (live statistics and cool-downs stay apart); the cheaper endpoint is
    // tried first.
    let claude: [(&str, &[(&str, f64)]); 9] = [
        ("vx/claude", &[("beta", 3.0)]),
        ("vx/claude-tools", &[("beta", 3.0)]),
        ("vx/fo-529", &[("alpha", 3.0), ("beta", 3.01)]),
        ("vx/fo-529-s", &[("alpha", 3.0), ("beta", 3.01)]),
        ("vx/fo-429", &[("alpha", 3.0), ("beta", 3.01)]),
        ("vx/fo-429-s", &[("alpha", 3.0), ("beta", 3.01)]),
        ("vx/expired", &[("gamma", 3.0), ("beta", 3.01)]),
        ("vx/expired-only", &[("gamma", 3.0)]),
        ("vx/throttled", &[("beta", 3.0), ("alpha", 3.01)]),
    ];
    for (model, endpoints) in claude {
        let eps: Vec<Value> = endpoints
            .iter()
            .map(|(p, price)| {
                let upstream = if *p == "alpha" { "claude-sonnet-4-5" } else { CLAUDE_ID };
                json!({"provider": p, "upstream_model": upstream, "apis": ["anthropic"],
                       "pricing": {"prompt": price, "completion": 15.0}})
            })
            .collect();
        c["models"][model] = json!({"endpoints": eps});
    }
    for model in ["vx/gemini", "vx/gemini-tools", "vx/gemini-429"] {
        c["models"][model] = json!({"endpoints": [{"provider": "delta", "upstream_model": "gemini-2.5-pro",
            "apis": ["google"], "pricing": {"prompt": 1.25, "completion": 10.0}}]});
    }
    c
}

fn stack() -> &'static Stack {
    static STACK: std::sync::OnceLock<Stack> = std::sync::OnceLock::new();
    STACK.get_or_init(|| launch("vertex", catalog(), |cfg| cfg.per_try_idle_timeout_ms = 2_000))
}

async fn google(id: &str, model: &str, stream: bool, extra: &[(&str, &str)], body: Value) -> Reply {
    let mut h = vec![("x-goog-api-key", "caller-key")];
    h.extend_from_slice(extra);
    let path = if stream {
        format!("/v1beta/models/{model}:streamGenerateContent?alt=sse")
    } else {
        format!("/v1beta/models/{model}:generateContent")
    };
    stack().post(&path, id, &h, body).await
}

fn attempts(id: &str) -> Vec<(String, Received)> {
    received_in_order(&stack().providers, id)
}

fn who(id: &str) -> Vec<String> {
    attempts(id).into_iter().map(|(p, _)| p).collect()
}

/// Nothing secret but Vertex's own token reached Vertex.
fn assert_only_the_token(r: &Received, token: &str) {
    assert_eq!(r.header("authorization"), Some(format!("Bearer {token}").as_str()));
    assert_eq!(r.header("x-api-key"), None);
    assert_eq!(r.header("x-goog-api-key"), None);
    assert!(r.headers.iter().all(|(_, v)| !v.contains("caller-key") && !v.contains("key-alpha")), "{:?}", r.headers);
}

/// The attempt reached Claude on Vertex as Vertex wants it.
fn assert_claude_attempt(r: &Received, stream: bool) {
    let method = if stream { "streamRawPredict" } else { "rawPredict" };
    let want = format!("/v1/projects/{PROJECT}/locations/us-east5/publishers/anthropic/models/{CLAUDE_ID}:{method}");
    assert_eq!(r.path, want);
    assert_only_the_token(r, TOKEN);
    let body = r.json();
    assert_eq!(body["anthropic_version"], "vertex-2023-10-16", "{body}");
    assert!(body.get("model").is_none(), "{body}");
    assert_eq!(body["stream"].as_bool().unwrap_or(false), stream, "{body}");
}

/// The attempt reached Gemini on Vertex's global endpoint.
fn assert_gemini_attempt(r: &Received, stream: bool) {
    let method = if stream { "streamGenerateContent?alt=sse" } else { "generateContent" };
    let want = format!("/v1/projects/{PROJECT}/locations/global/publishers/google/models/gemini-2.5-pro:{method}");
    assert_eq!(r.path, want);
    assert_only_the_token(r, TOKEN);
    let body = r.json();
    let contents = body["contents"].as_array().cloned().unwrap_or_default();
    assert!(!contents.is_empty() && contents.iter().all(|c| c["role"] == "user" || c["role"] == "model"), "{body}");
}

fn data(text: &str) -> Vec<Value> {
    text.replace("\r\n", "\n")
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .map(|d| serde_json::from_str(d).unwrap_or_else(|_| Value::String(d.to_string())))
        .collect()
}

fn msg() -> Value {
    json!([{"role": "user", "content": "hello"}])
}

fn gemini_body() -> Value {
    json!({"contents": [{"role": "user", "parts": [{"text": "hello"}]}]})
}

#[tokio::test]
async fn every_caller_reaches_claude_on_vertex_plain_and_streamed() {
    // OpenAI.
    let r = stack().openai("vx-oa", &[], json!({"model": "vx/claude", "max_tokens": 32, "messages": msg()})).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let v = r.json();
    assert_eq!(v["choices"][0]["message"]["content"], "Hello from beta", "{v}");
    assert_eq!(v["provider"], "beta");
    assert!(v["usage"]["cost"].as_f64().is_some_and(|c| c > 0.0), "{v}");
    assert_claude_attempt(&attempts("vx-oa")[0].1, false);
    let body = json!({"model": "vx/claude", "max_tokens": 32, "stream": true, "messages": msg()});
    let r = stack().openai("vx-oa-s", &[], body).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let chunks = data(&r.text());
    let said: String = chunks.iter().filter_map(|c| c["choices"][0]["delta"]["content"].as_str()).collect();
    assert_eq!(said, "tok0 tok1 tok2 ", "{}", r.text());
    assert_eq!(chunks.last(), Some(&Value::String("[DONE]".into())));
    assert_claude_attempt(&attempts("vx-oa-s")[0].1, true);
    // Anthropic: its own stream, passed on.
    let r = stack().anthropic("vx-an", &[], json!({"model": "vx/claude", "max_tokens": 32, "messages": msg()})).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["content"][0]["text"], "Hello from beta");
    assert_claude_attempt(&attempts("vx-an")[0].1, false);
    let body = json!({"model": "vx/claude", "max_tokens": 32, "stream": true, "messages": msg()});
    let r = stack().anthropic("vx-an-s", &[], body).await;
    let text = r.text();
    assert!(text.contains("event: message_start") && text.contains("event: message_stop"), "{text}");
    assert_claude_attempt(&attempts("vx-an-s")[0].1, true);
    // Google, translated.
    let r = google("vx-go", "vx/claude", false, &[], gemini_body()).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["candidates"][0]["content"]["parts"][0]["text"], "Hello from beta", "{}", r.text());
    assert_claude_attempt(&attempts("vx-go")[0].1, false);
    let r = google("vx-go-s", "vx/claude", true, &[], gemini_body()).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let said: String =
        data(&r.text()).iter().filter_map(|c| c["candidates"][0]["content"]["parts"][0]["text"].as_str()).collect();
    assert_eq!(said, "tok0 tok1 tok2 ", "{}", r.text());
    assert_claude_attempt(&attempts("vx-go-s")[0].1, true);
}

#[tokio::test]
async fn every_caller_reaches_gemini_on_vertex_plain_and_streamed() {
    let r = stack().openai("vx-g-oa", &[], json!({"model": "vx/gemini", "messages": msg()})).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let v = r.json();
    assert_eq!(v["choices"][0]["message"]["content"], "Hello from delta", "{v}");
    assert!(v["usage"]["cost"].as_f64().is_some_and(|c| c > 0.0), "{v}");
    assert_gemini_attempt(&attempts("vx-g-oa")[0].1, false);
    let r = stack().openai("vx-g-oa-s", &[], json!({"model": "vx/gemini", "stream": true, "messages": msg()})).await;
    let said: String = data(&r.text()).iter().filter_map(|c| c["choices"][0]["delta"]["content"].as_str()).collect();
    assert_eq!(said, "tok0 tok1 tok2 ", "{}", r.text());
    assert_gemini_attempt(&attempts("vx-g-oa-s")[0].1, true);
    let r = stack().anthropic("vx-g-an", &[], json!({"model": "vx/gemini", "max_tokens": 32, "messages": msg()})).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["content"][0]["text"], "Hello from delta");
    assert_gemini_attempt(&attempts("vx-g-an")[0].1, false);
    let body = json!({"model": "vx/gemini", "max_tokens": 32, "stream": true, "messages": msg()});
    let r = stack().anthropic("vx-g-an-s", &[], body).await;
    assert!(r.text().contains("event: message_stop"), "{}", r.text());
    assert_gemini_attempt(&attempts("vx-g-an-s")[0].1, true);
    // A Google caller: its own body, the usage priced.
    let r = google("vx-g-go", "vx/gemini", false, &[], gemini_body()).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["candidates"][0]["content"]["parts"][0]["text"], "Hello from delta");
    let got = attempts("vx-g-go");
    assert_gemini_attempt(&got[0].1, false);
    assert_eq!(got[0].1.json(), gemini_body(), "a Google caller's body reaches Vertex as it was sent");
    let r = google("vx-g-go-s", "vx/gemini", true, &[], gemini_body()).await;
    let chunks = data(&r.text());
    assert!(chunks.iter().any(|c| c["usageMetadata"]["promptTokenCount"].is_number()), "{}", r.text());
    assert_gemini_attempt(&attempts("vx-g-go-s")[0].1, true);
}

#[tokio::test]
async fn tool_calls_reach_the_caller_from_claude_and_gemini_on_vertex() {
    let tools = json!([{"type": "function", "function": {"name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}]);
    for (model, id, who) in [("vx/claude-tools", "vx-tool-c", "beta"), ("vx/gemini-tools", "vx-tool-g", "delta")] {
        let behavior = format!("{who}=tool");
        let body = json!({"model": model, "max_tokens": 32, "messages": msg(), "tools": tools});
        let r = stack().openai(id, &[("x-mock-behavior", &behavior)], body.clone()).await;
        assert_eq!(r.status, 200, "{id}: {}", r.text());
        let call = &r.json()["choices"][0]["message"]["tool_calls"][0];
        assert_eq!(call["function"]["name"], "get_weather", "{id}: {}", r.text());
        let args: Value = serde_json::from_str(call["function"]["arguments"].as_str().unwrap_or("")).unwrap();
        assert_eq!(args, json!({"city": "Paris"}), "{id}");
        let mut streamed = body;
        streamed["stream"] = json!(true);
        let sid = format!("{id}-s");
        let r = stack().openai(&sid, &[("x-mock-behavior", &behavior)], streamed).await;
        let args: String = data(&r.text())
            .iter()
            .filter_map(|c| {
                c["choices"][0]["delta"]["tool_calls"][0]["function"]["arguments"].as_str().map(str::to_string)
            })
            .collect();
        assert_eq!(serde_json::from_str::<Value>(&args).ok(), Some(json!({"city": "Paris"})), "{sid}: {}", r.text());
        let sent = attempts(id)[0].1.json();
        assert!(sent["tools"].is_array(), "{id}: the tools reached Vertex: {sent}");
    }
}

#[tokio::test]
async fn an_anthropic_caller_fails_over_from_anthropic_to_vertex_on_529_and_429() {
    for (model, fault, stream) in [
        ("vx/fo-529", "alpha=529", false),
        ("vx/fo-529-s", "alpha=529", true),
        ("vx/fo-429", "alpha=429", false),
        ("vx/fo-429-s", "alpha=429", true),
    ] {
        let id = format!("vx-fo-{fault}-{stream}");
        let body = json!({"model": model, "max_tokens": 32, "stream": stream, "messages": msg(), "provider": {"sort": "price"}});
        let r = stack().anthropic(&id, &[("x-mock-behavior", fault)], body).await;
        assert_eq!(r.status, 200, "{id}: {}", r.text());
        assert_eq!(r.header("x-switchyard-provider"), Some("beta"), "{id}");
        let got = attempts(&id);
        let order: Vec<&str> = got.iter().map(|(p, _)| p.as_str()).collect();
        assert_eq!(order, ["alpha", "beta"], "{id}");
        assert_claude_attempt(&got[1].1, stream);
        let text = r.text();
        if stream {
            assert!(text.contains("event: message_start") && text.contains("event: message_stop"), "{id}: {text}");
        } else {
            assert_eq!(r.json()["content"][0]["text"], "Hello from beta", "{id}: {text}");
        }
    }
}

#[tokio::test]
async fn a_token_vertex_refuses_is_failed_over_and_never_shown() {
    let body = json!({"model": "vx/expired", "max_tokens": 32, "messages": msg(), "provider": {"sort": "price"}});
    let r = stack().anthropic("vx-expired", &[], body).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(who("vx-expired"), ["gamma", "beta"], "gamma's expired token refused, beta served");
    assert_only_the_token(&attempts("vx-expired")[0].1, EXPIRED);
    assert!(!r.text().contains(EXPIRED) && !r.text().contains(TOKEN), "{}", r.text());
    // With nothing to fail over to, the refusal is the caller's answer (as any provider's
    // refused key), in its shape: Vertex's complaint, never the token.
    let body = json!({"model": "vx/expired-only", "max_tokens": 32, "messages": msg()});
    let r = stack().anthropic("vx-expired-only", &[], body.clone()).await;
    assert_eq!(r.status, 401, "{}", r.text());
    let text = r.text();
    assert!(!text.contains(EXPIRED) && !text.contains(TOKEN), "{text}");
    assert_eq!(
        (r.json()["type"].as_str(), r.json()["error"]["type"].as_str()),
        (Some("error"), Some("authentication_error"))
    );
    let r = stack().openai("vx-expired-only-oa", &[], body).await;
    assert_eq!((r.status, r.json()["error"]["type"].as_str()), (401, Some("authentication_error")), "{}", r.text());
    assert!(!r.text().contains(EXPIRED));
}

#[tokio::test]
async fn vertexs_429_cools_the_endpoint_down_and_anthropic_answers() {
    let body = json!({"model": "vx/throttled", "max_tokens": 32, "messages": msg(), "provider": {"sort": "price"}});
    let r = stack().anthropic("vx-throttled", &[("x-mock-behavior", "beta=429")], body.clone()).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(who("vx-throttled"), ["beta", "alpha"]);
    // beta cools down: the next request goes to alpha first though beta is cheaper and healthy.
    let r = stack().anthropic("vx-throttled-2", &[], body).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(who("vx-throttled-2"), ["alpha"]);
}

#[tokio::test]
async fn vertexs_quota_error_reaches_a_caller_in_its_own_shape() {
    // Only Vertex serves Gemini here: its 429 (RESOURCE_EXHAUSTED) is the caller's answer.
    let r = stack()
        .openai("vx-g-429", &[("x-mock-behavior", "delta=429")], json!({"model": "vx/gemini-429", "messages": msg()}))
        .await;
    assert_eq!(r.status, 429, "{}", r.text());
    assert_eq!(r.json()["error"]["type"], "rate_limit_error", "{}", r.text());
}
