//! The Anthropic Messages and Google generateContent surfaces in real Envoy, against mock
//! providers speaking each API: routing to endpoints speaking the caller's API first, failover,
//! `models` fallback, Retry-After (Gemini: `retryDelay`) cool-down, credentials (each provider sees only its own key in
//! its API's header, the caller's key never), errors in each API's shape, streaming.

mod common;

use std::time::Duration;

use common::{launch, Stack};
use serde_json::{json, Value};
use switchyard_integration::client::{post_json, Reply};
use switchyard_integration::mock::Received;

/// alpha speaks only OpenAI; beta Anthropic and OpenAI; gamma Anthropic and Google; delta only
/// Google; `dead` (nothing listening) Anthropic and Google.
fn surfaces_catalog() -> Value {
    let mut c = json!({
        "providers": {
            "alpha": {"cluster": "c_alpha", "authority": "alpha.example", "credential": {"value": "key-alpha"}},
            "beta": {"cluster": "c_beta", "authority": "beta.example", "credential": {"value": "key-beta"},
                     "apis": {"anthropic": {}, "openai": {}}},
            "gamma": {"cluster": "c_gamma", "authority": "gamma.example", "credential": {"value": "key-gamma"},
                      "apis": {"anthropic": {}, "google": {}}, "tags": ["contract"]},
            "delta": {"cluster": "c_delta", "authority": "delta.example", "credential": {"value": "key-delta"},
                      "apis": {"google": {}}},
            "dead": {"cluster": "c_dead", "authority": "dead.example", "credential": {"value": "key-dead"},
                     "apis": {"anthropic": {}, "google": {}}}
        },
        "models": {
            "oa/only": {"endpoints": [{"provider": "alpha", "pricing": {"prompt": 1, "completion": 1}}]}
        },
        "routing": {"debug_header": true, "default_policy": "price_weighted", "max_body_bytes": 65536},
        // A compliance route selected by a trusted header: only providers under contract.
        "policies": {"contract": {"require_tags": ["contract"], "allowed_models": ["an/*", "go/*"]}},
        "policy_selection": {"trusted_headers": ["x-tenant"],
                             "rules": [{"policy": "contract", "header": {"name": "x-tenant", "value": "finance"}}]}
    });
    // One model per test so live statistics never leak between tests. alpha (OpenAI only) is
    // the dearest: it serves an Anthropic or Google caller translated (tests/translation.rs),
    // after that API's own speakers; these tests stay on each API's own endpoints.
    let models: [(&str, &[(&str, f64)]); 18] = [
        ("an/route", &[("alpha", 5.0), ("beta", 1.0), ("gamma", 2.0)]),
        ("an/fo", &[("alpha", 5.0), ("beta", 1.0), ("gamma", 2.0)]),
        ("an/stream", &[("beta", 1.0), ("gamma", 2.0)]),
        ("an/cut", &[("beta", 1.0), ("gamma", 2.0)]),
        ("an/err", &[("beta", 1.0), ("gamma", 2.0)]),
        ("an/cd", &[("beta", 1.0), ("gamma", 2.0)]),
        ("an/fb1", &[("beta", 1.0)]),
        ("an/fb2", &[("gamma", 1.0)]),
        ("an/fbk1", &[("beta", 1.0)]),
        ("an/fbk2", &[("gamma", 1.0)]),
        ("go/route", &[("alpha", 5.0), ("gamma", 1.0), ("delta", 2.0)]),
        ("go/fo", &[("gamma", 1.0), ("delta", 2.0)]),
        ("go/stream", &[("dead", 0.5), ("gamma", 1.0), ("delta", 2.0)]),
        ("go/cut", &[("gamma", 1.0), ("delta", 2.0)]),
        ("go/err", &[("gamma", 1.0), ("delta", 2.0)]),
        ("go/cd", &[("gamma", 1.0), ("delta", 2.0)]),
        ("an/tools", &[("beta", 1.0), ("gamma", 2.0)]),
        ("go/tools", &[("gamma", 1.0), ("delta", 2.0)]),
    ];
    for (model, endpoints) in models {
        let eps: Vec<Value> = endpoints
            .iter()
            .map(|(p, price)| {
                json!({"provider": p, "upstream_model": format!("{p}-{}", model.replace('/', "-")),
                       "pricing": {"prompt": price, "completion": price}})
            })
            .collect();
        c["models"][model] = json!({"endpoints": eps});
    }
    c
}

fn stack() -> &'static Stack {
    static STACK: std::sync::OnceLock<Stack> = std::sync::OnceLock::new();
    STACK.get_or_init(|| launch("surfaces", surfaces_catalog(), |cfg| cfg.per_try_idle_timeout_ms = 1_000))
}

const CALLER_KEY: &str = "caller-secret-key";
const KEYS: [(&str, &str); 5] = [
    ("alpha", "key-alpha"),
    ("beta", "key-beta"),
    ("gamma", "key-gamma"),
    ("delta", "key-delta"),
    ("dead", "key-dead"),
];

/// Requests sort by price unless they say otherwise, so the order is deterministic (the default
/// policy draws at random).
async fn anthropic(s: &Stack, id: &str, extra: &[(&str, &str)], mut body: Value) -> Reply {
    if body.get("provider").is_none() {
        body["provider"] = json!({"sort": "price"});
    }
    let mut h = vec![("x-test-id", id), ("x-api-key", CALLER_KEY), ("anthropic-version", "2023-06-01")];
    h.extend_from_slice(extra);
    post_json(s.addr, "/v1/messages", &h, &body).await.unwrap_or_else(|e| panic!("{id}: {e}"))
}

async fn google(s: &Stack, id: &str, path: &str, extra: &[(&str, &str)], body: Value) -> Reply {
    let mut h = vec![("x-test-id", id), ("x-goog-api-key", CALLER_KEY)];
    h.extend_from_slice(extra);
    // Price order unless the request routes itself (header or body).
    if body.get("provider").is_none() && !extra.iter().any(|(k, _)| *k == "x-switchyard-routing") {
        h.push(("x-switchyard-routing", r#"{"provider": {"sort": "price"}}"#));
    }
    post_json(s.addr, path, &h, &body).await.unwrap_or_else(|e| panic!("{id}: {e}"))
}

fn messages(text: &str) -> Value {
    json!([{"role": "user", "content": text}])
}

fn contents(text: &str) -> Value {
    json!([{"role": "user", "parts": [{"text": text}]}])
}

fn receivers(s: &Stack, id: &str) -> Vec<String> {
    s.received(id).into_iter().map(|(p, _)| p).collect()
}

fn one(s: &Stack, id: &str, provider: &str) -> Received {
    let got: Vec<Received> = s.received(id).into_iter().filter(|(p, _)| p == provider).map(|(_, r)| r).collect();
    assert_eq!(got.len(), 1, "{id}: {provider} should get exactly one attempt");
    got.into_iter().next().unwrap()
}

/// The attempt carries `provider`'s key in `header` (its API's), no other credential header,
/// no other provider's key and never the caller's, anywhere (headers or path).
fn assert_credentials(r: &Received, provider: &str, header: &str) {
    let own = KEYS.iter().find(|k| k.0 == provider).map(|k| k.1).unwrap();
    assert_eq!(r.header(header), Some(own), "{provider} must get its own key in {header}");
    for h in ["authorization", "x-api-key", "x-goog-api-key"] {
        if h != header {
            assert_eq!(r.header(h), None, "{provider} must not get {h}");
        }
    }
    assert_eq!(r.internal_headers(), vec![], "{provider} got internal headers");
    for (k, v) in &r.headers {
        for (other, secret) in KEYS {
            if other != provider {
                assert!(!v.contains(secret), "{provider} got {other}'s key in {k}");
            }
        }
        assert!(!v.contains(CALLER_KEY), "{provider} got the caller's key in {k}");
    }
    assert!(!r.path.contains(CALLER_KEY), "{provider} got the caller's key in the path {}", r.path);
    assert_eq!(r.header("host"), Some(format!("{provider}.example").as_str()));
    assert_eq!(r.header("content-length").and_then(|v| v.parse::<usize>().ok()), Some(r.body.len()));
}

/// The SSE events of a body: (event name, data JSON) per event, CRLF or LF separated.
fn events(text: &str) -> Vec<(String, Value)> {
    text.replace("\r\n", "\n")
        .split("\n\n")
        .filter(|e| !e.trim().is_empty())
        .map(|e| {
            let name = e.lines().find_map(|l| l.strip_prefix("event: ")).unwrap_or("").to_string();
            let data = e.lines().find_map(|l| l.strip_prefix("data: ")).unwrap_or("null");
            (name, serde_json::from_str(data).unwrap_or(Value::Null))
        })
        .collect()
}

// ---------------------------------------------------------------------------------------------
// Anthropic Messages
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn anthropic_requests_reach_only_anthropic_speakers_with_their_key() {
    let s = stack();
    let r = anthropic(
        s,
        "an-route",
        &[("anthropic-beta", "tools-2024-05-16")],
        json!({"model": "an/route", "max_tokens": 64, "system": "be brief", "messages": messages("hi"),
               "provider": {"sort": "price"}, "models": ["an/fb1"]}),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    // beta, the cheapest, speaks Anthropic itself.
    assert_eq!(receivers(s, "an-route"), vec!["beta"]);
    assert_eq!(r.header("x-switchyard-provider"), Some("beta"));
    assert_eq!(r.header("x-switchyard-model"), Some("an/route"));
    let v = r.json();
    assert_eq!(v["type"], "message", "{v}");
    assert_eq!(v["model"], "an/route");
    assert_eq!(v["provider"], "beta");
    let usage = &v["usage"];
    let expected = (usage["input_tokens"].as_f64().unwrap() + usage["output_tokens"].as_f64().unwrap()) / 1e6;
    assert!((usage["cost"].as_f64().unwrap() - expected).abs() < 1e-12, "{usage}");
    let got = one(s, "an-route", "beta");
    assert_eq!(got.path, "/v1/messages");
    assert_credentials(&got, "beta", "x-api-key");
    // The caller's version and beta headers are kept; routing fields are removed.
    assert_eq!(got.header("anthropic-version"), Some("2023-06-01"));
    assert_eq!(got.header("anthropic-beta"), Some("tools-2024-05-16"));
    let body = got.json();
    assert_eq!(body["model"], "beta-an-route");
    assert_eq!(body["system"], "be brief");
    assert!(body.get("provider").is_none() && body.get("models").is_none(), "{body}");
}

#[tokio::test]
async fn anthropic_fails_over_and_each_attempt_carries_its_own_key() {
    let s = stack();
    let r = anthropic(
        s,
        "an-fo",
        &[("x-mock-behavior", "beta=529")],
        json!({"model": "an/fo", "max_tokens": 16, "messages": messages("x")}),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(receivers(s, "an-fo"), vec!["beta", "gamma"]);
    assert_eq!(r.header("x-switchyard-attempt-log"), Some("beta:529,gamma:200"));
    assert_credentials(&one(s, "an-fo", "beta"), "beta", "x-api-key");
    let g = one(s, "an-fo", "gamma");
    assert_credentials(&g, "gamma", "x-api-key");
    assert_eq!(g.json()["model"], "gamma-an-fo");
    assert_eq!(r.json()["provider"], "gamma");
}

#[tokio::test]
async fn anthropic_models_fallback_stays_on_the_surface() {
    let s = stack();
    // an/fb1's only endpoint fails; an/fb2 serves.
    let r = anthropic(
        s,
        "an-fb",
        &[("x-mock-behavior", "beta=400")],
        json!({"model": "an/fb1", "models": ["an/fb2"], "max_tokens": 8, "messages": messages("x")}),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(receivers(s, "an-fb"), vec!["beta", "gamma"]);
    assert_eq!(r.json()["model"], "an/fb2");
}

// OpenRouter's Messages endpoint takes the fallback list as `fallbacks: [{"model": ...}]`: the
// same list as `models`, and Anthropic itself never sees it (its own server-side fallbacks
// would run behind Switchyard's).
#[tokio::test]
async fn anthropic_fallbacks_are_the_models_list_and_never_reach_a_provider() {
    let s = stack();
    let r = anthropic(
        s,
        "an-fbk",
        &[("x-mock-behavior", "beta=529")],
        json!({"model": "an/fbk1", "fallbacks": [{"model": "an/fbk2"}], "max_tokens": 8,
               "messages": messages("x")}),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(receivers(s, "an-fbk"), vec!["beta", "gamma"]);
    assert_eq!(r.json()["model"], "an/fbk2");
    for provider in ["beta", "gamma"] {
        let body = one(s, "an-fbk", provider).json();
        assert!(body.get("fallbacks").is_none() && body.get("models").is_none(), "{provider}: {body}");
    }
    // A per-attempt override is refused, in Anthropic's shape, before any provider is tried.
    let r = anthropic(
        s,
        "an-fbk-bad",
        &[],
        json!({"model": "an/fbk1", "fallbacks": [{"model": "an/fbk2", "max_tokens": 99}], "max_tokens": 8,
               "messages": messages("x")}),
    )
    .await;
    assert_eq!(r.status, 400, "{}", r.text());
    assert_eq!(r.json()["type"], "error", "{}", r.text());
    let message = r.json()["error"]["message"].as_str().unwrap_or_default().to_string();
    assert!(message.contains("`fallbacks[0]` takes only `model`") && message.contains("max_tokens"), "{message}");
    assert!(receivers(s, "an-fbk-bad").is_empty());
}

#[tokio::test]
async fn anthropic_streams_pass_unbuffered_after_failing_over_before_the_first_byte() {
    let s = stack();
    let r = anthropic(
        s,
        "an-stream",
        &[("x-mock-behavior", "beta=503,gamma=ttft20+interval250+chunks5")],
        json!({"model": "an/stream", "max_tokens": 16, "stream": true, "messages": messages("x")}),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.header("content-type"), Some("text/event-stream"));
    assert_eq!(r.header("x-switchyard-provider"), Some("gamma"));
    let ev = events(&r.text());
    let names: Vec<&str> = ev.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names.first(), Some(&"message_start"), "{names:?}");
    assert_eq!(names.last(), Some(&"message_stop"), "{names:?}");
    assert!(names.contains(&"message_delta") && names.contains(&"content_block_delta"), "{names:?}");
    // message_start names the catalog model and the provider; other events pass unchanged.
    assert_eq!(ev[0].1["message"]["model"], "an/stream");
    assert_eq!(ev[0].1["message"]["provider"], "gamma");
    // The final message_delta carries the answer's cost (prompt from message_start at $2 per
    // million, output from the delta).
    let (_, delta) = ev.iter().rfind(|(n, _)| n == "message_delta").unwrap();
    let input = ev[0].1["message"]["usage"]["input_tokens"].as_f64().unwrap();
    let output = delta["usage"]["output_tokens"].as_f64().unwrap();
    assert!((delta["usage"]["cost"].as_f64().unwrap() - (input + output) * 2.0 / 1e6).abs() < 1e-12, "{delta}");
    // Unbuffered: the deltas arrive over the stream's duration, not in one piece.
    let deltas: Vec<Duration> = r
        .chunks
        .iter()
        .filter(|(_, c)| String::from_utf8_lossy(c).contains("content_block_delta"))
        .map(|(t, _)| *t)
        .collect();
    assert!(deltas.len() >= 2, "{:?}", r.chunks.len());
    assert!(*deltas.last().unwrap() >= deltas[0] + Duration::from_millis(700), "{deltas:?}");
    assert_credentials(&one(s, "an-stream", "gamma"), "gamma", "x-api-key");
}

#[tokio::test]
async fn anthropic_stream_cut_after_the_first_byte_ends_with_an_error_event() {
    let s = stack();
    let r = anthropic(
        s,
        "an-cut",
        &[("x-mock-behavior", "beta=cut2")],
        json!({"model": "an/cut", "max_tokens": 16, "stream": true, "messages": messages("x"),
               "provider": {"order": ["beta", "gamma"]}}),
    )
    .await;
    assert_eq!(r.status, 200);
    // No failover once bytes reached the caller.
    assert_eq!(receivers(s, "an-cut"), vec!["beta"]);
    let ev = events(&r.text());
    let (name, data) = ev.last().unwrap();
    assert_eq!(name, "error", "{}", r.text());
    assert_eq!(data["type"], "error");
    assert_eq!(data["error"]["type"], "api_error");
    assert_eq!(data["error"]["code"], "stream_interrupted");
}

#[tokio::test]
async fn anthropic_errors_come_in_anthropics_shape() {
    let s = stack();
    let check = |r: &Reply, status: u16, kind: &str, code: &str| {
        assert_eq!(r.status, status, "{}", r.text());
        assert!(r.header("content-type").is_some_and(|c| c.starts_with("application/json")));
        let v = r.json();
        assert_eq!(v["type"], "error", "{v}");
        assert_eq!(v["error"]["type"], kind, "{v}");
        assert_eq!(v["error"]["code"], code, "{v}");
        assert!(v["error"]["message"].is_string());
        v
    };
    // Only an OpenAI endpoint, and a field no translation takes: 400 naming it.
    let r = anthropic(
        s,
        "an-e1",
        &[],
        json!({"model": "oa/only", "max_tokens": 1, "messages": messages("x"), "mcp_servers": []}),
    )
    .await;
    let v = check(&r, 400, "invalid_request_error", "invalid_parameter");
    assert_eq!(v["error"]["param"], "mcp_servers");
    // A bad body field.
    let r = anthropic(
        s,
        "an-e2",
        &[],
        json!({"model": "an/err", "max_tokens": 1, "messages": [], "provider": {"sort": "cheap"}}),
    )
    .await;
    let v = check(&r, 400, "invalid_request_error", "invalid_parameter");
    assert_eq!(v["error"]["param"], "provider.sort");
    let r = post_json(s.addr, "/v1/messages", &[("x-test-id", "an-e3")], &json!([1])).await.unwrap();
    check(&r, 400, "invalid_request_error", "invalid_json");
    // Every attempt failed.
    let r = anthropic(
        s,
        "an-e4",
        &[("x-mock-behavior", "beta=503,gamma=502")],
        json!({"model": "an/err", "max_tokens": 1, "messages": messages("x")}),
    )
    .await;
    assert_eq!(receivers(s, "an-e4"), vec!["beta", "gamma"]);
    check(&r, 502, "api_error", "all_endpoints_failed");
    // A non-JSON provider error is wrapped in Anthropic's shape.
    let r = anthropic(
        s,
        "an-e5",
        &[("x-mock-behavior", "beta=403+html")],
        json!({"model": "an/err", "max_tokens": 1, "messages": messages("x"), "provider": {"order": ["beta"], "allow_fallbacks": false}}),
    )
    .await;
    check(&r, 403, "permission_error", "provider_error");
    // Not a routed method: the operator's pass-through cluster takes it (without one it is a
    // 405 in Anthropic's shape, see the unit tests), never a provider.
    let r = switchyard_integration::client::send(s.addr, "GET", "/v1/messages", &[("x-test-id", "an-e6")], b"")
        .await
        .unwrap();
    assert_eq!(receivers(s, "an-e6"), vec!["origin"], "{}", r.text());
}

#[tokio::test]
async fn anthropic_retry_after_cools_the_endpoint_down() {
    let s = stack();
    let r = anthropic(
        s,
        "an-cd0",
        &[("x-mock-behavior", "beta=429/30")],
        json!({"model": "an/cd", "max_tokens": 1, "messages": messages("x")}),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(receivers(s, "an-cd0"), vec!["beta", "gamma"]);
    for i in 1..6 {
        let id = format!("an-cd{i}");
        let r = anthropic(
            s,
            &id,
            &[("x-switchyard-debug", "1")],
            json!({"model": "an/cd", "max_tokens": 1, "messages": messages("x")}),
        )
        .await;
        assert_eq!(r.status, 200);
        assert_eq!(receivers(s, &id), vec!["gamma"], "request {i}");
        let c: Value = serde_json::from_str(r.header("x-switchyard-candidates").unwrap()).unwrap();
        assert_eq!(c[1]["endpoint"], "beta");
        assert_eq!(c[1]["health"]["cooling_down"], true);
        // Shared statistics count this surface's attempts.
        assert!(c[0]["health"]["attempts"].as_u64().unwrap() >= 1, "{c}");
    }
}

// ---------------------------------------------------------------------------------------------
// Google generateContent
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn google_model_comes_from_the_path_and_is_rewritten_per_attempt() {
    let s = stack();
    let r = google(
        s,
        "go-route",
        "/v1beta/models/go/route:generateContent?key=caller-query-key",
        &[],
        json!({"contents": contents("hi"), "generationConfig": {"maxOutputTokens": 32}}),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    // gamma is the cheapest Google speaker (alpha, OpenAI only, the dearest).
    assert_eq!(receivers(s, "go-route"), vec!["gamma"]);
    let got = one(s, "go-route", "gamma");
    assert_eq!(got.path, "/v1beta/models/gamma-go-route:generateContent");
    assert_credentials(&got, "gamma", "x-goog-api-key");
    assert!(!got.path.contains("caller-query-key"));
    let body = got.json();
    assert!(body.get("model").is_none() && body["contents"].is_array(), "{body}");
    let v = r.json();
    assert!(v["candidates"].is_array(), "{v}");
    assert_eq!(v["modelVersion"], "go/route");
    assert!(v.get("provider").is_none(), "nothing added to Google's shape: {v}");
    assert_eq!(r.header("x-switchyard-provider"), Some("gamma"));
    // Routing fields from the header (Google SDKs cannot add body fields), and percent-encoded
    // model ids.
    let r = google(
        s,
        "go-route2",
        "/v1beta/models/go%2Froute:generateContent",
        &[("x-switchyard-routing", r#"{"provider": {"order": ["delta"], "allow_fallbacks": false}}"#)],
        json!({"contents": contents("hi")}),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    let got = one(s, "go-route2", "delta");
    assert_eq!(got.path, "/v1beta/models/delta-go-route:generateContent");
    assert_credentials(&got, "delta", "x-goog-api-key");
    // google-genai's default API version (v1) is routed too; the version is kept upstream.
    let r =
        google(s, "go-route-v1", "/v1/models/go/route:generateContent", &[], json!({"contents": contents("hi")})).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let got = one(s, "go-route-v1", "gamma");
    assert_eq!(got.path, "/v1/models/gamma-go-route:generateContent");
    assert_credentials(&got, "gamma", "x-goog-api-key");
    assert_eq!(r.json()["modelVersion"], "go/route");
    // ... or from the body, removed before the provider.
    let r = google(
        s,
        "go-route3",
        "/v1beta/models/go/route:generateContent",
        &[],
        json!({"contents": contents("hi"), "provider": {"only": ["delta"]}}),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    let body = one(s, "go-route3", "delta").json();
    assert!(body.get("provider").is_none(), "{body}");
}

#[tokio::test]
async fn google_fails_over_with_the_next_providers_model_and_key() {
    let s = stack();
    let r = google(
        s,
        "go-fo",
        "/v1beta/models/go/fo:generateContent",
        &[("x-mock-behavior", "gamma=503")],
        json!({"contents": contents("x")}),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(receivers(s, "go-fo"), vec!["gamma", "delta"]);
    let g = one(s, "go-fo", "gamma");
    assert_eq!(g.path, "/v1beta/models/gamma-go-fo:generateContent");
    assert_credentials(&g, "gamma", "x-goog-api-key");
    let d = one(s, "go-fo", "delta");
    assert_eq!(d.path, "/v1beta/models/delta-go-fo:generateContent");
    assert_credentials(&d, "delta", "x-goog-api-key");
    assert_eq!(r.header("x-switchyard-attempt-log"), Some("gamma:503,delta:200"));
    assert_eq!(r.json()["modelVersion"], "go/fo");
}

#[tokio::test]
async fn google_streams_fail_over_before_the_first_byte_and_pass_unbuffered() {
    let s = stack();
    let r = google(
        s,
        "go-stream",
        "/v1beta/models/go/stream:streamGenerateContent?alt=sse",
        &[("x-mock-behavior", "gamma=429,delta=ttft20+interval250+chunks5")],
        json!({"contents": contents("x")}),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(r.header("content-type").is_some_and(|c| c.starts_with("text/event-stream")));
    // dead (connect failure), gamma (429), delta serves.
    assert_eq!(r.header("x-switchyard-attempt-log"), Some("dead:none,gamma:429,delta:200"));
    let d = one(s, "go-stream", "delta");
    assert_eq!(d.path, "/v1beta/models/delta-go-stream:streamGenerateContent?alt=sse");
    assert_credentials(&d, "delta", "x-goog-api-key");
    let ev = events(&r.text());
    assert!(ev.len() >= 5, "{}", r.text());
    for (_, data) in &ev {
        assert_eq!(data["modelVersion"], "go/stream", "{data}");
    }
    assert!(ev.last().unwrap().1["candidates"][0]["finishReason"].is_string());
    let times: Vec<Duration> = r.chunks.iter().map(|(t, _)| *t).collect();
    assert!(times.len() >= 3 && *times.last().unwrap() >= times[0] + Duration::from_millis(700), "{times:?}");
}

#[tokio::test]
async fn google_stream_cut_after_the_first_byte_ends_with_an_error_chunk() {
    let s = stack();
    let r = google(
        s,
        "go-cut",
        "/v1beta/models/go/cut:streamGenerateContent?alt=sse",
        &[("x-mock-behavior", "gamma=cut2")],
        json!({"contents": contents("x")}),
    )
    .await;
    assert_eq!(r.status, 200);
    assert_eq!(receivers(s, "go-cut"), vec!["gamma"]);
    let last = events(&r.text()).last().cloned().unwrap();
    assert_eq!(last.1["error"]["status"], "UNAVAILABLE", "{}", r.text());
    assert_eq!(last.1["error"]["code"], 502);
}

#[tokio::test]
async fn google_errors_come_in_googles_shape() {
    let s = stack();
    let check = |r: &Reply, status: u16, gstatus: &str, reason: &str| {
        assert_eq!(r.status, status, "{}", r.text());
        let v = r.json();
        assert_eq!(v["error"]["code"], status, "{v}");
        assert_eq!(v["error"]["status"], gstatus, "{v}");
        assert!(v["error"]["message"].is_string(), "{v}");
        assert_eq!(v["error"]["details"][0]["reason"], reason, "{v}");
        v
    };
    let path = |m: &str| format!("/v1beta/models/{m}:generateContent");
    let r = google(s, "go-e1", &path("oa/only"), &[], json!({"contents": contents("x"), "cachedContent": "c/1"})).await;
    let v = check(&r, 400, "INVALID_ARGUMENT", "INVALID_PARAMETER");
    assert_eq!(v["error"]["details"][0]["metadata"]["param"], "cachedContent");
    let r = google(s, "go-e2", &path("no/such"), &[], json!({"contents": contents("x")})).await;
    check(&r, 400, "INVALID_ARGUMENT", "MODEL_NOT_FOUND");
    let r = google(s, "go-e3", &path("go/err"), &[], json!({"model": "x", "contents": contents("x")})).await;
    let v = check(&r, 400, "INVALID_ARGUMENT", "INVALID_PARAMETER");
    assert_eq!(v["error"]["details"][0]["metadata"]["param"], "model");
    let r =
        google(s, "go-e4", &path("go/err"), &[("x-switchyard-routing", "{not json")], json!({"contents": []})).await;
    check(&r, 400, "INVALID_ARGUMENT", "INVALID_PARAMETER");
    let r = google(
        s,
        "go-e5",
        &path("go/err"),
        &[("x-mock-behavior", "gamma=429/2,delta=429/5")],
        json!({"contents": contents("x")}),
    )
    .await;
    assert_eq!(receivers(s, "go-e5"), vec!["gamma", "delta"]);
    check(&r, 429, "RESOURCE_EXHAUSTED", "CAPACITY_EXHAUSTED");
    // Gemini names its delay only in the body: gamma's (2 s) is never read, Envoy resets a
    // retried attempt at its headers; delta's answer is passed on and read.
    assert_eq!(r.header("retry-after"), Some("5"));
    // Other model methods are not routed: the pass-through cluster takes them, never a provider.
    google(s, "go-e6", "/v1beta/models/go/err:countTokens", &[], json!({"contents": []})).await;
    assert_eq!(receivers(s, "go-e6"), vec!["origin"]);
    assert!(s.received("go-e1").is_empty());
}

// Gemini names a 429's delay only in its body (google.rpc.RetryInfo `retryDelay`), as the mock
// does, and Switchyard reads it from the 429 Envoy passes on (here the only planned attempt):
// the caller's Retry-After names it and the endpoint cools down for exactly that long. gamma is
// the cheaper endpoint of go/cd, so under `sort: price` it is first whenever it is not cooling
// down. A 429 without a delay is the control: no pause, gamma is first again at once. Then
// `retryDelay: 2s`: delta serves until the 2 s are over, gamma after.
#[tokio::test]
async fn google_retry_delay_cools_the_endpoint_down_and_metrics_count_the_surface() {
    let s = stack();
    let path = "/v1beta/models/go/cd:generateContent";
    let only_gamma = r#"{"provider": {"order": ["gamma"], "allow_fallbacks": false}}"#;
    let refused = |id: &'static str, behavior: &'static str| async move {
        let extra = [("x-mock-behavior", behavior), ("x-switchyard-routing", only_gamma)];
        let r = google(s, id, path, &extra, json!({"contents": contents("x")})).await;
        assert_eq!(r.status, 429, "{id}: {}", r.text());
        assert_eq!(receivers(s, id), ["gamma"]);
        r.header("retry-after").map(str::to_string)
    };
    let served_by = |id: &'static str| async move {
        let r = google(s, id, path, &[], json!({"contents": contents("x")})).await;
        assert_eq!(r.status, 200, "{id}: {}", r.text());
        receivers(s, id)
    };
    assert_eq!(refused("go-cd-ctl", "gamma=429").await, None);
    assert_eq!(served_by("go-cd-ctl1").await, ["gamma"], "a 429 without a delay pauses nothing");
    assert_eq!(refused("go-cd0", "gamma=429/2").await.as_deref(), Some("2"), "the caller is told the delay");
    let at = std::time::Instant::now();
    let delay = Duration::from_secs(2);
    for id in ["go-cd1", "go-cd2", "go-cd3"] {
        assert_eq!(served_by(id).await, ["delta"], "{id}, {:?} after the 429", at.elapsed());
    }
    assert!(at.elapsed() < delay, "the follow-ups ran inside the cool-down: {:?}", at.elapsed());
    // The cool-down began when the filter read the 429's body, before the caller had its answer.
    tokio::time::sleep(delay.saturating_sub(at.elapsed()) + Duration::from_millis(100)).await;
    assert_eq!(served_by("go-cd4").await, ["gamma"], "usable again once the delay is over");
    let (_, stats) =
        switchyard_integration::envoy::http_get(s.admin, "/stats?filter=switchyard.attempts_total").unwrap_or_default();
    let count = |needle: &str| {
        stats
            .lines()
            .find(|l| l.contains(needle))
            .and_then(|l| l.rsplit(": ").next())
            .and_then(|v| v.trim().parse::<u64>().ok())
            .unwrap_or(0)
    };
    assert_eq!(count("model.go/cd.endpoint.delta.gen_ai_provider_name.delta.outcome.success"), 3, "{stats}");
    assert_eq!(count("model.go/cd.endpoint.gamma.gen_ai_provider_name.gamma.outcome.rate_limited"), 2, "{stats}");
    assert_eq!(count("model.go/cd.endpoint.gamma.gen_ai_provider_name.gamma.outcome.success"), 2, "{stats}");
    // delta speaks only Google: its first attempt runs on its first-attempt cluster, without the
    // per-attempt filter; the decision filter reads the delay from the 429 it passes on.
    let only_delta = r#"{"provider": {"order": ["delta"], "allow_fallbacks": false}}"#;
    let extra = [("x-mock-behavior", "delta=429/1"), ("x-switchyard-routing", only_delta)];
    let r = google(s, "go-cd5", path, &extra, json!({"contents": contents("x")})).await;
    assert_eq!((r.status, r.header("retry-after")), (429, Some("1")), "{}", r.text());
    assert_eq!(receivers(s, "go-cd5"), ["delta"]);
}

#[tokio::test]
async fn hostile_surface_inputs_are_refused_in_the_callers_shape_and_reach_no_provider() {
    let s = stack();
    let deep = format!("{{\"provider\": {}1{}}}", "[".repeat(300), "]".repeat(300));
    let cases: Vec<(&str, String, Vec<(&str, String)>, String, u16)> = vec![
        // Anthropic: wrong types, duplicate keys, a routing field in both places.
        ("h-an1", "/v1/messages".into(), vec![], r#"{"model":"an/err","stream":"yes","messages":[]}"#.into(), 400),
        ("h-an2", "/v1/messages".into(), vec![], r#"{"model":"an/err","model":"an/fo","messages":[]}"#.into(), 400),
        (
            "h-an3",
            "/v1/messages".into(),
            vec![("x-switchyard-routing", r#"{"models":["an/fo"]}"#.into())],
            r#"{"model":"an/err","models":["an/fb1"],"messages":[]}"#.into(),
            400,
        ),
        (
            "h-an4",
            "/v1/messages".into(),
            vec![("x-switchyard-routing", deep.clone())],
            r#"{"model":"an/err"}"#.into(),
            400,
        ),
        // Google: a body that is not an object, a bad maxOutputTokens, a nested routing header,
        // a model id with a colon suffix that is no variant.
        ("h-go1", "/v1beta/models/go/err:generateContent".into(), vec![], "[]".into(), 400),
        (
            "h-go2",
            "/v1beta/models/go/err:generateContent".into(),
            vec![],
            r#"{"contents":[],"generationConfig":{"maxOutputTokens":1.5}}"#.into(),
            400,
        ),
        (
            "h-go3",
            "/v1beta/models/go/err:generateContent".into(),
            vec![("x-switchyard-routing", deep)],
            "{}".into(),
            400,
        ),
        ("h-go4", "/v1beta/models/go/err:turbo:generateContent".into(), vec![], "{}".into(), 400),
    ];
    for (id, path, headers, body, status) in cases {
        let mut h: Vec<(&str, &str)> = vec![("x-test-id", id), ("content-type", "application/json")];
        h.extend(headers.iter().map(|(k, v)| (*k, v.as_str())));
        let r = switchyard_integration::client::send(s.addr, "POST", &path, &h, body.as_bytes()).await.unwrap();
        assert_eq!(r.status, status, "{id}: {}", r.text());
        let v = r.json();
        if path.starts_with("/v1/messages") {
            assert_eq!(
                (v["type"].as_str(), v["error"]["type"].as_str()),
                (Some("error"), Some("invalid_request_error")),
                "{id}: {v}"
            );
        } else {
            assert_eq!(
                (v["error"]["code"].as_u64(), v["error"]["status"].as_str()),
                (Some(400), Some("INVALID_ARGUMENT")),
                "{id}: {v}"
            );
        }
        assert!(s.received(id).is_empty(), "{id} reached a provider");
    }
}

// ---------------------------------------------------------------------------------------------
// Operator policies on both surfaces
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn operator_policies_hold_on_the_anthropic_and_google_surfaces() {
    let s = stack();
    let tenant = [("x-tenant", "finance")];
    // beta is cheapest among Anthropic speakers but not under contract: gamma serves.
    let r =
        anthropic(s, "pol-an", &tenant, json!({"model": "an/route", "max_tokens": 8, "messages": messages("x")})).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(receivers(s, "pol-an"), vec!["gamma"]);
    assert_eq!(r.header("x-switchyard-policy"), Some("contract"));
    let got = one(s, "pol-an", "gamma");
    assert_eq!(got.header("x-tenant"), None, "trusted selection headers never reach a provider");
    assert_credentials(&got, "gamma", "x-api-key");
    // Google: delta is not under contract; asking for it is refused naming the policy.
    let r = google(
        s,
        "pol-go",
        "/v1beta/models/go/route:generateContent",
        &[("x-tenant", "finance"), ("x-switchyard-routing", r#"{"provider": {"only": ["delta"]}}"#)],
        json!({"contents": contents("x")}),
    )
    .await;
    assert_eq!(r.status, 404, "{}", r.text());
    let v = r.json();
    assert_eq!(v["error"]["status"], "NOT_FOUND", "{v}");
    assert_eq!(v["error"]["details"][0]["metadata"]["constraint"], "policy:contract.require_tags", "{v}");
    assert_eq!(r.header("x-switchyard-policy"), Some("contract"));
    let r =
        google(s, "pol-go2", "/v1beta/models/go/route:generateContent", &tenant, json!({"contents": contents("x")}))
            .await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(receivers(s, "pol-go2"), vec!["gamma"]);
    // allowed_models: a 403 in Anthropic's shape.
    let r =
        anthropic(s, "pol-an2", &tenant, json!({"model": "oa/only", "max_tokens": 8, "messages": messages("x")})).await;
    assert_eq!(r.status, 403, "{}", r.text());
    let v = r.json();
    assert_eq!((v["type"].as_str(), v["error"]["type"].as_str()), (Some("error"), Some("permission_error")), "{v}");
    assert_eq!(v["error"]["code"], "policy_denied");
    assert!(s.received("pol-go").is_empty() && s.received("pol-an2").is_empty());
}

/// The endpoints' measured tool error rates, from the debug header of one more request.
fn tool_error_rates(r: &Reply) -> Vec<(String, Value)> {
    let c: Value = serde_json::from_str(r.header("x-switchyard-candidates").expect("debug header")).unwrap();
    let mut v: Vec<(String, Value)> = c
        .as_array()
        .unwrap()
        .iter()
        .map(|x| (x["endpoint"].as_str().unwrap_or("").to_string(), x["health"]["tool_error_rate"].clone()))
        .collect();
    v.sort_by(|a, b| a.0.cmp(&b.0));
    v
}

// Anthropic and Google answers are judged in their own shape, whole and streamed: a malformed
// tool call (input/args not a JSON object, a broken input_json_delta) is a bad response, a
// well-formed call of an offered tool is not; the rates feed the tool tiers and :exacto.
#[tokio::test]
async fn anthropic_and_google_tool_calls_are_judged_whole_and_streamed() {
    let s = stack();
    let an_tools = json!([{"name": "get_weather", "input_schema": {"type": "object"}}]);
    for (provider, mode) in [("beta", "badtool"), ("gamma", "tool")] {
        for stream in [false, true] {
            let id = format!("an-tools-{provider}-{stream}");
            let body = json!({"model": "an/tools", "max_tokens": 64, "stream": stream, "tools": an_tools,
                "messages": messages("weather?"), "provider": {"order": [provider], "allow_fallbacks": false}});
            let r = anthropic(s, &id, &[("x-mock-behavior", &format!("{provider}={mode}"))], body).await;
            assert_eq!(r.status, 200, "{id}: {}", r.text());
            assert!(r.text().contains("tool_use"), "{id}: {}", r.text());
        }
    }
    let r = anthropic(
        s,
        "an-tools-debug",
        &[("x-switchyard-debug", "1")],
        json!({"model": "an/tools",
        "max_tokens": 8, "messages": messages("x")}),
    )
    .await;
    assert_eq!(
        tool_error_rates(&r),
        vec![("beta".to_string(), json!(1.0)), ("gamma".to_string(), json!(0.0))],
        "{:?}",
        r.header("x-switchyard-candidates")
    );

    let go_tools = json!([{"functionDeclarations": [{"name": "get_weather", "parameters": {"type": "object"}}]}]);
    for (provider, mode) in [("gamma", "tool"), ("delta", "badtool")] {
        for method in ["generateContent", "streamGenerateContent?alt=sse"] {
            let id = format!("go-tools-{provider}-{}", method.len());
            let routing = format!(r#"{{"provider": {{"order": ["{provider}"], "allow_fallbacks": false}}}}"#);
            let behavior = format!("{provider}={mode}");
            let h = [("x-mock-behavior", behavior.as_str()), ("x-switchyard-routing", routing.as_str())];
            let path = format!("/v1beta/models/go/tools:{method}");
            let r = google(s, &id, &path, &h, json!({"contents": contents("weather?"), "tools": go_tools})).await;
            assert_eq!(r.status, 200, "{id}: {}", r.text());
            assert!(r.text().contains("functionCall"), "{id}: {}", r.text());
        }
    }
    let r = google(
        s,
        "go-tools-debug",
        "/v1beta/models/go/tools:generateContent",
        &[("x-switchyard-debug", "1")],
        json!({"contents": contents("x")}),
    )
    .await;
    assert_eq!(
        tool_error_rates(&r),
        vec![("delta".to_string(), json!(1.0)), ("gamma".to_string(), json!(0.0))],
        "{:?}",
        r.header("x-switchyard-candidates")
    );
}

// Large non-streamed answers (over 256 KiB: the headers go out before the body is complete) are
// rewritten whole on both surfaces, with or without the length announced; without it the
// answer is joined in Envoy's buffer before it is rewritten.
#[tokio::test]
async fn large_answers_are_rewritten_on_both_surfaces() {
    let s = stack();
    for (i, extra) in ["", "+sized"].iter().enumerate() {
        let behavior = format!("beta=big600000{extra}");
        let id = format!("an-big-{i}");
        let r = anthropic(
            s,
            &id,
            &[("x-mock-behavior", &behavior)],
            json!({"model": "an/route", "max_tokens": 64, "messages": messages("hi"), "provider": {"sort": "price"}}),
        )
        .await;
        assert_eq!(r.status, 200, "{id}");
        let v = r.json();
        assert_eq!((v["model"].as_str(), v["provider"].as_str()), (Some("an/route"), Some("beta")), "{id}");
        assert!(v["usage"]["cost"].is_number(), "{id}");
        assert_eq!(v["content"][0]["text"].as_str().map(str::len), Some(600_000), "{id}");

        let behavior = format!("gamma=big600000{extra}");
        let id = format!("go-big-{i}");
        let r = google(
            s,
            &id,
            "/v1beta/models/go/route:generateContent",
            &[("x-mock-behavior", &behavior)],
            json!({"contents": contents("hi")}),
        )
        .await;
        assert_eq!(r.status, 200, "{id}");
        let v = r.json();
        assert_eq!(v["modelVersion"], "go/route", "{id}");
        assert_eq!(v["candidates"][0]["content"]["parts"][0]["text"].as_str().map(str::len), Some(600_000), "{id}");
    }
}
