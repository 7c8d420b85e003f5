//! Claude on Amazon Bedrock (`kind: bedrock`, `docs/bedrock.md`) in real Envoy, against the mock's
//! Bedrock, which is as strict as AWS (`mock/bedrock.rs`: SigV4 recomputed for the test
//! credentials, Bedrock's body validation and exceptions, event streams with valid CRCs). Envoy
//! signs each attempt (`aws_request_signing` after the per-attempt filter, credentials from its
//! environment). alpha is Anthropic itself, beta a Bedrock provider Envoy signs for us-east-1,
//! gamma one signed for the wrong region (the mock refuses its signature), delta one with a
//! Bedrock API key.

mod common;

use common::{Stack, AWS_ENV};
use serde_json::{json, Value};
use switchyard_integration::client::post_json;
use switchyard_integration::envoy::StackConfig;
use switchyard_integration::mock::bedrock::{ACCESS_KEY, API_KEY, ROTATED_ACCESS_KEY, ROTATED_SECRET_KEY, SECRET_KEY};
use switchyard_integration::mock::{received_in_order, Received};

const BEDROCK_ID: &str = "us.anthropic.claude-sonnet-4-20250514-v1:0";
const BEDROCK_PATH: &str = "/model/us.anthropic.claude-sonnet-4-20250514-v1%3A0";
const HOST: &str = "bedrock-runtime.us-east-1.amazonaws.com";

fn catalog() -> Value {
    let mut c = json!({
        "providers": {
            "alpha": {"cluster": "c_alpha", "authority": "api.anthropic.com", "apis": {"anthropic": {}},
                      "credential": {"header": "x-api-key", "prefix": "", "value": "key-alpha"}},
            "beta": {"cluster": "c_beta", "authority": HOST, "kind": "bedrock", "apis": {"anthropic": {}}},
            "gamma": {"cluster": "c_gamma", "authority": HOST, "kind": "bedrock", "apis": {"anthropic": {}},
                      "kind_options": {"region": "us-west-2"}},
            "delta": {"cluster": "c_delta", "authority": HOST, "kind": "bedrock", "apis": {"anthropic": {}},
                      "credential": {"value": API_KEY}}
        },
        "models": {},
        "routing": {"default_policy": "price_weighted"}
    });
    // One model per test; the cheaper endpoint is tried first.
    let models: [(&str, &[(&str, f64)]); 6] = [
        ("br/plain", &[("beta", 3.0)]),
        ("br/fo", &[("alpha", 3.0), ("beta", 3.01)]),
        ("br/fo-stream", &[("alpha", 3.0), ("beta", 3.01)]),
        ("br/badsig", &[("gamma", 3.0), ("beta", 3.01)]),
        ("br/apikey", &[("delta", 3.0)]),
        ("br/throttled", &[("beta", 3.0), ("alpha", 3.01)]),
    ];
    for (model, endpoints) in models {
        let eps: Vec<Value> = endpoints
            .iter()
            .map(|(p, price)| {
                let upstream = if *p == "alpha" { "claude-sonnet-4-20250514" } else { BEDROCK_ID };
                json!({"provider": p, "upstream_model": upstream, "region": "us-east-1",
                       "pricing": {"prompt": price, "completion": 15.0}})
            })
            .collect();
        c["models"][model] = json!({"endpoints": eps});
    }
    c
}

fn stack() -> &'static Stack {
    static STACK: std::sync::OnceLock<Stack> = std::sync::OnceLock::new();
    STACK.get_or_init(|| {
        common::launch_with_env("bedrock", catalog(), |cfg| cfg.per_try_idle_timeout_ms = 2_000, AWS_ENV)
    })
}

fn attempts(id: &str) -> Vec<(String, Received)> {
    received_in_order(&stack().providers, id)
}

/// The attempt reached Bedrock as AWS wants it: the invoke path, signed by Envoy, Bedrock's
/// body, and no key of anyone's.
fn assert_bedrock_attempt(r: &Received, stream: bool) {
    let method = if stream { "invoke-with-response-stream" } else { "invoke" };
    assert_eq!(r.path, format!("{BEDROCK_PATH}/{method}"));
    let auth = r.header("authorization").unwrap_or_default();
    assert!(auth.starts_with(&format!("AWS4-HMAC-SHA256 Credential={ACCESS_KEY}/")), "{auth}");
    assert!(r
        .headers
        .iter()
        .all(|(_, v)| !v.contains("caller-key") && !v.contains("key-alpha") && !v.contains(SECRET_KEY)));
    let body = r.json();
    assert_eq!(body["anthropic_version"], "bedrock-2023-05-31", "{body}");
    assert!(body.get("model").is_none() && body.get("stream").is_none(), "{body}");
}

fn sse_data(text: &str) -> Vec<Value> {
    text.replace("\r\n", "\n")
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .map(|d| serde_json::from_str(d).unwrap_or_else(|_| Value::String(d.to_string())))
        .collect()
}

#[tokio::test]
async fn an_openai_caller_reaches_claude_on_bedrock_signed_by_envoy() {
    let r = stack().openai(
        "br-plain",
        &[],
        json!({"model": "br/plain", "max_tokens": 32, "messages": [{"role": "user", "content": "hi"}], "provider": {"sort": "price"}}),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    let v = r.json();
    assert_eq!(v["choices"][0]["message"]["content"], "Hello from Bedrock", "{v}");
    assert_eq!(v["provider"], "beta");
    assert!(v["usage"]["cost"].as_f64().is_some_and(|c| c > 0.0), "{v}");
    let got = attempts("br-plain");
    assert_eq!(got.len(), 1);
    assert_bedrock_attempt(&got[0].1, false);
    // Streamed: Bedrock's event stream reaches the caller as OpenAI chunks.
    let r = stack().openai(
        "br-plain-stream",
        &[],
        json!({"model": "br/plain", "max_tokens": 32, "stream": true, "messages": [{"role": "user", "content": "hi"}], "provider": {"sort": "price"}}),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    let text = r.text();
    let chunks = sse_data(&text);
    assert!(chunks.iter().any(|c| c["choices"][0]["delta"]["content"] == "Hello from Bedrock"), "{text}");
    assert_eq!(chunks.last(), Some(&Value::String("[DONE]".into())), "{text}");
    assert_bedrock_attempt(&attempts("br-plain-stream")[0].1, true);
}

#[tokio::test]
async fn an_anthropic_caller_fails_over_from_anthropic_to_bedrock_streamed_and_not() {
    for (model, stream) in [("br/fo", false), ("br/fo-stream", true)] {
        let id = format!("br-fo-{stream}");
        let body = json!({"model": model, "max_tokens": 32, "stream": stream, "messages": [{"role": "user", "content": "hi"}], "provider": {"sort": "price"}});
        let r = stack().anthropic(&id, &[("x-mock-behavior", "alpha=529")], body).await;
        assert_eq!(r.status, 200, "{}", r.text());
        assert_eq!(r.header("x-switchyard-provider"), Some("beta"));
        let got = attempts(&id);
        let who: Vec<&str> = got.iter().map(|(p, _)| p.as_str()).collect();
        assert_eq!(who, ["alpha", "beta"]);
        assert_bedrock_attempt(&got[1].1, stream);
        let text = r.text();
        if stream {
            assert!(text.contains("event: message_start") && text.contains("event: message_stop"), "{text}");
            assert!(text.contains("Hello from Bedrock") && !text.contains("invocationMetrics"), "{text}");
        } else {
            let v = r.json();
            assert_eq!(v["content"][0]["text"], "Hello from Bedrock", "{v}");
        }
    }
}

#[tokio::test]
async fn a_signature_the_mock_refuses_is_failed_over_and_never_shown() {
    let body = json!({"model": "br/badsig", "max_tokens": 32, "messages": [{"role": "user", "content": "hi"}], "provider": {"sort": "price"}});
    let r = stack().anthropic("br-badsig", &[], body).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let got = attempts("br-badsig");
    let who: Vec<&str> = got.iter().map(|(p, _)| p.as_str()).collect();
    assert_eq!(who, ["gamma", "beta"], "gamma's wrong-region signature refused, beta served");
    assert!(got[0].1.header("authorization").unwrap_or_default().contains("/us-west-2/bedrock/"));
    assert!(!r.text().contains("Canonical"), "{}", r.text());
}

#[tokio::test]
async fn a_bedrock_api_key_is_sent_as_a_bearer_token() {
    let r = stack().anthropic(
        "br-apikey",
        &[],
        json!({"model": "br/apikey", "max_tokens": 32, "messages": [{"role": "user", "content": "hi"}], "provider": {"sort": "price"}}),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    let got = attempts("br-apikey");
    assert_eq!(got[0].1.header("authorization"), Some(format!("Bearer {API_KEY}").as_str()), "not signed");
    assert_eq!(got[0].1.header("x-api-key"), None, "not Anthropic's key header");
}

#[tokio::test]
async fn bedrock_throttling_cools_it_down_and_anthropic_answers() {
    let body = json!({"model": "br/throttled", "max_tokens": 32, "messages": [{"role": "user", "content": "hi"}], "provider": {"sort": "price"}});
    let r = stack().anthropic("br-throttled", &[("x-mock-behavior", "beta=429")], body).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let got = attempts("br-throttled");
    let who: Vec<&str> = got.iter().map(|(p, _)| p.as_str()).collect();
    assert_eq!(who, ["beta", "alpha"]);
}

/// An AWS credentials file, written whole and renamed into place (as a secret manager rotates it).
fn write_credentials(file: &std::path::Path, key: &str, secret: &str) {
    let tmp = file.with_extension("new");
    std::fs::write(&tmp, format!("[default]\naws_access_key_id = {key}\naws_secret_access_key = {secret}\n")).unwrap();
    std::fs::rename(&tmp, file).unwrap();
}

/// A second stack whose Envoy reads its AWS credentials from a watched file (no environment).
fn rotation_stack() -> &'static (Stack, std::path::PathBuf) {
    static STACK: std::sync::OnceLock<(Stack, std::path::PathBuf)> = std::sync::OnceLock::new();
    STACK.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("switchyard-bedrock-creds-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("credentials");
        write_credentials(&file, ACCESS_KEY, SECRET_KEY);
        let f = file.clone();
        let tweak = move |cfg: &mut StackConfig| cfg.aws_credentials_file = Some(f);
        let stack =
            common::launch_with_env("bedrock-rotation", catalog(), tweak, &[("AWS_EC2_METADATA_DISABLED", "true")]);
        (stack, file)
    })
}

#[tokio::test]
async fn rotated_credentials_are_used_without_a_failed_request() {
    let (s, file) = rotation_stack();
    let key_of = |id: &str| {
        let got = received_in_order(&s.providers, id);
        let auth = got.last().and_then(|(_, r)| r.header("authorization").map(str::to_string)).unwrap_or_default();
        auth.split("Credential=").nth(1).and_then(|c| c.split('/').next()).unwrap_or_default().to_string()
    };
    let body = json!({"model": "br/plain", "max_tokens": 32, "messages": [{"role": "user", "content": "hi"}]});
    let headers = [("x-api-key", "caller-key"), ("anthropic-version", "2023-06-01")];
    let send = |id: String| {
        let body = body.clone();
        async move {
            let mut h = vec![("x-test-id", id.as_str())];
            h.extend_from_slice(&headers);
            let r = post_json(s.addr, "/v1/messages", &h, &body).await.unwrap_or_else(|e| panic!("{id}: {e}"));
            assert_eq!(r.status, 200, "{id}: {}", r.text());
            id
        }
    };
    let id = send("br-rot-0".into()).await;
    assert_eq!(key_of(&id), ACCESS_KEY);
    write_credentials(file, ROTATED_ACCESS_KEY, ROTATED_SECRET_KEY);
    // Every request keeps succeeding while Envoy picks the new file up.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(15);
    let mut n = 1;
    loop {
        let id = send(format!("br-rot-{n}")).await;
        if key_of(&id) == ROTATED_ACCESS_KEY {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "still signing with the old key after 15 s ({n} requests)");
        n += 1;
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}
