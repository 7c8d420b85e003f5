//! Google service-account key files (`credential.google_service_account`) in real Envoy, on the
//! Wasm and the native build (`--concurrency 2`): the key file's JSON is in the proxy's
//! environment; the module signs an RS256 assertion and trades it at a mock token endpoint
//! (`mock/google_oauth2.rs`, which verifies the signature with the key's public half, with
//! ring) for tokens the mock Vertex AI provider `gcloud` accepts; `keyed` is an ordinary keyed
//! provider to fail over to.
//!
//! - Claude on Vertex by a key-file token, one fetch for both workers;
//! - a key the endpoint does not know signs: every assertion refused, `gcloud` skipped at the
//!   decision (no failed request, the fallback serves);
//! - the token endpoint down at start: `gcloud` skipped, then used once it is up.

use std::time::{Duration, Instant};

use serde_json::{json, Value};
use switchyard_integration::client::Reply;
use switchyard_integration::envoy::Build;
use switchyard_integration::mock::google_oauth2::{Expected, TokenEndpoint};
use switchyard_integration::mock::Behavior;
use switchyard_integration::token_stack::{self, until_gcloud_serves, TokenStack};

const KEY_PEM: &str = include_str!("../../src/tokens/testdata/test-only-sa-key.pem");
const OTHER_KEY_PEM: &str = include_str!("../../src/tokens/testdata/test-only-other-key.pem");
const PUBLIC_DER: &[u8] = include_bytes!("../../src/tokens/testdata/test-only-sa-key.rsapub.der");
const EMAIL: &str = "router@proj.iam.gserviceaccount.com";
const KID: &str = "0123456789abcdef0123456789abcdef01234567";
const TOKEN_URI: &str = "https://oauth2.googleapis.com/token";

fn key_file(pem: &str) -> String {
    json!({"type": "service_account", "project_id": "proj", "private_key_id": KID, "private_key": pem,
           "client_email": EMAIL, "client_id": "1", "token_uri": TOKEN_URI})
    .to_string()
}

fn catalog() -> Value {
    token_stack::claude_on_vertex_catalog(
        json!({"google_service_account": {"env": "SY_TEST_SA_KEY", "cluster": "google_oauth2", "timeout_ms": 2000}}),
    )
}

type Stack = TokenStack<TokenEndpoint>;

/// A stack of its own: the token endpoint (down at start if `down`), the two providers and
/// Envoy with `pem`'s key file in its environment.
fn start(build: Build, pem: &'static str, down: bool, tag: &'static str) -> Stack {
    token_stack::start(
        tag,
        build,
        catalog(),
        "gcloud",
        move || async move {
            let expected = Expected {
                client_email: EMAIL.into(),
                private_key_id: KID.into(),
                public_key_der: PUBLIC_DER.to_vec(),
                token_uri: TOKEN_URI.into(),
            };
            let endpoint = TokenEndpoint::start(expected, Duration::from_secs(3_600)).await.expect("endpoint");
            endpoint.set_down(down);
            let behavior =
                Behavior { google_tokens: Some(std::sync::Arc::clone(&endpoint.issuer)), ..Behavior::default() };
            (endpoint, behavior)
        },
        move |endpoint, cfg| {
            cfg.token_endpoint = Some(("127.0.0.1".into(), endpoint.addr.port()));
            cfg.env_keys = vec!["SY_TEST_SA_KEY".into()];
            vec![("SY_TEST_SA_KEY", key_file(pem))]
        },
    )
}

async fn chat(stack: &Stack, id: &str, provider: Value) -> Reply {
    token_stack::chat_g(stack.addr, id, provider).await
}

fn order() -> Value {
    json!({"order": ["gcloud", "keyed"]})
}

async fn claude_on_vertex_by_a_key_file_token_fetched_once(build: Build, tag: &'static str) {
    let stack = start(build, KEY_PEM, false, tag);
    until_gcloud_serves(&stack, "kf-warm", Duration::from_secs(10)).await;
    tokio::time::sleep(Duration::from_millis(1_500)).await; // many ticks on both workers
    for i in 0..20 {
        let id = format!("kf-{i}");
        let r = chat(&stack, &id, json!({"only": ["gcloud"]})).await;
        assert_eq!(r.status, 200, "{}", r.text());
        assert!(!format!("{:?}{}", r.headers, r.text()).contains("ya29."), "the token reached the caller");
        for got in stack.cloud.received_for(&id) {
            let auth = got.header("authorization").unwrap_or_default();
            assert!(auth.starts_with("Bearer ya29.c.mock-"), "{auth}");
            assert!(got.path.ends_with(":rawPredict"), "{}", got.path);
        }
    }
    assert_eq!(stack.source.issuer.fetches(), 1, "one fetch for both workers");
    assert_eq!(stack.source.refused(), 0, "every assertion verified");
    assert_eq!(stack.stat("switchyard_access_token_fetches_total", "result=\"ok\""), 1);
    assert_eq!(stack.source.issuer.checks().1, 0, "no token refused by Vertex");
    assert!(stack.keyed.received_for("kf-0").is_empty());
}

async fn a_bad_signature_is_refused_and_the_provider_skipped(build: Build, tag: &'static str) {
    let stack = start(build, OTHER_KEY_PEM, false, tag);
    let t0 = Instant::now();
    while stack.source.refused() == 0 {
        assert!(t0.elapsed() < Duration::from_secs(10), "no assertion reached the endpoint");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    for i in 0..5 {
        let id = format!("bad-{i}");
        let r = chat(&stack, &id, order()).await;
        assert_eq!(r.status, 200, "{}", r.text());
        assert_eq!(r.header("x-switchyard-provider"), Some("keyed"));
        assert!(stack.cloud.received_for(&id).is_empty(), "no attempt without a token");
    }
    assert_eq!(stack.source.issuer.fetches(), 0, "no token issued for a bad signature");
    assert!(stack.stat("switchyard_access_token_fetches_total", "result=\"http_error\"") >= 1);
    assert!(stack.stat("switchyard_access_token_missing_total", "provider=\"gcloud\"") >= 5);
}

async fn the_token_endpoint_down_at_start_then_up(build: Build, tag: &'static str) {
    let stack = start(build, KEY_PEM, true, tag);
    let t0 = Instant::now();
    let failed = |s: &Stack| {
        s.stat("switchyard_access_token_fetches_total", "result=\"unreachable\"")
            + s.stat("switchyard_access_token_fetches_total", "result=\"http_error\"")
    };
    while failed(&stack) == 0 {
        assert!(t0.elapsed() < Duration::from_secs(10), "no fetch was tried");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let r = chat(&stack, "ep-down", order()).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.header("x-switchyard-provider"), Some("keyed"));
    assert!(stack.cloud.received_for("ep-down").is_empty());
    stack.source.set_down(false);
    until_gcloud_serves(&stack, "ep-up", Duration::from_secs(20)).await;
    assert!(stack.source.issuer.fetches() >= 1);
}

#[tokio::test]
async fn wasm_claude_on_vertex_by_a_key_file_token_fetched_once() {
    claude_on_vertex_by_a_key_file_token_fetched_once(Build::Wasm, "gkey-once-wasm").await;
}

#[tokio::test]
async fn native_claude_on_vertex_by_a_key_file_token_fetched_once() {
    claude_on_vertex_by_a_key_file_token_fetched_once(Build::Native, "gkey-once-native").await;
}

#[tokio::test]
async fn wasm_a_bad_signature_is_refused_and_the_provider_skipped() {
    a_bad_signature_is_refused_and_the_provider_skipped(Build::Wasm, "gkey-bad-wasm").await;
}

#[tokio::test]
async fn native_a_bad_signature_is_refused_and_the_provider_skipped() {
    a_bad_signature_is_refused_and_the_provider_skipped(Build::Native, "gkey-bad-native").await;
}

#[tokio::test]
async fn wasm_the_token_endpoint_down_at_start_then_up() {
    the_token_endpoint_down_at_start_then_up(Build::Wasm, "gkey-down-wasm").await;
}

#[tokio::test]
async fn native_the_token_endpoint_down_at_start_then_up() {
    the_token_endpoint_down_at_start_then_up(Build::Native, "gkey-down-native").await;
}
